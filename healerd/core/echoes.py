"""The engine events of healerd's own actions: not news to the loop.

A pass that creates or removes containers already queues itself again to look at the
result (Requeue.AGAIN). The `create`, `start` and `destroy` events of those same
containers reach the event stream a few milliseconds later, while that second pass runs,
and used to queue a third pass: one more list of every container per pass that acted. In
a storm of 500 heals at 1,000 containers those lists were engine time taken from the
creates. The executor says what it is about to do; the event of it is then dropped
(after the memory of events has seen it). Anything else, and anything done by someone
else, is still a hint.
"""

from __future__ import annotations

import threading

from healerd.core.clock import Clock
from healerd.model import EngineAction, EngineEvent

# An expected event not seen within this long is forgotten (the engine lost it, or the
# call failed before the engine acted).
EXPECT_FOR = 120.0


class OwnActions:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._names: dict[str, float] = {}  # containers about to be created, by name
        self._removals: dict[str, float] = {}  # containers about to be removed, by id
        self._starts: dict[str, float] = {}  # containers about to be started in place, by id

    def creating(self, name: str) -> None:
        with self._lock:
            self._names[name] = self._clock.monotonic()
            self._expire()

    def create_failed(self, name: str) -> None:
        """The create-and-start call for `name` failed: a container it left `created`
        (the engine restarted between the create and the start) is not on its way to
        start, and must not count as such until the memory expires (the service stayed
        short of its replicas: integration test_engine_restart_mid_rollout_...)."""
        with self._lock:
            self._names.pop(name, None)

    def creating_names(self) -> frozenset[str]:
        """Containers announced by `creating` whose start event has not come yet."""
        with self._lock:
            return frozenset(self._names)

    def starting(self, container_id: str) -> None:
        with self._lock:
            self._starts[container_id] = self._clock.monotonic()
            self._expire()

    def removing(self, container_id: str) -> None:
        with self._lock:
            self._removals[container_id] = self._clock.monotonic()
            self._expire()

    def consume(self, event: EngineEvent) -> bool:
        """True for the event of an action healerd announced: drop it as a hint."""
        with self._lock:
            if event.action is EngineAction.CREATED:
                return event.name in self._names
            if event.action is EngineAction.STARTED:
                if self._starts.pop(event.container_id, None) is not None:
                    return True
                return self._names.pop(event.name, None) is not None
            if event.action is EngineAction.DESTROYED:
                return self._removals.pop(event.container_id, None) is not None
            return False

    def _expire(self) -> None:
        if len(self._names) + len(self._removals) + len(self._starts) < 64:
            return
        oldest = self._clock.monotonic() - EXPECT_FOR
        for table in (self._names, self._removals, self._starts):
            for key in [k for k, t in table.items() if t < oldest]:
                del table[key]


__all__ = ["EXPECT_FOR", "OwnActions"]
