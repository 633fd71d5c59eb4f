"""The loop: take service keys from the queue, observe once per batch, reconcile each
key, and settle its outcome. Events and timers only put keys into the queue; every pass
re-reads the engine with one label-filtered list call, so a missed event or a restart
costs nothing but time. The path of one heal through the files is in
docs/architecture.md, "The heal path".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from healerd import model
from healerd.config import DesiredState
from healerd.core.act import Acting
from healerd.core.admission import Admission
from healerd.core.clock import Clock
from healerd.core.engine_health import EngineHealth
from healerd.core.events import EventLog
from healerd.core.executor import Executor, plain_tag
from healerd.core.hints import LookHints
from healerd.core.images import ImagePolicy
from healerd.core.memdelta import apply as apply_delta
from healerd.core.memdelta import snapshot
from healerd.core.observe import Memory, note_event, observe
from healerd.core.outcome import Facts, Outcome, Requeue, Tally, decide
from healerd.core.own import OwnActions
from healerd.core.pressure import Pressure
from healerd.core.prune import PruneRefused, networks_kept, prune_volumes
from healerd.core.ratelimit import LastLook
from healerd.core.readlanes import ReadLanes
from healerd.core.readmodel import StatusBook
from healerd.core.reads import ReadSide
from healerd.core.reconcile import Observation, Reconciler
from healerd.core.report import LoopHooks, Reporter, Stats
from healerd.core.room import ahead_may_claim, claims, room_for
from healerd.core.runs import NoRunBook, RunBook
from healerd.core.state import ServiceState
from healerd.core.timings import Timings
from healerd.core.updates import Updates, following
from healerd.core.workqueue import WorkQueue
from healerd.engine import Engine, EngineError, EngineUnavailable
from healerd.model import EngineEvent, ObservedContainer, RegistryAuth, ServiceSpec
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.controller")

# The key of a pass that only looks for services with containers but no declaration.
DISCOVER = ""


@dataclass(frozen=True)
class LoopSettings:
    workers: int = 4
    parallel_actions: int = 8
    # Every recheck, backoff and window of the loop (healerd.core.timings).
    timings: Timings = field(default_factory=Timings)
    # Failed containers kept per replica after their replacement (logs, exit codes).
    history_limit: int = 1
    engine_down_log_interval: float = 30.0


def _nothing() -> None:
    pass


def _anonymous(_image: str) -> RegistryAuth | None:
    return None


class Controller(ReadSide):
    """`admission` None: no host limits (tests of the loop alone). `engine_guard` raises
    EngineError while this healerd must not act on the engine (another one manages it);
    it is called before each look until it passes once. `on_engine_back` is called when
    a list finds the engine back after an outage."""

    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        settings: LoopSettings,
        admission: Admission | None = None,
        *,
        hooks: Sequence[LoopHooks] = (),
        engine_guard: Callable[[], None] = _nothing,
        on_engine_back: Callable[[], None] = _nothing,
        readers: ReadLanes | None = None,
        name_tag: Callable[[str], str] = plain_tag,
        credentials: Callable[[str], RegistryAuth | None] | None = None,
        runbook: RunBook | None = None,
    ) -> None:
        self._engine = engine
        # What the API reads through (the list, logs, how a container died): the daemon
        # gives readers budgets of their own (readlanes.py), never the heal budget.
        self._readers = readers or ReadLanes(engine, clock)
        self._clock = clock
        self._settings = settings
        self.admission = admission
        self.queue = WorkQueue(clock, settings.timings.backoff)
        self.events = EventLog(clock)
        self._report = Reporter(self.events, hooks, clock)
        self._own = OwnActions(clock)
        self._executor = Executor(engine, settings.parallel_actions, name_tag, self._own)
        self._key_pool = ThreadPoolExecutor(settings.workers, thread_name_prefix="healerd-key")
        self._slots = threading.Semaphore(settings.workers)
        self._lock = threading.Lock()
        self._pin_lock = threading.Lock()  # `_declared` and `_desired` change together
        # Until a config has been read, nothing counts as undeclared: a conf.d that cannot
        # be read at start must not read as "remove everything". `_declared` is what the
        # files say, `_desired` the same with followed tags pinned (healerd.core.updates).
        self._declared = self._desired = DesiredState({}, (), hold_orphans=True, broken_files=())
        self._seen: set[str] = set()
        self._networks_kept: frozenset[str] | None = None  # at the last _prune_networks
        self._mem = Memory()
        self._paused: set[str] = set()
        self._book = StatusBook(clock, self.events)
        self._images = ImagePolicy(
            engine, self._executor, clock, self.events, settings.timings, admission,
            credentials, self._pulling,
        )  # fmt: skip
        auth = credentials or _anonymous
        self.updates = Updates(engine, self.events, auth, self._repinned, clock.time)
        self._reconciler = self._build_reconciler(runbook or NoRunBook())
        self._health = EngineHealth(
            engine, clock, self.events, settings.engine_down_log_interval,
            guard=engine_guard, on_back=self._engine_back, timings=settings.timings,
        )  # fmt: skip
        self._on_engine_back = on_engine_back
        self._last_look = LastLook(clock, self._readers.listed)  # readers are shown
        self._first_look = True  # until the first list (see _observe)
        self._hints = LookHints()
        self._recent: tuple[float, Sequence[ObservedContainer], str | None] | None = None
        self.last_progress = clock.monotonic()
        if admission is not None:
            admission.subscribe(self._pressure_changed)

    def _build_reconciler(self, runbook: RunBook) -> Reconciler:
        """The pass, on the memory a healerd before this one left in the run book; what
        it changes there comes back as a delta, applied under the loop's lock (`_share`)."""
        self._mem.load_runs(runbook.load(), self._clock.monotonic(), self._clock.time())
        self._share = partial(apply_delta, self._lock, self._mem, runbook)
        acting = Acting(
            self._clock, self._executor, self._report, self._share, self._started_in_place
        )
        return Reconciler(
            self._clock,
            self._images,
            self._report,
            acting,
            room_for(self.admission),
            self.updates,
            self._spec_now,
            self._is_paused,
            self._settings.history_limit,
            self._settings.timings,
        )

    # -- what the daemon and the API read ----------------------------------------------

    @property
    def desired(self) -> DesiredState:
        return self._desired

    @property
    def stats(self) -> Stats:
        return self._report.stats

    @property
    def engine_ok(self) -> bool | None:
        return self._health.ok

    @property
    def engine_version(self) -> str | None:
        return self._health.version

    @property
    def engine_api_version(self) -> str | None:
        return self._health.api_version

    @property
    def engine_data_root(self) -> str | None:
        return self._health.data_root

    def pulled_images(self) -> frozenset[str]:
        """The references healerd pulled since it started (for image GC)."""
        return self._executor.pulled()

    # -- inputs ------------------------------------------------------------------

    def set_desired(self, state: DesiredState) -> None:
        """Swap in a new desired state and queue every service whose spec changed."""
        with self._pin_lock:
            old = self._declared
            self._declared = state
            self._desired = self.updates.apply_all(state)
        for err in state.errors:
            if err not in old.errors:
                self.events.record(EventKind.CONFIG_ERROR, "", str(err))
        broken_changed = set(old.broken_files) ^ set(state.broken_files)
        for name in set(old.services) | set(state.services):
            spec = state.services.get(name)
            if old.services.get(name) != spec or (spec and spec.source_file in broken_changed):
                self.queue.add(name, force=True)
        if old.hold_orphans != state.hold_orphans:
            self.queue.add(DISCOVER, force=True)
        for name, was, now in self._book.resized(old.services, state.services):
            self._show(name, decide(Facts(resized=(was, now))), desired=now)

    def _spec_now(self, key: str) -> ServiceSpec | None:
        return self._desired.services.get(key)

    def _repinned(self, key: str) -> None:
        """A followed tag's pin moved (a new digest, a rollback, a first pin): the specs
        everyone reads are pinned again and the service looks at once."""
        with self._pin_lock:  # never a stale declaration, never a stale pin
            self._desired = self.updates.apply_all(self._declared)
        self.queue.add(key, force=True)

    def check_updates(self) -> list[str]:
        """Ask the registry about every service that follows its tag (the checker
        thread, every auto_update_interval); returns the services that got a new digest."""
        with self._pin_lock:
            declared = self._declared
        updated = []
        for spec in following(declared.services):
            try:
                if self.updates.check(spec):
                    updated.append(spec.name)
            except Exception:
                log.exception("%s: checking for an image update failed unexpectedly", spec.name)
        return updated

    def retry_pulls(self) -> None:
        """New registry credentials: each service waiting for its image tries now."""
        for key in self._images.waiting_keys():
            self.queue.add(key, force=True)

    def enqueue_all(self, *, force: bool = False) -> None:
        """Queue every known service plus a discovery pass (resync, engine back)."""
        with self._lock:
            keys = set(self._desired.services) | self._seen
        for key in sorted(keys | {DISCOVER}):
            self.queue.add(key, force=force)

    def on_event(self, event: EngineEvent) -> None:
        """Queue the event's service. The engine sends `die` before its list shows the
        container stopped, so remember the container and look again until it does."""
        log.debug("event %s %s %s", event.action, event.service, event.container_id[:12])
        self._last_look.changed()
        with self._lock:
            note_event(self._mem, event, self._clock.monotonic())
            known = event.container_id in self._mem.first_seen
        if event.action is model.EngineAction.STARTED:
            # A new run has a new network namespace: what joined the old one looks again.
            for joiner in self._desired.joiners.get(event.service, ()):
                self.queue.add(joiner)
        hint = self._hints.event(event.service, event.action)  # healerd.core.hints
        if self._own.consume(event):
            return  # the pass that did it looks again anyway (healerd.core.own)
        if event.action is model.EngineAction.DESTROYED:
            self._report.gone(event.service, event.container_id, event.name, known=known)
        self.queue.add(event.service)
        if hint:
            self._hints.hinted(event.service, self.queue.queued_at(event.service))

    def stream_state(self, connected: bool) -> None:
        """The event watcher's stream is up or down: while it is up and quiet, the last
        list is still what runs, and readers are shown it without a list of their own."""
        self._last_look.stream(connected)

    # -- operator requests ---------------------------------------------------------

    def pause(self, service: str) -> None:
        with self._lock:
            self._paused.add(service)
        spec = self._desired.services.get(service)
        replicas = spec.replicas if spec is not None else None
        self._show(service, decide(Facts(paused=True)), desired=replicas)
        self.events.record(
            EventKind.PAUSED, service, "paused by operator: left alone until resumed"
        )
        self.queue.add(service, force=True)

    def resume(self, service: str) -> None:
        with self._lock:
            self._paused.discard(service)
        self.events.record(EventKind.RESUMED, service, "resumed by operator")
        self.queue.add(service, force=True)

    def paused_services(self) -> set[str]:
        with self._lock:
            return set(self._paused)

    def _is_paused(self, service: str) -> bool:
        with self._lock:
            return service in self._paused

    def reconcile_now(self, service: str | None = None) -> None:
        if service is None:
            self.enqueue_all(force=True)
        else:
            self.queue.add(service, force=True)

    # -- the loop -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Dispatch keys to the workers until `stop` is set."""
        workers = self._settings.workers
        while not stop.is_set():
            if not self._slots.acquire(timeout=0.5):
                # Every worker is busy (a long pull, a slow stop): the loop itself is alive.
                # Each engine call is bounded by engine_timeout, so a worker cannot hang
                # for ever unnoticed.
                self.last_progress = self._clock.monotonic()
                continue
            slots = 1
            while slots < workers and self._slots.acquire(blocking=False):
                slots += 1
            keys = self.queue.get_batch(slots, timeout=0.5)
            self.last_progress = self._clock.monotonic()
            self.flush_log()
            for _ in range(slots - len(keys)):
                self._slots.release()
            if not keys:
                continue
            try:
                obs = self._reused(keys) or self._observe(keys)
            except Exception:
                log.exception("observing the engine failed unexpectedly")
                obs = None
            for key in keys:
                self._key_pool.submit(self._run_key, key, obs)

    def _run_key(self, key: str, obs: Observation | None) -> None:
        try:
            self._handle(key, obs)
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
        keys = self.queue.get_batch(1 << 30, timeout=timeout)
        if keys:
            obs = self._observe(keys)
            for key in keys:
                self._handle(key, obs)
            self._executor.drain()
        return keys

    def _started_in_place(self, key: str, error: str | None) -> None:
        """A start the pass did not wait for ended: look again (the engine says if it
        worked); a failed one backs off as a failed pass does."""
        if error is None:
            self.queue.add(key)
        else:
            self._settle(key, decide(Facts(error=error), self._settings.timings))

    def shutdown(self) -> None:
        self.queue.shut_down()
        self._executor.shutdown()
        self._key_pool.shutdown(wait=False, cancel_futures=True)

    # -- observing --------------------------------------------------------------------

    def _observe(self, keys: Sequence[str]) -> Observation | None:
        """One list call for the whole batch; None when the engine cannot be read. At
        the first look, containers found stopped may have been stopped by an engine
        restart or a reboot (which also restarted healerd): like those stopped while the
        engine was away, no crash."""
        self._report.count("list_calls")
        began = self._clock.monotonic()
        desired = self._desired  # one snapshot: the scope and the pass agree on the specs
        scope = self._scope(keys, desired)
        self._hints.looking(scope)
        listed = self._health.list_managed(keys, scope)
        if listed is not None and scope is not None and self._first_look:
            # This list found the engine back (EngineHealth's on_back): the first look
            # after an outage must see every service's stopped containers.
            self._report.count("list_calls")
            scope, listed = None, self._health.list_managed(keys)
        if listed is None:
            with self._lock:
                self._recent = None  # an engine that cannot list: no pass acts on before
            return None
        mono, wall = self._clock.monotonic(), self._clock.time()
        if scope is None:
            self._last_look.offer(listed, began)  # dated when it began: what it may miss
        with self._lock:
            first, self._first_look = self._first_look, False
            seen = observe(self._mem, listed, mono, wall, engine_back=first, scoped=bool(scope))
            if scope is None:
                self._seen = _services(seen)
            else:
                self._seen = (self._seen - {scope}) | _services(seen)
            self._recent = (began, seen, scope)
        self._reconciler.save_runs()  # the runs of containers gone are pruned
        obs = Observation(seen, desired)
        if self.admission is not None:
            states, no_image = self._book.states(), set(self._images.waiting_keys())
            services = obs.desired.services
            if scope is not None:
                services = {k: v for k, v in services.items() if k == scope}
            found = claims(services, seen, states, self.admission, no_image)
            self.admission.set_claims(found, scope)
        return obs

    def _scope(self, keys: Sequence[str], desired: DesiredState) -> str | None:
        """The one service a batch's look may list alone, else None (every service).

        A lone key whose pass reads no other service's containers (no depends_on, which
        also holds links and network_mode service:NAME) needs only its own rows: at 10
        services of 100 a heal's list is a tenth of the full one, most of what a heal
        cost above the engine's create and start. The first look (after a start or an
        outage), a discovery pass and every batch of more keys list everything; so does
        the resync, whose keys come in batches, and a pass whose creates higher
        priorities may have to go ahead of (room.ahead_may_claim)."""
        if len(keys) != 1 or keys[0] == DISCOVER or self._first_look:
            return None
        spec = desired.services.get(keys[0])
        if spec is not None and (spec.depends_on or _joins_service(spec)):
            return None
        adm = self.admission
        if spec is not None and adm is not None and ahead_may_claim(spec, desired.services, adm):
            return None
        return keys[0]

    def _reused(self, keys: list[str]) -> Observation | None:
        """The last look (`_recent`: when it began, what it saw, the one service it
        listed or None), when it is at most Timings.look_reuse old and still shows every
        key of the batch (healerd.core.hints): it began after the key was last queued, or
        only a kill or a death came since, which the memory folds in."""
        with self._lock:
            recent = self._recent
        reuse = self._settings.timings.look_reuse
        if recent is None or self._clock.monotonic() - recent[0] > reuse:
            return None
        desired = self._desired
        if recent[2] is not None and self._scope(keys, desired) != recent[2]:
            return None  # a look at one service shows nothing of the others
        if not all(self._hints.still_shown(k, self.queue.queued_at(k), recent[0]) for k in keys):
            return None
        self._report.count("reused_looks")
        return Observation(recent[1], desired)

    def _pulling(self, key: str, reason: str, tally: Tally | None) -> None:
        """A pull began in `key`'s pass: until the pass settles (minutes, on a slow link)
        the status says so, not what it said before the pass (Pending, say)."""
        self._show(key, decide(Facts(pulling=reason, tally=tally)))

    def _engine_back(self) -> None:
        # EngineHealth said so (rate-limited, beside its line about the loss).
        with self._lock:
            self._first_look = True
            self._recent = None
        self.enqueue_all(force=True)
        self._on_engine_back()

    # -- one pass -------------------------------------------------------------------

    def _handle(self, key: str, obs: Observation | None) -> None:
        started = time.perf_counter()
        try:
            if obs is None:
                reason = f"cannot list containers: {self._health.list_error}"
                self._reconciler.hold_rollout(key)  # an outage is no lack of progress
                facts = Facts(unreachable=reason, retry_cap=self._health.recheck())
                self._settle(key, decide(facts, self._settings.timings))
            elif key == DISCOVER:
                self._discover(obs)
            else:
                with self._lock:
                    memory = snapshot(self._mem, key, (c.id for c in obs.of(key)))
                outcome, delta = self._reconciler.reconcile(key, obs, memory)
                self._share(delta)
                self._settle(key, outcome)
        except EngineError as exc:
            # The engine went away mid-pass (after its list): an ordinary retry.
            self._report.retrying(key, exc, unreachable=isinstance(exc, EngineUnavailable))
            self._settle(key, decide(Facts(error=str(exc)), self._settings.timings))
        except Exception:
            log.exception("reconcile of %s failed unexpectedly", key or "<discover>")
            self._settle(key, decide(Facts(failed_unexpectedly=True)))
        finally:
            self.queue.done(key)
            self.last_progress = self._clock.monotonic()
            if key:
                self._report.passed(key, time.perf_counter() - started)

    def _settle(self, key: str, outcome: Outcome) -> None:
        """The one place an outcome becomes work-queue calls and a status."""
        now = self._clock.time()
        for delay in outcome.after:
            self.queue.add_after(key, delay)
        reason = outcome.reason
        next_retry = None if outcome.next_retry_in is None else now + outcome.next_retry_in
        if outcome.requeue is Requeue.RATE_LIMITED:
            delay = self.queue.add_rate_limited(key, outcome.cap)
            reason, next_retry = f"{reason}; retry in {delay:.1f}s", now + delay
        elif outcome.requeue is Requeue.PULL_BACKOFF:
            delay = self.queue.add_rate_limited(key, None, self._settings.timings.pull_backoff)
            reason, next_retry = f"{reason}; retry in {delay:.0f}s", now + delay
        elif outcome.requeue is Requeue.BACKOFF:
            self.queue.add_backoff(key, outcome.backoff)
            reason = f"{reason}; retry in {outcome.backoff:.0f}s"
            next_retry = now + outcome.backoff
        else:
            self.queue.forget(key)
            if outcome.requeue is Requeue.AGAIN:
                self.queue.add(key)
        if outcome.drop:
            self._book.drop(key)
            self._reconciler.forget(key)
            self.queue.add(DISCOVER)  # its project's networks may be unused now
        else:
            self._show(key, outcome, reason, next_retry=next_retry)

    def _show(
        self,
        key: str,
        outcome: Outcome,
        reason: str | None = None,
        *,
        next_retry: float | None = None,
        desired: int | None = None,
    ) -> None:
        """The status `decide` concluded, unless what it concluded from changed since: a
        pause or resume, or the declared replica count. The change showed what holds
        then (above) and queued the pass that says more; the check and the write are one
        step of the book's, so no conclusion older than the change can follow it."""
        if outcome.state is None or key == DISCOVER:
            return
        self._book.set(
            key,
            outcome.state,
            outcome.reason if reason is None else reason,
            tally=outcome.tally,
            paused=self._is_paused(key),
            next_retry=next_retry,
            desired=desired,
            unless=lambda: self._outdated(key, outcome),
        )

    def _outdated(self, key: str, outcome: Outcome) -> bool:
        if self._is_paused(key) != (outcome.state is ServiceState.PAUSED):
            return True
        spec, t = self._desired.services.get(key), outcome.tally
        return t is not None and t.desired != (spec.replicas if spec is not None else 0)

    def _discover(self, obs: Observation) -> None:
        desired = obs.desired.services
        leftover = _services(obs.containers) - set(desired)
        for service in sorted(leftover):
            self.queue.add(service)
        if not leftover and not obs.desired.hold_orphans:
            self._prune_networks(obs)
        self.queue.forget(DISCOVER)

    def prune_volumes(self, dry_run: bool) -> list[str]:
        """`healerctl prune volumes` (healerd.core.prune)."""
        return prune_volumes(self.desired, self._executor, self.events, dry_run)

    def _prune_networks(self, obs: Observation) -> None:
        """It runs again only when the declared networks change, or a network was
        still in use (healerd.core.prune)."""
        keep = networks_kept(obs.desired)
        if keep != self._networks_kept and self._executor.prune_networks(keep):
            self._networks_kept = keep

    def _pressure_changed(self, old: Pressure, new: Pressure) -> None:
        if new.any:
            log.warning("host under pressure: %s", new.describe())
            self.events.record(EventKind.PRESSURE, "", new.describe())
        else:
            log.info("host pressure ended")
            self.events.record(EventKind.PRESSURE_ENDED, "", "no resource below its threshold")
        if self.admission is not None:
            # Whoever waits may fit now (or must now wait): look again at once.
            for key in self.admission.waiting():
                self.queue.add(key)


def _joins_service(spec: ServiceSpec) -> bool:
    return (spec.network_mode or "").startswith("service:")


def _services(containers: Iterable[ObservedContainer]) -> set[str]:
    return {c.service for c in containers if c.service}


__all__ = ["DISCOVER", "Controller", "LoopSettings", "PruneRefused"]
