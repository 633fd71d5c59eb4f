"""The loop's memory of runs and deaths (healerd.core.observe.Memory) with the lock that
guards it: the looks fold lists into it, the inputs fold events, the pass and the reads
read it. One owner of the lock, so no collaborator is handed another's."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from healerd.core.memdelta import snapshot
from healerd.core.observe import Memory


class LoopMemory:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.mem = Memory()

    @contextmanager
    def held(self) -> Iterator[Memory]:
        with self.lock:
            yield self.mem

    def starting(self, service: str) -> bool:
        """Whether a start in place of one of `service`'s containers is on its way."""
        with self.lock:
            return any(row.service == service for row in self.mem.start_rows.values())

    def snapshot(self, service: str, listed: Iterable[str]) -> Memory:
        """What a pass of `service` reads of the memory, copied under the lock (the
        pass then works without it: healerd.core.memdelta)."""
        with self.lock:
            return snapshot(self.mem, service, listed)


__all__ = ["LoopMemory"]
