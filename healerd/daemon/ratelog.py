"""Log lines that a client can make healerd repeat, said at most once per interval.

A warning per refused connection or refused request lets one client write thousands of
lines a second into the journal. `RateLimitedLog` says the first line of a kind at once
and counts the repeats within `interval` (10 s): when the interval is over, `flush()`
(or the next line of that kind) says the last of them with how many were not logged. A
steady flood thus costs one line per kind per interval, and no repeat goes uncounted.

The kinds are bounded (`max_kinds`): past that, new kinds share one, so a client cannot
grow the table by varying what it sends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OVERFLOW_KIND = "(other)"


@dataclass
class _Window:
    until: float
    suppressed: int = 0
    last: tuple[int, str, tuple[Any, ...]] | None = None
    started: float = field(default=0.0)


class RateLimitedLog:
    """At most one line per kind per `interval` through `logger`; thread-safe."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 10.0,
        *,
        max_kinds: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self.max_kinds = max_kinds
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}

    def warning(self, kind: str, msg: str, *args: Any) -> bool:
        return self.log(logging.WARNING, kind, msg, *args)

    def error(self, kind: str, msg: str, *args: Any, exc_info: bool = False) -> bool:
        return self.log(logging.ERROR, kind, msg, *args, exc_info=exc_info)

    def log(self, level: int, kind: str, msg: str, *args: Any, exc_info: bool = False) -> bool:
        """Log now (True), or count the line for later (False)."""
        now = self._clock()
        with self._lock:
            if kind not in self._windows and len(self._windows) >= self.max_kinds:
                kind = OVERFLOW_KIND
            w = self._windows.get(kind)
            if w is not None and now < w.until:
                w.suppressed += 1
                w.last = (level, msg, args)
                return False
            pending = w.suppressed if w is not None else 0
            since = w.started if w is not None else now
            self._windows[kind] = _Window(until=now + self.interval, started=now)
        if pending:
            msg, args = msg + " %s", (*args, _suffix(pending, now - since))
        self.logger.log(level, msg, *args, exc_info=exc_info)
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


__all__ = ["OVERFLOW_KIND", "RateLimitedLog"]
