"""Log lines that a client (or a flapping engine) can make healerd repeat, said at most
`burst` times per interval.

A warning per refused connection or refused request lets one client write thousands of
lines a second into the journal; an engine that goes away made the loop write a line
per failed call and per state change (issue 28: 100 lines in 13 s). `RateLimitedLog`
says the first `burst` lines of a kind at once and counts the repeats within `interval`
(10 s): when the interval is over, `flush()` (or the next line of that kind) says the
last of them with how many were not logged. A steady flood thus costs `burst` + 1 lines
per kind per interval, no repeat goes uncounted, and the last line of a kind said is
its latest (for a state, the state it is in).

The kinds are bounded (`max_kinds`): past that, new kinds share one, so a client cannot
grow the table by varying what it sends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

OVERFLOW_KIND = "(other)"
# The loop's repeatable lines (failed actions, state changes, the engine lost and back):
# its window, and its kinds, per service, so as many as there are services (a flood from
# clients is the API's, which keeps 256).
LOOP_WINDOW = 10.0
LOOP_KINDS = 100_000
Extra = Mapping[str, object] | None


@dataclass
class _Window:
    until: float
    suppressed: int = 0
    last: tuple[int, str, tuple[Any, ...]] | None = None
    started: float = field(default=0.0)
    said: int = 1  # lines logged in this window


class RateLimitedLog:
    """At most `burst` lines per kind per `interval` through `logger`; thread-safe."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 10.0,
        *,
        max_kinds: int = 256,
        burst: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self.max_kinds = max_kinds
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}

    def info(self, kind: str, msg: str, *args: Any, extra: Extra = None) -> bool:
        return self.log(logging.INFO, kind, msg, *args, extra=extra)

    def warning(self, kind: str, msg: str, *args: Any, extra: Extra = None) -> bool:
        return self.log(logging.WARNING, kind, msg, *args, extra=extra)

    def error(self, kind: str, msg: str, *args: Any, exc_info: bool = False) -> bool:
        return self.log(logging.ERROR, kind, msg, *args, exc_info=exc_info)

    def log(
        self,
        level: int,
        kind: str,
        msg: str,
        *args: Any,
        exc_info: bool = False,
        extra: Extra = None,
    ) -> bool:
        """Log now (True), or count the line for later (False). `extra` (journald
        fields) goes with the line when it is logged now; a count said later has none."""
        now = self._clock()
        with self._lock:
            if kind not in self._windows and len(self._windows) >= self.max_kinds:
                kind = OVERFLOW_KIND
            w = self._windows.get(kind)
            if w is not None and now < w.until:
                if w.said < self.burst and not w.suppressed:
                    w.said += 1
                    pending = 0
                else:
                    w.suppressed += 1
                    w.last = (level, msg, args)
                    return False
            else:
                pending = w.suppressed if w is not None else 0
                since = w.started if w is not None else now
                self._windows[kind] = _Window(until=now + self.interval, started=now)
        if pending:
            msg, args = msg + " %s", (*args, _suffix(pending, now - since))
        self.logger.log(level, msg, *args, exc_info=exc_info, extra=extra)
        return True

    def pending(self) -> bool:
        """Whether a flush may have something to say or forget (else it can wait)."""
        with self._lock:
            return bool(self._windows)

    def flush(self, now: float | None = None) -> None:
        """Say the count of every kind whose interval is over, and forget quiet kinds.
        Call it every second or so (the API's reaper does)."""
        now = self._clock() if now is None else now
        due: list[tuple[int, str, tuple[Any, ...]]] = []
        with self._lock:
            for kind, w in list(self._windows.items()):
                if now < w.until:
                    continue
                if w.suppressed and w.last is not None:
                    level, msg, args = w.last
                    suffix = _suffix(w.suppressed, now - w.started)
                    due.append((level, msg + " %s", (*args, suffix)))
                    self._windows[kind] = _Window(until=now + self.interval, started=now)
                else:
                    del self._windows[kind]
        for level, msg, args in due:
            self.logger.log(level, msg, *args)

    def kinds(self) -> int:
        with self._lock:
            return len(self._windows)


def _suffix(count: int, seconds: float) -> str:
    return f"[{count} more like this in the last {seconds:.0f}s not logged]"


__all__ = ["LOOP_KINDS", "LOOP_WINDOW", "OVERFLOW_KIND", "RateLimitedLog"]
