"""Each service's rolling update under way (healerd.core.rollouts), kept between its
passes by the reconciler: its own memory, under its own lock (the loop's memory is the
loop's, changed only through a pass's MemoryDelta)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from healerd.core import rollouts
from healerd.core.clock import Clock
from healerd.core.report import Reporter
from healerd.core.rollouts import Rollout
from healerd.model import ObservedContainer, ServiceSpec
from healerd.vocabulary import EventKind


class RolloutBook:
    def __init__(self, clock: Clock, reporter: Reporter) -> None:
        self._clock = clock
        self._report = reporter
        self._lock = threading.Lock()
        self._by_key: dict[str, Rollout] = {}

    def get(self, key: str) -> Rollout | None:
        with self._lock:
            return self._by_key.get(key)

    def halted(self, key: str, spec: ServiceSpec | None) -> str:
        """Why the service's rollout stopped ("" while it may go on)."""
        return rollouts.halted(self.get(key), spec, self._clock.monotonic())

    def track(
        self,
        key: str,
        spec: ServiceSpec | None,
        mine: Sequence[ObservedContainer],
        now: float,
        mono: float,
    ) -> None:
        """Start, advance or finish the service's record, and say so in the events."""
        with self._lock:
            r, event = rollouts.track(self._by_key.get(key), spec, mine, now, mono)
            if r is None:
                self._by_key.pop(key, None)
            else:
                self._by_key[key] = r
        if event is EventKind.ROLLOUT_STARTED and spec is not None:
            n = rollouts.stale_count(spec, mine)
            self._report.events.record(event, key, f"{n} container(s) to replace")
        elif event is EventKind.ROLLOUT_COMPLETE:
            self._report.events.record(event, key, "all containers run the new spec")

    def hold(self, key: str) -> None:
        """No lack of progress (healerd holds the rollout, or it waits for room): the
        progress deadline starts again."""
        with self._lock:
            r = self._by_key.get(key)
            if r is not None:
                r.last_progress = self._clock.monotonic()

    def batched(self, key: str) -> None:
        """A batch of the rollout was applied: the next waits `update_config.delay`."""
        with self._lock:
            r = self._by_key.get(key)
            if r is not None:
                r.last_batch = self._clock.monotonic()

    def forget(self, key: str) -> None:
        with self._lock:
            self._by_key.pop(key, None)


__all__ = ["RolloutBook"]
