"""What the events since a look say about it: whether a look still shows a service.

A list of the engine begun at some moment shows every service queued before that moment
(the controller reuses it for a resync's later batches). It also shows a service queued
after it, last by a kill or a death of one of its containers, if nothing else happened
to that service since the look began: such an event changes nothing in a list but what
the event itself says, and the loop's memory folds that in (healerd.core.observe.as_dead).
So a `docker kill`'s start in place need not wait for another list: the kill's own pass
listed a moment before the death. Any other event (a create, a start, a destroy, a health
change) is news: the next pass lists again.
"""

from __future__ import annotations

import threading

from healerd.model import EngineAction

# Events that change nothing of a list but what they say (folded into the memory).
HINTS = frozenset({EngineAction.KILLED, EngineAction.DIED})


class LookHints:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._news: set[str] = set()  # services with news since the last look began
        self._hinted: dict[str, float | None] = {}  # when a hint last queued each service

    def event(self, service: str, action: EngineAction) -> bool:
        """Note an event; True when it is a hint (its queueing is to be `hinted`)."""
        if action in HINTS:
            return True
        with self._lock:
            self._news.add(service)
        return False

    def hinted(self, service: str, queued_at: float | None) -> None:
        """A hint queued `service` at `queued_at` (the work queue's stamp)."""
        with self._lock:
            self._hinted[service] = queued_at

    def looking(self, scope: str | None) -> None:
        """A look begins, of one service or (None) of all: their news is in it."""
        with self._lock:
            if scope is None:
                self._news.clear()
            else:
                self._news.discard(scope)

    def still_shown(self, service: str, queued_at: float | None, began: float) -> bool:
        """Whether a look begun at `began` shows what `service`, last queued at
        `queued_at`, was queued for."""
        if queued_at is None or queued_at < began:
            return True
        with self._lock:
            return self._hinted.get(service) == queued_at and service not in self._news


__all__ = ["HINTS", "LookHints"]
