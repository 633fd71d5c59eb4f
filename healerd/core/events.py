"""An in-memory ring buffer of what healerd did and why, for `healerctl events`."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from healerd.core.clock import Clock
from healerd.vocabulary import EventKind


@dataclass(frozen=True)
class Event:
    seq: int
    time: float  # wall clock, seconds since the epoch
    kind: EventKind
    service: str
    message: str
    container: str = ""


class EventLog:
    def __init__(self, clock: Clock, capacity: int = 1000) -> None:
        self._clock = clock
        self._events: deque[Event] = deque(maxlen=capacity)
        self._cond = threading.Condition()
        self._seq = 0
        # Told of each event as it is recorded, outside the lock (the notifications'
        # intake: it only queues, so a slow target never holds the recorder back).
        self.listeners: list[Callable[[Event], None]] = []

    def record(self, kind: EventKind, service: str, message: str, container: str = "") -> Event:
        if not isinstance(kind, EventKind):
            # mypy holds every caller to it; this holds what mypy cannot see.
            raise TypeError(f"an event's kind is an EventKind, not {kind!r}")
        with self._cond:
            self._seq += 1
            event = Event(self._seq, self._clock.time(), kind, service, message, container)
            self._events.append(event)
            self._cond.notify_all()
        for listen in self.listeners:
            listen(event)
        return event

    def since(self, seq: int = 0, *, wall_time: float | None = None) -> list[Event]:
        """Events after sequence number `seq` (and not older than `wall_time`), oldest first."""
        with self._cond:
            return [
                e
                for e in self._events
                if e.seq > seq and (wall_time is None or e.time >= wall_time)
            ]

    def wait(self, seq: int, timeout: float) -> list[Event]:
        """Block until there is an event after `seq` or `timeout` passes (for --follow)."""
        with self._cond:
            self._cond.wait_for(lambda: self._seq > seq, timeout=timeout)
            return [e for e in self._events if e.seq > seq]

    @property
    def last_seq(self) -> int:
        with self._cond:
            return self._seq
