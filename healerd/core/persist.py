"""What healerd remembers across its restarts: small JSON documents in `state_dir`.

The core does no file I/O: a user (the auto-updater, image GC) is handed a store; the
daemon's is a file written atomically (healerd.daemon.statefile), tests use MemoryStore.
A store that cannot be read gives None (the user starts from nothing, as after a first
start); one that cannot be written raises OSError (the user logs it and goes on with
what it has in memory).
"""

from __future__ import annotations

import copy
from typing import Any, Protocol


class StateStore(Protocol):
    def load(self) -> Any:
        """The document last saved (JSON types only), or None."""
        ...

    def save(self, data: Any) -> None:
        """Replace the document (all or nothing); raises OSError."""
        ...


class MemoryStore:
    """A store in memory: for tests, and for a daemon without a state directory."""

    def __init__(self, data: Any = None) -> None:
        self.data = copy.deepcopy(data)
        self.saves = 0

    def load(self) -> Any:
        return copy.deepcopy(self.data)

    def save(self, data: Any) -> None:
        self.data = copy.deepcopy(data)
        self.saves += 1


__all__ = ["MemoryStore", "StateStore"]
