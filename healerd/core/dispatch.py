"""The loop itself: take service keys from the work queue, look once per batch
(healerd.core.looks), run each key's pass on a worker, and settle its outcome. `settle`
is the one place an outcome becomes work-queue calls and a status: after a pass, no
other code writes to the queue. The path of one heal through the files is in
docs/architecture.md, "The heal path"."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from healerd.core.clock import Clock
from healerd.core.engine_health import EngineHealth
from healerd.core.events import EventLog
from healerd.core.executor import Executor
from healerd.core.looks import Looks
from healerd.core.loopmemory import LoopMemory
from healerd.core.loopsettings import DISCOVER, LoopSettings
from healerd.core.outcome import Facts, Outcome, Requeue, decide
from healerd.core.prune import networks_kept, prune_volumes
from healerd.core.readmodel import StatusBook
from healerd.core.reconcile import Observation, Reconciler
from healerd.core.report import Reporter
from healerd.core.shown import Shown
from healerd.core.wanted import Declared
from healerd.core.workqueue import WorkQueue
from healerd.engine import EngineError, EngineUnavailable

log = logging.getLogger("healerd.controller")


class Dispatcher:
    def __init__(
        self,
        clock: Clock,
        settings: LoopSettings,
        queue: WorkQueue,
        *,
        looks: Looks,
        reconciler: Reconciler,
        memory: LoopMemory,
        executor: Executor,
        report: Reporter,
        health: EngineHealth,
        book: StatusBook,
        shown: Shown,
        declared: Declared,
        events: EventLog,
    ) -> None:
        self._clock = clock
        self._settings = settings
        self._t = settings.timings
        self._queue = queue
        self._looks = looks
        self._reconciler = reconciler
        self._memory = memory
        self._executor = executor
        self._report = report
        self._health = health
        self._book = book
        self._shown = shown
        self._declared = declared
        self._events = events
        self._key_pool = ThreadPoolExecutor(settings.workers, thread_name_prefix="healerd-key")
        self._slots = threading.Semaphore(settings.workers)
        self._networks_kept: frozenset[str] | None = None  # at the last _prune_networks
        self.last_progress = clock.monotonic()

    def run(self, stop: threading.Event) -> None:
        """Dispatch keys to the workers until `stop` is set."""
        while not stop.is_set():
            keys = self._take()
            if not keys:
                continue
            try:
                obs = self._looks.reused(keys) or self._looks.observe(keys)
            except Exception:
                log.exception("observing the engine failed unexpectedly")
                obs = None
            for key in keys:
                self._key_pool.submit(self._run_key, key, obs)

    def _take(self) -> list[str]:
        """A batch of at most as many keys as workers are free (each holds a slot)."""
        if not self._slots.acquire(timeout=0.5):
            # Every worker is busy (a long pull, a slow stop): the loop itself is alive.
            # Each engine call is bounded by engine_timeout, so a worker cannot hang
            # for ever unnoticed.
            self.last_progress = self._clock.monotonic()
            return []
        slots = 1
        while slots < self._settings.workers and self._slots.acquire(blocking=False):
            slots += 1
        keys = self._queue.get_batch(slots, timeout=0.5)
        self.last_progress = self._clock.monotonic()
        self.flush_log()
        for _ in range(slots - len(keys)):
            self._slots.release()
        return keys

    def _run_key(self, key: str, obs: Observation | None) -> None:
        try:
            self.handle(key, obs)
        finally:
            self._slots.release()

    def flush_log(self) -> None:
        """Say the counts of rate-limited lines whose window ended (and the latest state
        of a service or the engine that changed more often than it was said)."""
        for quiet in (self._health.quiet, self._book.quiet, self._report.quiet):
            if quiet.pending():
                quiet.flush()

    def process_once(self, timeout: float = 0.0) -> list[str]:
        """One synchronous pass over every ready key: the loop without threads, for tests
        (the starts in place it dispatched have ended when it returns)."""
        self.flush_log()
        keys = self._queue.get_batch(1 << 30, timeout=timeout)
        if keys:
            obs = self._looks.observe(keys)
            for key in keys:
                self.handle(key, obs)
            self._executor.drain()
        return keys

    def started_in_place(self, key: str, error: str | None) -> None:
        """A start the pass did not wait for ended: look again (the engine says if it
        worked); a failed one backs off as a failed pass does."""
        if error is None:
            self._queue.add(key)
        else:
            self.settle(key, decide(Facts(error=error), self._t))

    def shutdown(self) -> None:
        self._queue.shut_down()
        self._executor.shutdown()
        self._key_pool.shutdown(wait=False, cancel_futures=True)

    def handle(self, key: str, obs: Observation | None) -> None:
        """One pass over `key`, on the batch's look (None: the engine could not list)."""
        started = time.perf_counter()
        try:
            if obs is None:
                reason = f"cannot list containers: {self._health.list_error}"
                self._reconciler.hold_rollout(key)  # an outage is no lack of progress
                facts = Facts(unreachable=reason, retry_cap=self._health.recheck())
                self.settle(key, decide(facts, self._t))
            elif key == DISCOVER:
                self._discover(obs)
            else:
                memory = self._memory.snapshot(key, (c.id for c in obs.of(key)))
                outcome, delta = self._reconciler.reconcile(key, obs, memory)
                self._reconciler.share(delta)
                self.settle(key, outcome)
        except EngineError as exc:
            # The engine went away mid-pass (after its list): an ordinary retry.
            self._report.retrying(key, exc, unreachable=isinstance(exc, EngineUnavailable))
            self.settle(key, decide(Facts(error=str(exc)), self._t))
        except Exception:
            log.exception("reconcile of %s failed unexpectedly", key or "<discover>")
            self.settle(key, decide(Facts(failed_unexpectedly=True)))
        finally:
            self._queue.done(key)
            self.last_progress = self._clock.monotonic()
            if key:
                self._report.passed(key, time.perf_counter() - started)

    def settle(self, key: str, outcome: Outcome) -> None:
        """The one place an outcome becomes work-queue calls and a status."""
        now = self._clock.time()
        for delay in outcome.after:
            self._queue.add_after(key, delay)
        reason = outcome.reason
        next_retry = None if outcome.next_retry_in is None else now + outcome.next_retry_in
        if outcome.requeue is Requeue.RATE_LIMITED:
            delay = self._queue.add_rate_limited(key, outcome.cap)
            reason, next_retry = f"{reason}; retry in {delay:.1f}s", now + delay
        elif outcome.requeue is Requeue.PULL_BACKOFF:
            delay = self._queue.add_rate_limited(key, None, self._t.pull_backoff)
            reason, next_retry = f"{reason}; retry in {delay:.0f}s", now + delay
        elif outcome.requeue is Requeue.BACKOFF:
            self._queue.add_backoff(key, outcome.backoff)
            reason = f"{reason}; retry in {outcome.backoff:.0f}s"
            next_retry = now + outcome.backoff
        else:
            self._queue.forget(key)
            if outcome.requeue is Requeue.AGAIN:
                self._queue.add(key)
        if outcome.drop:
            self._book.drop(key)
            self._reconciler.forget(key)
            self._queue.add(DISCOVER)  # its project's networks may be unused now
        else:
            self._shown.show(key, outcome, reason, next_retry=next_retry)

    def _discover(self, obs: Observation) -> None:
        desired = obs.desired.services
        leftover = {c.service for c in obs.containers if c.service} - set(desired)
        for service in sorted(leftover):
            self._queue.add(service)
        if not leftover and not obs.desired.hold_orphans:
            self._prune_networks(obs)
        self._queue.forget(DISCOVER)

    def _prune_networks(self, obs: Observation) -> None:
        """It runs again only when the declared networks change, or a network was
        still in use (healerd.core.prune)."""
        keep = networks_kept(obs.desired)
        if keep != self._networks_kept and self._executor.prune_networks(keep):
            self._networks_kept = keep

    def prune_volumes(self, dry_run: bool) -> list[str]:
        """`healerctl prune volumes` (healerd.core.prune)."""
        return prune_volumes(self._declared.desired, self._executor, self._events, dry_run)


__all__ = ["Dispatcher"]
