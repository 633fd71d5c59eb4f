"""Whether the engine answers: the loop's one list call goes through here, which notes
an outage once (not at every pass), and a return (so every service is looked at again).

A line when the engine is lost, one when it is back, and a reminder every
`engine_down_log_interval` while it stays away; an engine that flaps (a dockerd
shutting down answers some calls and refuses others for a second or two) is said
ENGINE_BURST times per window, then counted (healerd.core.ratelog)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable

from healerd.core.clock import Clock
from healerd.core.events import EventLog
from healerd.core.ratelog import LOOP_WINDOW, RateLimitedLog
from healerd.core.timings import Timings
from healerd.engine import Engine, EngineError, EngineUnavailable
from healerd.model import ObservedContainer
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.controller")

# Lines about the engine (lost, back, still away) said at once per LOOP_WINDOW.
ENGINE_BURST = 2


class EngineHealth:
    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        events: EventLog,
        down_log_interval: float,
        *,
        guard: Callable[[], None],
        on_back: Callable[[], None],
        timings: Timings,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._events = events
        self._interval = down_log_interval
        self._t = timings
        self._guard = guard
        self._guarded = False
        self._on_back = on_back
        self._logged_at: float | None = None
        self._down_since: float | None = None
        self.quiet = RateLimitedLog(log, LOOP_WINDOW, burst=ENGINE_BURST, clock=clock.monotonic)
        self.ok: bool | None = None
        self.version: str | None = None
        self.api_version: str | None = None
        self.kind: str | None = None
        self.data_root: str | None = None
        self.list_error = ""

    def list_managed(
        self, keys: Iterable[str], service: str | None = None
    ) -> list[ObservedContainer] | None:
        """The engine's list (of `service` only, if given); None when it cannot be read
        (`keys` wait, for the log)."""
        try:
            if not self._guarded:
                # Before the first look: may this healerd act on this engine at all?
                self._guard()
                self._guarded = True
            listed = self._engine.list_managed(service)
        except EngineError as exc:
            self._failed(exc, keys)
            return None
        self._reachable()
        return listed

    def recheck(self) -> float:
        """The longest wait of a service before it looks again while the engine cannot
        be listed (Timings.engine_recheck_fast, then _slow)."""
        since = self._down_since
        if since is None or self._clock.monotonic() - since < self._t.engine_fast_for:
            return self._t.engine_recheck_fast
        return self._t.engine_recheck_slow

    def _failed(self, exc: EngineError, keys: Iterable[str]) -> None:
        self.list_error = str(exc)
        now = self._clock.monotonic()
        if self._down_since is None:
            self._down_since = now
        was_ok = self.ok
        if isinstance(exc, EngineUnavailable):
            self.ok = False
        last = self._logged_at
        if was_ok is not False or last is None or now - last >= self._interval:
            self._logged_at = now
            waiting = ", ".join(sorted(k for k in keys if k)) or "-"
            self.quiet.warning(
                "engine", "cannot list containers: %s (services wait: %s)", exc, waiting
            )
            if was_ok is not False:
                self._events.record(EventKind.ENGINE_LOST, "", str(exc))

    def _reachable(self) -> None:
        self._down_since = None
        if self.ok is False:
            self._events.record(EventKind.ENGINE_BACK, "", "engine reachable again")
            self.quiet.info("engine", "engine reachable again: resyncing every service")
            self.ok = True
            self._on_back()
        if self.version is None or self.ok is not True:
            with contextlib.suppress(EngineError):
                self.version = self._engine.version()
                self.api_version = self._engine.api_version()
                self.kind = self._engine.engine_kind()
        if self.data_root is None or self.ok is not True:
            # The disk figures and the pull check need it: retried until known.
            with contextlib.suppress(EngineError):
                self.data_root = self._engine.data_root()
        self.ok = True


__all__ = ["EngineHealth"]
