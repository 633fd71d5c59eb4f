"""The read budgets of the local API's callers: who pays for the engine requests a read
makes (a list when the loop's last one is stale, a log, a describe's inspects), taken
at the engine adapter's request chokepoint (healerd.engine.pacing.lane).

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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from healerd.core.clock import Clock
from healerd.core.ratelimit import TokenBucket
from healerd.engine import ContainerRuntime, LocalImage, pacing
from healerd.engine.pacing import UNPACED, Pacer
from healerd.model import ObservedContainer


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
    """The engine as each reader reaches it: `reading(reader)` puts the requests made
    in the block on the reader's budget. Without a budget (tests), readers' requests
    are not paced at all; never do they take from the heal budget."""

    def __init__(
        self,
        engine: ContainerRuntime,
        clock: Clock,
        budget: ReadBudget | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base = engine
        self._clock = clock
        self.budget = budget
        self._sleep = sleep
        self._lock = threading.Lock()
        self._privileged: Pacer = UNPACED
        self._readers: TokenBucket | None = None
        self._by_uid: OrderedDict[int | None, Lane] = OrderedDict()
        if budget is not None:
            bucket = TokenBucket(budget.privileged_rate, budget.privileged_burst, clock)
            self._privileged = Lane([bucket], budget.max_wait, sleep)
            self._readers = TokenBucket(budget.readers_rate, budget.readers_burst, clock)

    @contextmanager
    def reading(self, reader: Reader) -> Iterator[ContainerRuntime]:
        """The engine, its requests in the block on `reader`'s budget."""
        with pacing.lane(self._pacer(reader)):
            yield self.base

    def images(self, reader: Reader) -> list[LocalImage]:
        """The engine's image list, on `reader`'s budget (`healerctl images`)."""
        list_images = getattr(self.base, "list_images", None)  # the daemon's engine has it
        if list_images is None:
            return []
        with pacing.lane(self._pacer(reader)):
            return list(list_images())

    def listed(self) -> list[ObservedContainer]:
        """A list paid for already: by the reader who needed it (`pay`, LastLook.get)."""
        with pacing.lane(UNPACED):
            return self.base.list_managed()

    def pay(self, reader: Reader) -> None:
        """Take one request of `reader`'s budget now (for a list made on none)."""
        self._pacer(reader).wait()

    def _pacer(self, reader: Reader) -> Pacer:
        budget = self.budget
        if budget is None or self._readers is None or reader.privileged:
            return self._privileged
        with self._lock:
            got = self._by_uid.get(reader.uid)
            if got is None:
                own = TokenBucket(budget.uid_rate, budget.uid_burst, self._clock)
                got = self._by_uid[reader.uid] = Lane(
                    [own, self._readers], budget.max_wait, self._sleep
                )
                while len(self._by_uid) > budget.max_uids:
                    self._by_uid.popitem(last=False)
            self._by_uid.move_to_end(reader.uid)
            return got


__all__ = ["PRIVILEGED", "Lane", "ReadBudget", "ReadLanes", "ReadThrottled", "Reader"]
