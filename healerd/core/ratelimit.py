"""A cap on healerd's own engine requests: the token bucket the engine adapter's meter
takes from at every request (healerd.engine.pacing).

Like client-go's QPS/burst: bursts up to `burst` requests pass at once, beyond that
they wait for tokens at `rate` per second. An event storm then costs the host a bounded
number of engine requests, and the work queue's merging of keys keeps the backlog small.

Readers (the API's container list and diff) do not spend that budget: `LastLook` serves
them the loop's last list while it is fresh, and otherwise lists once for all readers
together, through a bucket of their own (one list a second, wired by the daemon).
"Fresh" is younger than a second and begun after the last event (a list made just
before healerd's own create would hide that container from a describe right after
it), or, while the event stream is connected, begun at least QUIET_SETTLE after the
last event and reconnect: then nothing it shows has changed (at 1,000 containers a
`healerctl get` at idle cost a list of 1,000 rows, 40 % of its time).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from healerd.core.clock import Clock
from healerd.model import ObservedContainer

# A list younger than this is what readers are shown, rather than a list of their own.
READ_MAX_AGE = 1.0
# How long a list the event stream says nothing about since may still be shown: a bound
# for a stream that is silent without being closed (the loop lists every 30 s anyway).
QUIET_MAX_AGE = 60.0
# The engine's list lags its events (a `die` comes before the list says exited): a list
# is taken as current only if it began this long after the last event, or after the
# stream (re)connected. As observe.SUSPECT_WINDOW, how long an event may go unconfirmed.
QUIET_SETTLE = 2.0


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

    def reserve_within(self, max_wait: float) -> float | None:
        """As reserve, unless the token would come later than `max_wait` from now:
        then None, and nothing taken."""
        with self._lock:
            self._refill()
            delay = 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate
            if delay > max_wait:
                return None
            self._tokens -= 1.0
            return delay

    def wait(self) -> float:
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
        return delay


class LastLook:
    """The last list of healerd's containers and when it was made, for readers: the
    loop offers each of its lists; `get` returns the last one while it is younger than
    `max_age`, else lists with `lister` (at most one reader at a time: the others wait
    and take that list). Thread-safe."""

    def __init__(
        self,
        clock: Clock,
        lister: Callable[[], list[ObservedContainer]],
        max_age: float = READ_MAX_AGE,
        quiet_max_age: float = QUIET_MAX_AGE,
    ) -> None:
        self._clock = clock
        self._lister = lister
        self.max_age = max_age
        self.quiet_max_age = quiet_max_age
        # Since when the event stream has been connected with no event (None: down).
        self._quiet_since: float | None = None
        self._changed_at: float | None = None  # the last event's arrival
        self._lock = threading.Lock()  # guards the list and its time
        self._listing = threading.Lock()  # one reader's list at a time
        self._at: float | None = None
        self._containers: tuple[ObservedContainer, ...] = ()
        self.listed = 0  # lists made for readers (the loop's are not counted)

    def offer(self, containers: list[ObservedContainer], at: float | None = None) -> None:
        """A list just made (by the loop), at monotonic time `at` (default now)."""
        at = self._clock.monotonic() if at is None else at
        snapshot = tuple(containers)
        with self._lock:
            if self._at is None or at >= self._at:
                self._at, self._containers = at, snapshot

    def stream(self, connected: bool) -> None:
        """The event stream (re)connected, from when on no change goes unseen; or lost."""
        with self._lock:
            self._quiet_since = self._clock.monotonic() if connected else None

    def changed(self) -> None:
        """An event came: a list begun before now may no longer show what is."""
        with self._lock:
            self._changed_at = self._clock.monotonic()
            if self._quiet_since is not None:
                self._quiet_since = self._changed_at

    def fresh(self) -> list[ObservedContainer] | None:
        with self._lock:
            if self._at is None:
                return None
            age = self._clock.monotonic() - self._at
            quiet = self._quiet_since is not None and self._quiet_since + QUIET_SETTLE < self._at
            recent = age < self.max_age and (
                self._changed_at is None or self._changed_at < self._at
            )
            if not recent and not (quiet and age < self.quiet_max_age):
                return None
            return list(self._containers)

    def get(self, pay: Callable[[], object] = lambda: None) -> list[ObservedContainer]:
        """The containers as of at most `max_age` ago. Raises EngineError when a list
        was needed and failed. `pay`: the caller's read budget, taken when the list is
        stale before the list is made, outside the lock: a caller that waits for its
        budget holds up no one else (core/readlanes.py)."""
        got = self.fresh()
        if got is not None:
            return got
        pay()
        with self._listing:
            got = self.fresh()  # another reader listed while this one waited
            if got is not None:
                return got
            started = self._clock.monotonic()
            listed = self._lister()
            self.listed += 1
            self.offer(listed, started)
            return listed


__all__ = [
    "QUIET_MAX_AGE",
    "QUIET_SETTLE",
    "READ_MAX_AGE",
    "LastLook",
    "TokenBucket",
]
