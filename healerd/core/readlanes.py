"""The read budgets of the local API's callers: who pays for the engine calls a read
makes (a list when the loop's last one is stale, a log, a describe's inspects).

One budget for every reader let any member of the socket's group spend it, and root's
`healerctl get` or `logs` waited behind (issue 29). Now root and the admin group read
on a lane of their own; every other uid has a bucket of its own, and all of them
together one more, so that no single uid can use up what the others read with, and
many uids cannot flood the engine. None of these is the heal budget. A call that would
wait longer than `max_wait` for its budget is refused (ReadThrottled, HTTP 429) rather
than queued behind the caller's own backlog.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from healerd.core.clock import Clock
from healerd.core.ratelimit import ThrottledEngine, TokenBucket
from healerd.engine import Engine


class ReadThrottled(Exception):
    """A reader's engine call would wait too long for its budget: refused, not queued."""


@dataclass(frozen=True)
class Reader:
    """Who reads: the peer's uid (None: unknown) and whether it is root or in the admin
    group (`privileged`)."""

    uid: int | None
    privileged: bool


# In-process readers (tests, the daemon itself) and root.
PRIVILEGED = Reader(0, True)


@dataclass(frozen=True)
class ReadBudget:
    """Calls a second and bursts: of root and the admin group together; of each other
    uid; and of all other uids together."""

    privileged_rate: float = 2.0
    privileged_burst: int = 20
    uid_rate: float = 1.0
    uid_burst: int = 10
    readers_rate: float = 4.0
    readers_burst: int = 20
    max_wait: float = 10.0
    max_uids: int = 256  # uids with a bucket of their own; the least recent is forgotten


class Lane:
    """The buckets a reader's call takes from, in turn (its own, then all readers')."""

    def __init__(
        self,
        buckets: Sequence[TokenBucket],
        max_wait: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.buckets = tuple(buckets)
        self.max_wait = max_wait
        self._sleep = sleep

    def wait(self) -> float:
        waited = 0.0
        for bucket in self.buckets:
            delay = bucket.reserve_within(self.max_wait)
            if delay is None:
                raise ReadThrottled(
                    f"read budget spent: at most {bucket.rate:g} engine call(s) a second "
                    f"(burst {bucket.burst}); try again in a few seconds"
                )
            if delay > 0:
                self._sleep(delay)
                waited += delay
        return waited


class ReadLanes:
    """The engine as each reader reaches it: through its lane's buckets. Without a
    budget (tests), every reader reaches `engine` directly."""

    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        budget: ReadBudget | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base = engine
        self._clock = clock
        self.budget = budget
        self._sleep = sleep
        self._lock = threading.Lock()
        self._privileged: ThrottledEngine | None = None
        self._readers: TokenBucket | None = None
        self._by_uid: OrderedDict[int | None, ThrottledEngine] = OrderedDict()
        if budget is not None:
            bucket = TokenBucket(budget.privileged_rate, budget.privileged_burst, clock)
            lane = Lane([bucket], budget.max_wait, sleep)
            self._privileged = ThrottledEngine(engine, lane)
            self._readers = TokenBucket(budget.readers_rate, budget.readers_burst, clock)

    def engine(self, reader: Reader) -> Engine:
        """What `reader`'s calls go through."""
        return self._throttled(reader) or self.base

    def pay(self, reader: Reader) -> None:
        """Take one call of `reader`'s budget (for a list made outside its engine)."""
        throttled = self._throttled(reader)
        if throttled is not None:
            throttled.bucket.wait()

    def _throttled(self, reader: Reader) -> ThrottledEngine | None:
        budget = self.budget
        if budget is None or self._readers is None or reader.privileged:
            return self._privileged
        with self._lock:
            got = self._by_uid.get(reader.uid)
            if got is None:
                own = TokenBucket(budget.uid_rate, budget.uid_burst, self._clock)
                lane = Lane([own, self._readers], budget.max_wait, self._sleep)
                got = self._by_uid[reader.uid] = ThrottledEngine(self.base, lane)
                while len(self._by_uid) > budget.max_uids:
                    self._by_uid.popitem(last=False)
            self._by_uid.move_to_end(reader.uid)
            return got


__all__ = ["PRIVILEGED", "Lane", "ReadBudget", "ReadLanes", "ReadThrottled", "Reader"]
