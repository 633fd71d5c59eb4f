"""A keyed work queue in the manner of client-go's workqueue.

A key is never handed to two workers at once; adds that arrive before a key is
processed collapse into one pass; an add while the key is processed marks it
dirty so that `done` queues it again. Per-key exponential backoff never gives up.
"""

from __future__ import annotations

import threading
from collections import deque

from healerd.core.backoff import Backoff
from healerd.core.clock import Clock


class WorkQueue:
    def __init__(self, clock: Clock, backoff: Backoff) -> None:
        self._clock = clock
        self._backoff = backoff
        self._cond = threading.Condition()
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._waiting: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        # Keys added with `force` while processed: queued again at `done` even if their
        # pass ended in a backoff.
        self._forced: set[str] = set()
        # When each key was last queued (monotonic): a look at the engine begun after it
        # saw everything that key was queued for (see `queued_before`).
        self._stamps: dict[str, float] = {}
        self._shutdown = False

    # -- adding -------------------------------------------------------------

    def add(self, key: str, *, force: bool = False) -> None:
        """Queue `key` now.

        A key that is backing off after errors stays in backoff: an event is only a
        hint, and letting hints through would turn backoff into hammering. `force`
        (engine back, reload, an operator's request) clears the backoff first.
        """
        with self._cond:
            if force:
                self._failures.pop(key, None)
                if key in self._processing:
                    self._forced.add(key)
            elif self._backing_off(key):
                return
            self._add_now(key)

    def add_after(self, key: str, delay: float) -> None:
        """Queue `key` once `delay` seconds have passed; the earliest pending time wins."""
        with self._cond:
            if delay <= 0:
                self._add_now(key)
                return
            ready_at = self._clock.monotonic() + delay
            current = self._waiting.get(key)
            if current is None or ready_at < current:
                self._waiting[key] = ready_at
                self._cond.notify_all()

    def add_rate_limited(
        self, key: str, cap: float | None = None, backoff: Backoff | None = None
    ) -> float:
        """Count one more failure for `key` and queue it after its backoff (at most `cap`
        seconds); returns the delay. `backoff`: a curve of its own for this failure (a
        pull's, slower), on the same count: a key has one failure count."""
        with self._cond:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            delay = (backoff or self._backoff).delay(failures)
            if cap is not None:
                delay = min(delay, cap)
            # A retry after failure must wait its full backoff even if an earlier
            # timer was pending.
            self._waiting.pop(key, None)
            self.add_after(key, delay)
            return delay

    def add_backoff(self, key: str, delay: float) -> None:
        """Queue `key` after `delay` as a backoff of its own (a failed pull, say): like a
        rate-limited retry, hints do not cut it short; a forced add does."""
        with self._cond:
            self._failures[key] = max(1, self._failures.get(key, 0))
            self._waiting.pop(key, None)
            self.add_after(key, delay)

    def forget(self, key: str) -> None:
        """Reset the backoff of `key` after a successful pass."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def _add_now(self, key: str) -> None:
        self._waiting.pop(key, None)
        if self._shutdown:
            return
        self._stamps[key] = self._clock.monotonic()
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._cond.notify_all()

    # -- taking -------------------------------------------------------------

    def get_batch(self, max_items: int, timeout: float | None = None) -> list[str]:
        """Take up to `max_items` ready keys, waiting up to `timeout` seconds for one.

        Returns [] on timeout or shutdown. Every key returned must be passed to `done`.
        """
        with self._cond:
            deadline = None if timeout is None else self._clock.monotonic() + timeout
            while True:
                self._promote_due()
                if self._queue or self._shutdown:
                    break
                now = self._clock.monotonic()
                waits = [t - now for t in self._waiting.values()]
                if deadline is not None:
                    if now >= deadline:
                        return []
                    waits.append(deadline - now)
                self._cond.wait(max(0.0, min(waits)) if waits else None)
            if self._shutdown:
                return []
            batch: list[str] = []
            while self._queue and len(batch) < max_items:
                key = self._queue.popleft()
                self._dirty.discard(key)
                self._processing.add(key)
                batch.append(key)
            return batch

    def done(self, key: str) -> None:
        with self._cond:
            self._processing.discard(key)
            forced = key in self._forced
            self._forced.discard(key)
            if key in self._dirty and not forced and self._backing_off(key):
                # The pass ended in a backoff (a pull that failed after a minute, during
                # which a resync or an event came): those hints wait for it too, as they
                # would have had they come a moment later.
                self._dirty.discard(key)
            elif key in self._dirty and not self._shutdown:
                # Queued again only now: a look begun during its pass saw a half-done state.
                self._stamps[key] = self._clock.monotonic()
                self._queue.append(key)
                self._cond.notify_all()

    def processing(self, key: str) -> bool:
        """Whether a pass of `key` runs now (taken, not yet done)."""
        with self._cond:
            return key in self._processing

    def queued_at(self, key: str) -> float | None:
        """When `key` was last queued (monotonic), None if never."""
        with self._cond:
            return self._stamps.get(key)

    def queued_before(self, keys: list[str], moment: float) -> bool:
        """Whether every key was last queued strictly before `moment` (monotonic): then a
        list of the engine begun at `moment` is as good for them as a new one."""
        with self._cond:
            return all(self._stamps.get(k, moment) < moment for k in keys)

    def _backing_off(self, key: str) -> bool:
        return self._failures.get(key, 0) > 0 and key in self._waiting

    def _promote_due(self) -> None:
        now = self._clock.monotonic()
        for key, ready_at in list(self._waiting.items()):
            if ready_at <= now:
                self._add_now(key)

    # -- lifecycle and introspection -----------------------------------------

    def shut_down(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def pending(self) -> set[str]:
        """Keys queued, waiting on a timer, or being processed."""
        with self._cond:
            return set(self._queue) | set(self._waiting) | self._processing

    def next_delay(self) -> float | None:
        """Seconds until the next key is ready: 0 when one is queued, None when none waits."""
        with self._cond:
            if self._queue:
                return 0.0
            if not self._waiting:
                return None
            return max(0.0, min(self._waiting.values()) - self._clock.monotonic())

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)
