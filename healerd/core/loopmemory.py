"""The loop's memory of runs and deaths (healerd.core.observe.Memory) with the lock that
guards it: the looks fold lists into it, the inputs fold events, the pass and the reads
read it. One owner of the lock, so no collaborator is handed another's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from healerd.core.observe import Memory


class LoopMemory:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.mem = Memory()

    @contextmanager
    def held(self) -> Iterator[Memory]:
        with self.lock:
            yield self.mem


__all__ = ["LoopMemory"]
