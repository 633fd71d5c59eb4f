"""The image update checker: a thread of its own, so that a slow registry or a long
pull of a new digest never holds a reconcile worker (heals go on meanwhile)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from healerd.core.clock import Clock
from healerd.core.controller import Controller

log = logging.getLogger("healerd.updates")

# The first look after a start: soon (an image pushed while healerd was down is found),
# not at once (the first passes pin every followed service first).
FIRST_CHECK = 10.0


class UpdateChecker:
    def __init__(self, controller: Controller, clock: Clock, interval: Callable[[], float]) -> None:
        """`interval()`: auto_update_interval as the settings say now (it reloads)."""
        self._controller = controller
        self._clock = clock
        self._interval = interval
        self._kick = threading.Event()

    def kick(self) -> None:
        """Check now (healerctl, tests)."""
        self._kick.set()

    def run(self, stop: threading.Event) -> None:
        due = self._clock.monotonic() + min(FIRST_CHECK, self._interval())
        while not stop.is_set():
            wait = due - self._clock.monotonic()
            # No need to wake before it is due: a stop kicks (ImageWork.stop).
            if wait > 0 and not self._kick.wait(timeout=min(wait, 60.0)):
                continue
            self._kick.clear()
            if stop.is_set():
                return
            try:
                updated = self._controller.check_updates()
            except Exception:
                log.exception("checking for image updates failed unexpectedly")
                updated = []
            if updated:
                log.info("new image digest(s) for %s: rolling out", ", ".join(updated))
            due = self._clock.monotonic() + self._interval()
