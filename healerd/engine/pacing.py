"""The budget of engine requests, taken at the adapter's one request chokepoint.

As client-go's rate limiter sits in its REST client's transport, every HTTP request an
adapter makes takes from its `Meter` first (healerd.engine.docker.client mounts it on
the connection pool; the test fake takes it per call): so the budget counts what the
engine is really asked, whatever a typed call costs in requests (a create with its
network, a log with its inspect). The daemon paces the meter with the heal budget
(engine_calls_per_second, core.ratelimit.TokenBucket).

A caller that is not the loop reads on a budget of its own: requests made inside
`lane(pacer)` take from `pacer` instead (the API's readers, per uid:
core/readlanes.py; the hand-off at a stop: none). The lane is a context variable, as a
Go request carries its context: it holds for the calling thread, never for another.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol


class Pacer(Protocol):
    def wait(self) -> float:
        """Block until a request may go (raise to refuse it); returns the seconds waited."""
        ...


class Unpaced:
    """No budget: every request goes at once."""

    def wait(self) -> float:
        return 0.0


UNPACED = Unpaced()


@dataclass
class CallStats:
    calls: int = 0  # requests that took from the budget
    throttled: int = 0  # requests that had to wait for a token
    throttled_seconds: float = 0.0


_LANE: ContextVar[Pacer | None] = ContextVar("healerd_engine_lane", default=None)


@contextmanager
def lane(pacer: Pacer) -> Iterator[None]:
    """The engine requests this thread makes in the block take from `pacer`, not from
    the engine's own budget (nor are they counted in its stats)."""
    token = _LANE.set(pacer)
    try:
        yield
    finally:
        _LANE.reset(token)


class Meter:
    """An adapter's budget: `take()` before each request."""

    def __init__(self, pacer: Pacer = UNPACED) -> None:
        self.pacer = pacer
        self.stats = CallStats()
        self._lock = threading.Lock()

    def take(self) -> None:
        other = _LANE.get()
        if other is not None:
            other.wait()
            return
        waited = self.pacer.wait()
        with self._lock:
            self.stats.calls += 1
            if waited > 0:
                self.stats.throttled += 1
                self.stats.throttled_seconds += waited


__all__ = ["UNPACED", "CallStats", "Meter", "Pacer", "Unpaced", "lane"]
