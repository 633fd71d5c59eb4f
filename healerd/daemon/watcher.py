"""Keeps an engine event stream open; events only put service keys into the queue."""

from __future__ import annotations

import logging
import threading

from healerd.core.clock import Clock
from healerd.core.controller import DISCOVER, Controller, LoopSettings
from healerd.core.ratelog import LOOP_WINDOW, RateLimitedLog
from healerd.engine import EngineError, EventSource

log = logging.getLogger("healerd.watcher")


class EventWatcher:
    """Reconnects with backoff forever. After every (re)connect it queues every key,
    since whatever happened while the stream was down went unseen."""

    def __init__(
        self,
        engine: EventSource,
        controller: Controller,
        clock: Clock,
        loop: LoopSettings,
    ) -> None:
        """`loop`: its timings' reconnect_backoff, and how often a stream that stays
        lost is said again (engine_down_log_interval)."""
        self._engine = engine
        self._controller = controller
        self._clock = clock
        self._backoff = loop.timings.reconnect_backoff
        self._log_interval = loop.engine_down_log_interval
        self._kick = threading.Event()
        self._failures = 0
        self._lost = False
        # Lost and back: said at most twice per window, then counted (a stream that
        # flaps while the engine shuts down).
        self._quiet = RateLimitedLog(log, LOOP_WINDOW, burst=2, clock=clock.monotonic)

    def kick(self) -> None:
        """Skip the current reconnect delay (the engine answered elsewhere)."""
        self._kick.set()

    def _connected(self) -> None:
        lost = self._lost
        if lost:
            self._quiet.info("stream", "event stream back: resyncing every service")
        self._failures, self._lost = 0, False
        self._controller.stream_state(True)
        # Not forced: a stream that keeps dropping must not undo every key's backoff (the
        # controller forces a resync itself when it finds the engine back).
        self._controller.enqueue_all()
        if lost:
            # But every key may be waiting out a long backoff from the outage (up to
            # backoff_max), and hints do not cut a backoff short: one forced discovery
            # pass looks now, and if the engine was down, finding it back forces the rest.
            self._controller.reconcile_now(DISCOVER)

    def run(self, stop: threading.Event) -> None:
        logged_at: float | None = None
        while not stop.is_set():
            self._kick.clear()
            self._quiet.flush()
            reason = "stream ended"
            try:
                self._engine.watch(self._controller.on_event, self._connected)
            except EngineError as exc:
                reason = str(exc)
            except Exception as exc:
                log.exception("event watcher failed unexpectedly")
                reason = f"unexpected {type(exc).__name__}"
            self._controller.stream_state(False)
            if stop.is_set():
                return
            self._failures += 1
            self._lost = True
            now = self._clock.monotonic()
            if self._failures == 1 or logged_at is None or now - logged_at >= self._log_interval:
                logged_at = now
                self._quiet.warning("stream", "engine event stream lost (%s); reconnecting", reason)
            self._kick.wait(self._backoff.delay(self._failures))

    def stop(self) -> None:
        self._engine.stop_watch()
        self._kick.set()
