"""A cap on healerd's own engine calls: a token bucket in front of the engine adapter.

Like client-go's QPS/burst: bursts up to `burst` calls pass at once, beyond that calls
wait for tokens at `rate` per second. An event storm then costs the host a bounded
number of engine requests, and the work queue's merging of keys keeps the backlog small.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from healerd.core.clock import Clock
from healerd.engine import Engine
from healerd.model import EngineEvent, ObservedContainer, ServiceSpec


class TokenBucket:
    def __init__(
        self,
        rate: float,
        burst: int,
        clock: Clock,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._sleep = sleep
        self.rate, self.burst = rate, burst
        self._tokens = float(burst)
        self._last = clock.monotonic()

    def update(self, rate: float, burst: int) -> None:
        with self._lock:
            self._refill()
            self.rate, self.burst = rate, burst
            self._tokens = min(self._tokens, float(burst))

    def _refill(self) -> None:
        now = self._clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate)
        self._last = now

    def reserve(self) -> float:
        """Take a token, possibly one not there yet; returns how long to wait for it.
        Waiters queue up in order: each takes the next token to come."""
        with self._lock:
            self._refill()
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def wait(self) -> float:
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
        return delay


@dataclass
class CallStats:
    calls: int = 0
    throttled: int = 0  # calls that had to wait for a token
    throttled_seconds: float = 0.0


class ThrottledEngine:
    """Engine wrapper: every call takes a token first (a watch takes one per connect)."""

    def __init__(self, engine: Engine, bucket: TokenBucket) -> None:
        self._engine = engine
        self.bucket = bucket
        self.stats = CallStats()
        self._lock = threading.Lock()

    def _take(self) -> None:
        waited = self.bucket.wait()
        with self._lock:
            self.stats.calls += 1
            if waited > 0:
                self.stats.throttled += 1
                self.stats.throttled_seconds += waited

    def version(self) -> str:
        self._take()
        return self._engine.version()

    def identity(self) -> str:
        self._take()
        return self._engine.identity()

    def data_root(self) -> str | None:
        self._take()
        return self._engine.data_root()

    def list_managed(self) -> list[ObservedContainer]:
        self._take()
        return self._engine.list_managed()

    def create_and_start(self, spec: ServiceSpec, name: str, labels: Mapping[str, str]) -> str:
        self._take()  # create and start are two requests: take a token for each
        self._take()
        return self._engine.create_and_start(spec, name, labels)

    def image_present(self, image: str) -> bool:
        self._take()
        return self._engine.image_present(image)

    def image_size_hint(self, image: str) -> int | None:
        self._take()
        return self._engine.image_size_hint(image)

    def pull(self, image: str) -> None:
        self._take()
        self._engine.pull(image)

    def remove(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        self._take()
        self._engine.remove(container, stop_timeout)

    def watch(
        self, on_event: Callable[[EngineEvent], None], on_connected: Callable[[], None]
    ) -> None:
        self._take()
        self._engine.watch(on_event, on_connected)

    def stop_watch(self) -> None:
        self._engine.stop_watch()


__all__ = ["CallStats", "ThrottledEngine", "TokenBucket"]
