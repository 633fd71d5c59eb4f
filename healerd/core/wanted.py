"""What the operator wants of the loop: the declaration (with followed tags pinned) and
the services paused. Each holds its own lock; the inputs write them, everyone reads."""

from __future__ import annotations

import threading

from healerd.config import DesiredState
from healerd.core.updates import Updates
from healerd.model import ServiceSpec


class Declared:
    """`declared` is what the files say, `desired` the same with followed tags pinned
    (healerd.core.updates); the two change together, under one lock. Until a config
    has been read, nothing counts as undeclared: a conf.d that cannot be read at start
    must not read as "remove everything"."""

    def __init__(self, updates: Updates) -> None:
        self._updates = updates
        self._lock = threading.Lock()
        self._declared = self._desired = DesiredState({}, (), hold_orphans=True, broken_files=())

    @property
    def desired(self) -> DesiredState:
        return self._desired

    @property
    def declared(self) -> DesiredState:
        with self._lock:
            return self._declared

    def spec(self, key: str) -> ServiceSpec | None:
        return self._desired.services.get(key)

    def replace(self, state: DesiredState) -> DesiredState:
        """Swap in a new declaration; returns the one before."""
        with self._lock:
            old, self._declared = self._declared, state
            self._desired = self._updates.apply_all(state)
        return old

    def repin(self) -> None:
        """A pin moved: pin the declaration again (never a stale one, never a stale pin)."""
        with self._lock:
            self._desired = self._updates.apply_all(self._declared)


class Paused:
    """Services an operator paused: left alone until resumed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paused: set[str] = set()

    def add(self, service: str) -> None:
        with self._lock:
            self._paused.add(service)

    def discard(self, service: str) -> None:
        with self._lock:
            self._paused.discard(service)

    def has(self, service: str) -> bool:
        with self._lock:
            return service in self._paused

    def all(self) -> set[str]:
        with self._lock:
            return set(self._paused)


__all__ = ["Declared", "Paused"]
