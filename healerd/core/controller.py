"""The reconcile loop: take service keys from the queue, observe, plan, act, repeat.

Events and timers only put keys into the queue; every pass re-reads the engine with
one label-filtered list call, so a missed event or a restart costs nothing but time.
What the loop remembers between passes (when a container died, since when it is
unhealthy, how a rollout progresses) only paces it; the engine's labels hold the rest.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from healerd.config import DesiredState
from healerd.core.admission import Admission, Claim
from healerd.core.backoff import Backoff
from healerd.core.clock import Clock
from healerd.core.context import Recall, plan_context
from healerd.core.events import EventLog
from healerd.core.executor import HOLDING_STATES, ActionResult, Executor
from healerd.core.planner import (
    Plan,
    PlanContext,
    is_available,
    plan,
)
from healerd.core.pressure import Pressure
from healerd.core.status import ContainerStatus, ServiceStatus
from healerd.core.workqueue import WorkQueue
from healerd.engine import Engine, EngineError, EngineUnavailable, ImagePullFailed
from healerd.model import (
    Action,
    ActionKind,
    ContainerState,
    EngineEvent,
    ObservedContainer,
    ServiceSpec,
)

log = logging.getLogger("healerd.controller")

# The key of a pass that only looks for services with containers but no declaration.
DISCOVER = ""
# Events after which the container should no longer be listed as running.
SUSPECT_ACTIONS = frozenset({"die", "pause", "oom"})
# Events that mean the container is dead for sure, even while the list (which lags the
# event by tens of milliseconds) still says running: acting on them at once saves that.
SIGKILL = frozenset({"9", "SIGKILL", "KILL"})
# Events that say someone stopped the container on purpose: no crash, no backoff.
MANUAL_ACTIONS = frozenset({"kill", "stop"})
# How long, and how often, to look again while the list still disagrees with an event.
SUSPECT_WINDOW = 2.0
SUSPECT_RECHECK = 0.02
DEFAULT_BACKOFF = Backoff(0.005, 60.0)
IMAGE_BACKOFF = Backoff(2.0, 300.0)
# How long an image seen present is taken to be still there (a create that finds it
# gone fails and is retried with backoff anyway).
IMAGE_SEEN_TTL = 30.0
# How often a service waiting for room on the host looks again (pressure has no events).
RESOURCE_RECHECK = 2.0
PULL_DISK_RECHECK = 10.0
# States in which a service will not create now: its missing containers claim no room
# ahead of lower priorities.
NOT_CLAIMING = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "Paused",
        "Held",
        "RolloutHalted",
        "Degraded",
    }
)


@dataclass(frozen=True)
class LoopSettings:
    workers: int = 4
    parallel_actions: int = 8
    backoff: Backoff = DEFAULT_BACKOFF
    image_backoff: Backoff = IMAGE_BACKOFF
    engine_down_log_interval: float = 30.0


@dataclass
class Stats:
    passes: int = 0
    list_calls: int = 0
    creates: int = 0
    removes: int = 0
    errors: int = 0


@dataclass
class _Rollout:
    """A rolling update under way; times are monotonic."""

    spec_hash: str
    started: float
    last_progress: float
    best: int
    last_batch: float = float("-inf")


@dataclass
class _Memory:
    """What passes remember about containers, keyed by container id; pruned to what the
    engine still lists. Times are monotonic: a wall clock that jumps must not stretch a
    backoff or a grace."""

    dead_since: dict[str, float] = field(default_factory=dict)
    unhealthy_since: dict[str, float] = field(default_factory=dict)
    first_seen: dict[str, float] = field(default_factory=dict)
    forgiven: set[str] = field(default_factory=set)

    def prune(self, present: set[str]) -> None:
        for d in (self.dead_since, self.unhealthy_since, self.first_seen):
            for cid in list(d):
                if cid not in present:
                    del d[cid]
        self.forgiven &= present


class Controller:
    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        settings: LoopSettings,
        admission: Admission | None = None,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._settings = settings
        # None: no host limits (tests of the loop alone).
        self.admission = admission
        if admission is not None:
            admission.on_change = self._pressure_changed
        self.queue = WorkQueue(clock, settings.backoff)
        self.events = EventLog(clock)
        self.stats = Stats()
        self._executor = Executor(engine, settings.parallel_actions)
        self._key_pool = ThreadPoolExecutor(settings.workers, thread_name_prefix="healerd-key")
        self._slots = threading.Semaphore(settings.workers)
        self._lock = threading.Lock()
        # Until a config has been read, nothing counts as undeclared: a conf.d that cannot
        # be read at start must not read as "remove everything".
        self._desired = DesiredState(services={}, errors=(), hold_orphans=True, broken_files=())
        self._seen: set[str] = set()
        self._observed: list[ObservedContainer] = []
        self._mem = _Memory()
        self._suspects: dict[str, dict[str, float]] = {}
        self._died: dict[str, tuple[float, int | None]] = {}
        self._images_seen: dict[str, float] = {}
        self._rollouts: dict[str, _Rollout] = {}
        self._image_failures: dict[str, int] = {}
        self._pulled: set[tuple[str, str]] = set()
        # Services whose pull was refused for lack of disk: they claim no room.
        self._pull_waiting: set[str] = set()
        self._paused: set[str] = set()
        self._status: dict[str, ServiceStatus] = {}
        self._hooks: list[Any] = []
        # True until the first list: containers found stopped when healerd starts may
        # have been stopped by an engine restart or a reboot (which also restarted
        # healerd): like those stopped while the engine was away, no crash.
        self._engine_back = True
        self.engine_ok: bool | None = None
        self.engine_version: str | None = None
        self.engine_data_root: str | None = None
        self._engine_down_logged_at: float | None = None
        self._list_error = ""
        self.last_progress = clock.monotonic()
        self.on_engine_back: Callable[[], None] = lambda: None
        # Raises EngineError while this healerd must not act on the engine (another one
        # manages it); called before each look until it passes once.
        self.engine_guard: Callable[[], None] = lambda: None
        self._guarded = False

    # -- inputs ------------------------------------------------------------------

    @property
    def desired(self) -> DesiredState:
        return self._desired

    def set_desired(self, state: DesiredState) -> None:
        """Swap in a new desired state and queue every service whose spec changed."""
        old = self._desired
        self._desired = state
        for err in state.errors:
            if err not in old.errors:
                self.events.record("config-error", "", str(err))
        broken_changed = set(old.broken_files) ^ set(state.broken_files)
        for name in set(old.services) | set(state.services):
            spec = state.services.get(name)
            if old.services.get(name) != spec or (spec and spec.source_file in broken_changed):
                self.queue.add(name, force=True)
        if old.hold_orphans != state.hold_orphans:
            self.queue.add(DISCOVER, force=True)

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
        if event.container_id:
            with self._lock:
                if event.action == "die" or (event.action == "kill" and event.signal in SIGKILL):
                    self._died[event.container_id] = (self._clock.monotonic(), event.exit_code)
                elif event.action == "start":
                    self._died.pop(event.container_id, None)
                if event.action in SUSPECT_ACTIONS:
                    self._suspects.setdefault(event.service, {})[event.container_id] = (
                        self._clock.monotonic()
                    )
                if event.action in MANUAL_ACTIONS:
                    self._mem.forgiven.add(event.container_id)
        self.queue.add(event.service)

    # -- operator requests ---------------------------------------------------------

    def pause(self, service: str) -> None:
        with self._lock:
            self._paused.add(service)
        self.events.record("paused", service, "paused by operator: left alone until resumed")
        self.queue.add(service, force=True)

    def resume(self, service: str) -> None:
        with self._lock:
            self._paused.discard(service)
        self.events.record("resumed", service, "resumed by operator")
        self.queue.add(service, force=True)

    def paused_services(self) -> set[str]:
        with self._lock:
            return set(self._paused)

    def reconcile_now(self, service: str | None = None) -> None:
        if service is None:
            self.enqueue_all(force=True)
        else:
            self.queue.add(service, force=True)

    def add_hooks(self, hooks: Any) -> None:
        """Observers with optional on_action(kind, service, ok), on_pass(service, seconds),
        on_heal(service, latency_seconds) methods (metrics)."""
        self._hooks.append(hooks)

    def _hook(self, name: str, *args: Any) -> None:
        for h in self._hooks:
            fn = getattr(h, name, None)
            if fn is not None:
                try:
                    fn(*args)
                except Exception:
                    log.exception("hook %s failed", name)

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
            for _ in range(slots - len(keys)):
                self._slots.release()
            if not keys:
                continue
            try:
                observed = self._observe(keys)
            except Exception:
                log.exception("observing the engine failed unexpectedly")
                observed = None
            for key in keys:
                self._key_pool.submit(self._run_key, key, observed)

    def _run_key(self, key: str, observed: Sequence[ObservedContainer] | None) -> None:
        try:
            self._handle(key, observed)
        finally:
            self._slots.release()

    def process_once(self, timeout: float = 0.0) -> list[str]:
        """One synchronous pass over every ready key: the loop without threads, for tests."""
        keys = self.queue.get_batch(1 << 30, timeout=timeout)
        if keys:
            observed = self._observe(keys)
            for key in keys:
                self._handle(key, observed)
        return keys

    def shutdown(self) -> None:
        self.queue.shut_down()
        self._executor.shutdown()
        self._key_pool.shutdown(wait=False, cancel_futures=True)

    # -- observing --------------------------------------------------------------------

    def _observe(self, keys: Iterable[str]) -> list[ObservedContainer] | None:
        """One list call for the whole batch; None when the engine cannot be read."""
        with self._lock:
            self.stats.list_calls += 1
        try:
            if not self._guarded:
                # Before the first look: may this healerd act on this engine at all?
                self.engine_guard()
                self._guarded = True
            observed = self._engine.list_managed()
        except EngineError as exc:
            self._engine_failed(exc, keys)
            return None
        self._engine_reachable()
        now, wall = self._clock.monotonic(), self._clock.time()
        with self._lock:
            mem = self._mem
            present = {c.id for c in observed}
            mem.prune(present)
            observed = [self._aged(c, now, wall) for c in observed]
            self._seen = {c.service for c in observed if c.service}
            self._observed = observed
            for cid in [cid for cid in self._died if cid not in present]:
                del self._died[cid]
            for c in observed:
                if c.running:
                    mem.dead_since.pop(c.id, None)
                else:
                    mem.dead_since.setdefault(c.id, now)
                if c.running and c.health == "unhealthy":
                    mem.unhealthy_since.setdefault(c.id, now)
                else:
                    mem.unhealthy_since.pop(c.id, None)
            if self._engine_back:
                # Whatever stopped while the engine was away (or restarting) is no crash.
                mem.forgiven |= {c.id for c in observed if not c.running}
                self._engine_back = False
            states = {k: s.state for k, s in self._status.items()}
            for k in self._pull_waiting:
                states[k] = "ImagePullBackOff"
        if self.admission is not None:
            self.admission.set_claims(self._claims(observed, states, self.admission.pressure().any))
        return observed

    def _claims(
        self, observed: Sequence[ObservedContainer], states: dict[str, str], pressure: bool
    ) -> dict[str, Claim]:
        """Services missing running containers, from the batch's one list call: the
        priority order needs every service's shortfall, not just the batch's keys.
        Under pressure only replacements can start: a claim covers the failed
        containers listed, not the extras that would wait anyway."""
        running: dict[str, int] = {}
        failed: dict[str, int] = {}
        for c in observed:
            counts = running if c.running else failed
            counts[c.service] = counts.get(c.service, 0) + 1
        claims = {}
        for name, spec in self._desired.services.items():
            missing = spec.replicas - running.get(name, 0)
            if pressure:
                missing = min(missing, failed.get(name, 0))
            if missing > 0 and states.get(name) not in NOT_CLAIMING:
                claims[name] = Claim(spec.priority, missing, self._need(spec))
        return claims

    def _need(self, spec: ServiceSpec) -> int:
        """Memory one container of `spec` is assumed to take."""
        if spec.mem_limit:
            return spec.mem_limit
        return self.admission.limits.container_memory if self.admission is not None else 0

    def _engine_failed(self, exc: EngineError, keys: Iterable[str]) -> None:
        self._list_error = str(exc)
        now = self._clock.monotonic()
        was_ok = self.engine_ok
        if isinstance(exc, EngineUnavailable):
            self.engine_ok = False
        last = self._engine_down_logged_at
        interval = self._settings.engine_down_log_interval
        if was_ok is not False or last is None or now - last >= interval:
            self._engine_down_logged_at = now
            waiting = ", ".join(sorted(k for k in keys if k)) or "-"
            log.warning("cannot list containers: %s (services wait: %s)", exc, waiting)
            if was_ok is not False:
                self.events.record("engine-lost", "", str(exc))

    def _engine_reachable(self) -> None:
        if self.engine_ok is False:
            log.info("engine reachable again: resyncing every service")
            self.events.record("engine-back", "", "engine reachable again")
            self.engine_ok = True
            self._engine_back = True
            self.enqueue_all(force=True)
            self.on_engine_back()
        if self.engine_version is None or self.engine_ok is not True:
            with contextlib.suppress(EngineError):
                self.engine_version = self._engine.version()
        if self.engine_data_root is None or self.engine_ok is not True:
            # The disk figures and the pull check need it: retried until known.
            with contextlib.suppress(EngineError):
                self.engine_data_root = self._engine.data_root()
        self.engine_ok = True

    # -- one pass -------------------------------------------------------------------

    def _handle(self, key: str, observed: Sequence[ObservedContainer] | None) -> None:
        started = time.perf_counter()
        try:
            if observed is None:
                delay = self.queue.add_rate_limited(key)
                if key != DISCOVER:
                    why = f"cannot list containers: {self._list_error}; "
                    self._set_status(key, "EngineUnreachable", f"{why}retry in {delay:.1f}s")
                return
            if key == DISCOVER:
                self._discover(observed)
                return
            self._reconcile(key, observed)
        except EngineError as exc:
            # The engine went away mid-pass (after its list): an ordinary retry.
            delay = self.queue.add_rate_limited(key)
            log.warning("%s: %s; retry in %.1fs", key or "<discover>", exc, delay)
            if key != DISCOVER:
                self._set_status(key, "Degraded", f"{exc}; retry in {delay:.1f}s")
        except Exception:
            log.exception("reconcile of %s failed unexpectedly", key or "<discover>")
            self.queue.add_rate_limited(key)
        finally:
            self.queue.done(key)
            self.last_progress = self._clock.monotonic()
            if key:
                self._hook("on_pass", key, time.perf_counter() - started)

    def _discover(self, observed: Sequence[ObservedContainer]) -> None:
        desired = self._desired.services
        for service in sorted({c.service for c in observed if c.service} - set(desired)):
            self.queue.add(service)
        self.queue.forget(DISCOVER)

    def _as_dead(self, c: ObservedContainer) -> ObservedContainer:
        """A container an event said died (or got SIGKILL) counts as exited, even while
        the list still says running; a later `start` event, or 2 s, ends this."""
        if not c.running:
            return c
        with self._lock:
            entry = self._died.get(c.id)
        if entry is None:
            return c
        died, exit_code = entry
        if self._clock.monotonic() - died > SUSPECT_WINDOW:
            with self._lock:
                self._died.pop(c.id, None)
            return c
        with self._lock:
            # Dead since the event, for the crash backoff and the heal-latency figure.
            self._mem.dead_since.setdefault(c.id, died)
        return replace(c, state=ContainerState.EXITED, exit_code=exit_code)

    def _aged(self, c: ObservedContainer, mono: float, wall: float) -> ObservedContainer:
        """A container is at least as old as healerd has seen it: after the wall clock
        jumps back, its engine-stamped creation time would make it look younger (not yet
        up for min_ready_seconds) for as long as the jump."""
        seen = self._mem.first_seen.setdefault(c.id, mono)
        created = min(c.created, wall - (mono - seen))
        return c if created == c.created else replace(c, created=created)

    def _reconcile(self, key: str, observed: Sequence[ObservedContainer]) -> None:
        now = self._clock.time()
        # One snapshot for the whole pass: set_desired may swap it meanwhile.
        desired = self._desired
        spec = desired.services.get(key)
        mine = [self._as_dead(c) for c in observed if c.service == key]
        observed = mine
        with self._lock:
            self.stats.passes += 1
            paused = key in self._paused
        if paused:
            self.queue.forget(key)
            if self.admission is not None:
                self.admission.done(key)
            self._set_status(key, "Paused", "paused by operator", spec, mine)
            return
        self._track_rollout(key, spec, mine, now)
        pressure = self.admission.pressure() if self.admission is not None else None
        under_pressure = pressure is not None and pressure.any
        ctx, wake_at, backoff_note = self._context(
            key, spec, mine, now, desired, under_pressure=under_pressure
        )
        p = plan(key, spec, observed, ctx)

        if spec is not None and (p.creates or p.rollout_step):
            problem = self._ensure_image(key, spec)
            if problem is not None:
                state, reason = problem
                n = self._image_failures.get(key, 0) + 1
                self._image_failures[key] = n
                delay = self._settings.image_backoff.delay(n)
                if state == "WaitingForResources":
                    delay = PULL_DISK_RECHECK
                if self.admission is not None:
                    self.admission.done(key)
                with self._lock:
                    self._pull_waiting.add(key)
                self.queue.add_backoff(key, delay)
                self._set_status(
                    key,
                    state,
                    f"{reason}; retry in {delay:.0f}s",
                    spec,
                    mine,
                    p,
                    next_retry=now + delay,
                )
                return
            self._image_failures.pop(key, None)
            with self._lock:
                self._pull_waiting.discard(key)

        wait_reason = ""
        if spec is not None and p.creates and self.admission is not None:
            p, wait_reason = self._admit(key, spec, observed, ctx, p)
        elif self.admission is not None:
            self.admission.done(key)
        if not wait_reason and under_pressure and p.stale and pressure is not None:
            wait_reason = f"the rolling update waits: {pressure.describe()}"
        if wait_reason:
            # Waiting for room is no lack of progress: the progress deadline stops.
            with self._lock:
                r = self._rollouts.get(key)
                if r is not None:
                    r.last_progress = self._clock.monotonic()

        results = self._executor.apply(p.actions) if p.actions else []
        self._record(key, results, now)
        if p.rollout_step:
            with self._lock:
                r = self._rollouts.get(key)
                if r is not None:
                    r.last_batch = self._clock.monotonic()
        errors = [r for r in results if not r.ok]
        if self._still_suspect(key, mine):
            self.queue.add_after(key, SUSPECT_RECHECK)

        if errors:
            delay = self.queue.add_rate_limited(key)
            self._set_status(
                key,
                "Degraded",
                f"{errors[0].error}; retry in {delay:.1f}s",
                spec,
                mine,
                p,
                next_retry=now + delay,
            )
            return
        # A pass without errors ends the error backoff (client-go's Forget): a failure
        # count left over would make hints wait behind the next ordinary timer (a
        # readiness wake, a progress deadline minutes away).
        self.queue.forget(key)
        if p.actions:
            # Look again: the engine, not our memory, says whether it worked.
            self.queue.add(key)
            reason = p.actions[0].reason + (f"; {wait_reason}" if wait_reason else "")
            self._set_status(key, "Progressing", reason, spec, mine, p)
            return
        if wake_at is not None:
            self.queue.add_after(key, max(0.0, wake_at - now))
        if wait_reason:
            self.queue.add_after(key, RESOURCE_RECHECK)
            self._set_status(key, "WaitingForResources", wait_reason, spec, mine, p)
            return
        halted = self._rollout_halted(key, spec, self._clock.monotonic())
        if p.held:
            self._set_status(
                key, "CrashLoopBackOff", backoff_note, spec, mine, p, next_retry=wake_at
            )
        elif halted:
            self._set_status(key, "RolloutHalted", halted, spec, mine, p)
        elif p.note:
            self.queue.forget(key)
            self._set_status(key, "Held", p.note, spec, mine, p)
        elif spec is None and not mine:
            self.queue.forget(key)
            self._drop(key)
        elif p.converged and spec is not None and p.available >= spec.replicas:
            self.queue.forget(key)
            broken = self._file_error(spec, desired)
            if broken:
                # Running as declared, but by a version of its file that is no longer there.
                self._set_status(key, "ConfigError", broken, spec, mine, p)
            else:
                self._set_status(key, "Converged", "", spec, mine, p)
        else:
            self._set_status(key, "Progressing", _waiting_reason(spec, p), spec, mine, p)

    def _admit(
        self,
        key: str,
        spec: ServiceSpec,
        observed: Sequence[ObservedContainer],
        ctx: PlanContext,
        p: Plan,
    ) -> tuple[Plan, str]:
        """Ask the host for room for the plan's creates; plan again with what is granted.
        Returns the plan to apply and why some creates wait ("" if none)."""
        assert self.admission is not None
        creates = [a for a in p.actions if a.kind is ActionKind.CREATE]
        # A running (unhealthy) or paused container is stopped before its replacement
        # starts: the swap frees what it takes, it needs no room.
        swaps = sum(
            1 for a in creates if a.container is not None and a.container.state in HOLDING_STATES
        )
        repl = sum(1 for a in creates if a.container is not None) - swaps
        extras = len(creates) - repl - swaps
        g = self.admission.grant(key, spec.priority, repl, extras, self._need(spec))
        if g.replacements >= repl and g.extras >= extras:
            return p, ""
        limited = replace(
            ctx,
            max_replacements=g.replacements + swaps,
            max_extras=g.extras,
            rollout_allowed=False,
        )
        return plan(key, spec, observed, limited), g.reason

    def _pressure_changed(self, old: Pressure, new: Pressure) -> None:
        if new.any:
            log.warning("host under pressure: %s", new.describe())
            self.events.record("pressure", "", new.describe())
        else:
            log.info("host pressure ended")
            self.events.record("pressure-ended", "", "no resource below its threshold")
        if self.admission is not None:
            # Whoever waits may fit now (or must now wait): look again at once.
            for key in self.admission.waiting():
                self.queue.add(key)

    def _context(
        self,
        key: str,
        spec: ServiceSpec | None,
        mine: Sequence[ObservedContainer],
        now: float,
        desired: DesiredState,
        *,
        under_pressure: bool = False,
    ) -> tuple[PlanContext, float | None, str]:
        """Turn remembered times into the planner's verdicts, plus when to look again."""
        if spec is None:
            return PlanContext(now=now, hold_orphans=desired.hold_orphans), None, ""
        # Remembered times are monotonic; the planner's are wall-clock ones.
        offset = now - self._clock.monotonic()
        ids = {c.id for c in mine}
        with self._lock:
            mem = self._mem
            r = self._rollouts.get(key)
            recall = Recall(
                unhealthy_since={i: t + offset for i, t in mem.unhealthy_since.items() if i in ids},
                dead_since={i: t + offset for i, t in mem.dead_since.items() if i in ids},
                forgiven=frozenset(mem.forgiven & ids),
                rollout=None if r is None else (r.last_progress + offset, r.last_batch + offset),
            )
        # A rolling update needs a surge container (or room for a stop-first one): not
        # under pressure.
        ctx, wake, note = plan_context(spec, mine, now, recall, rollout_allowed=not under_pressure)
        return ctx, (min(wake) if wake else None), note

    def _track_rollout(
        self, key: str, spec: ServiceSpec | None, mine: Sequence[ObservedContainer], now: float
    ) -> None:
        """Start, advance or finish the record of a rolling update (for pacing and the
        progress deadline)."""
        if spec is None:
            with self._lock:
                self._rollouts.pop(key, None)
            return
        stale = [c for c in mine if c.running and c.spec_hash != spec.spec_hash]
        ready = sum(1 for c in mine if c.spec_hash == spec.spec_hash and is_available(c, spec, now))
        with self._lock:
            r = self._rollouts.get(key)
            if not stale:
                if r is not None:
                    del self._rollouts[key]
                    self.events.record("rollout-complete", key, "all containers run the new spec")
                return
            if r is None or r.spec_hash != spec.spec_hash:
                mono = self._clock.monotonic()
                self._rollouts[key] = _Rollout(spec.spec_hash, mono, mono, ready)
                self.events.record("rollout-started", key, f"{len(stale)} container(s) to replace")
            elif ready > r.best:
                r.best, r.last_progress = ready, self._clock.monotonic()

    def _rollout_halted(self, key: str, spec: ServiceSpec | None, now: float) -> str:
        with self._lock:
            r = self._rollouts.get(key)
        if r is None or spec is None:
            return ""
        deadline = spec.update_config.progress_deadline
        if now - r.last_progress < deadline:
            return ""
        return (
            f"no new container became available for {deadline:.0f}s (progress deadline); "
            "the old containers keep serving"
        )

    def _file_error(self, spec: ServiceSpec, desired: DesiredState) -> str:
        """The first error of the service's file, if that file is broken now."""
        if not spec.source_file or spec.source_file not in desired.broken_files:
            return ""
        first = next((e for e in desired.errors if e.file == spec.source_file), None)
        detail = f": {first}" if first else ""
        return f"its file is invalid, the last good spec keeps running{detail}"

    def _ensure_image(self, key: str, spec: ServiceSpec) -> tuple[str, str] | None:
        """Make sure the image is there before anything is created or stopped for it.
        Returns (state, reason) when it cannot be had."""
        image, policy = spec.image, spec.pull_policy
        seen = self._images_seen.get(image)
        fresh = seen is not None and self._clock.monotonic() - seen < IMAGE_SEEN_TTL
        if fresh and (policy != "always" or (key, spec.spec_hash) in self._pulled):
            return None  # seen a moment ago: a heal need not ask again
        try:
            present = self._engine.image_present(image)
            if present:
                now = self._clock.monotonic()
                with self._lock:
                    self._images_seen = {
                        i: t for i, t in self._images_seen.items() if now - t < IMAGE_SEEN_TTL
                    }
                    self._images_seen[image] = now
            must_pull = policy == "always" and (key, spec.spec_hash) not in self._pulled
            if present and not must_pull:
                return None
            if not present and policy == "never":
                return (
                    "ErrImageNeverPull",
                    f"image {image} is not present and pull_policy is never",
                )
            if self.admission is not None:
                refusal = self.admission.pull_refusal(image, self._engine.image_size_hint(image))
                if refusal is not None:
                    return "WaitingForResources", refusal
            log.info(
                "%s: pulling %s",
                key,
                image,
                extra={"healerd_service": key, "action": "pull", "reason": image},
            )
            self._engine.pull(image)
            self._remember_pull(key, spec.spec_hash)
            self.events.record("pulled", key, f"pulled {image}")
            return None
        except ImagePullFailed as exc:
            self.events.record("pull-failed", key, str(exc))
            if present:
                # pull_policy always, registry away, image on disk: a heal must not wait
                # for the registry. Use the local image; the next spec change pulls again.
                log.warning("%s: cannot pull %s (%s); using the local image", key, image, exc)
                self._remember_pull(key, spec.spec_hash)
                return None
            return "ImagePullBackOff", f"cannot pull {image}: {exc}"

    def _remember_pull(self, key: str, spec_hash: str) -> None:
        """`always` pulls once per spec: only the service's current spec is remembered."""
        with self._lock:
            self._pulled = {p for p in self._pulled if p[0] != key} | {(key, spec_hash)}

    def _still_suspect(self, key: str, mine: Sequence[ObservedContainer]) -> bool:
        """True while a container that an event said stopped is still listed as running."""
        now = self._clock.monotonic()
        with self._lock:
            suspects = self._suspects.get(key)
            if not suspects:
                return False
            running = {c.id for c in mine if c.running}
            for cid, seen_at in list(suspects.items()):
                if cid not in running or now - seen_at > SUSPECT_WINDOW:
                    del suspects[cid]
            if not suspects:
                del self._suspects[key]
                return False
            return True

    def _record(self, key: str, results: Sequence[ActionResult], now: float) -> None:
        for r in results:
            a = r.action
            kind = a.kind.value
            if r.ok:
                name = r.container_name or r.container_id or ""
                log.info(
                    "%s: %sd %s (%s)",
                    key,
                    kind,
                    name,
                    a.reason,
                    extra={
                        "healerd_service": key,
                        "container_id": r.container_id or "",
                        "container_name": name,
                        "action": kind,
                        "reason": a.reason,
                    },
                )
                self.events.record(f"{kind}d", key, a.reason, name)
                if a.kind is ActionKind.CREATE and a.container is not None:
                    died = self._mem.dead_since.get(a.container.id)
                    if died is not None:
                        self._hook("on_heal", key, max(0.0, self._clock.monotonic() - died))
            else:
                log.warning(
                    "%s: %s failed: %s",
                    key,
                    kind,
                    r.error,
                    extra={
                        "healerd_service": key,
                        # The container removed (none for a failed create).
                        "container_id": a.container.id
                        if a.container is not None and a.kind is not ActionKind.CREATE
                        else "",
                        "action": kind,
                        "reason": r.error,
                    },
                )
                self.events.record("failed", key, f"{kind}: {r.error}")
            self._hook("on_action", kind, key, r.ok)
        with self._lock:
            for r in results:
                if not r.ok:
                    self.stats.errors += 1
                elif r.action.kind is ActionKind.CREATE:
                    self.stats.creates += 1
                else:
                    self.stats.removes += 1

    # -- status -----------------------------------------------------------------------

    def _set_status(
        self,
        key: str,
        state: str,
        reason: str,
        spec: ServiceSpec | None = None,
        mine: Sequence[ObservedContainer] = (),
        p: Plan | None = None,
        next_retry: float | None = None,
    ) -> None:
        now = self._clock.time()
        with self._lock:
            st = self._status.setdefault(key, ServiceStatus(name=key, since=now))
            changed = st.state != state
            if changed:
                st.since = now
            st.state, st.reason, st.next_retry = state, reason, next_retry
            st.paused = key in self._paused
            if spec is not None or mine:
                st.desired = spec.replicas if spec is not None else 0
                st.source_file = spec.source_file if spec is not None else ""
                st.running = sum(1 for c in mine if c.running)
                st.restarts = sum(c.restarts for c in mine if c.running)
            if p is not None:
                st.available, st.up_to_date = p.available, p.up_to_date
        if changed:
            # A line per change of state, none per pass: the log tells the story.
            log.info(
                "%s: %s (%d/%d running)%s",
                key,
                state,
                st.running,
                st.desired,
                f": {reason}" if reason else "",
                extra={"healerd_service": key, "healerd_state": state, "reason": reason},
            )
            if state in (
                "CrashLoopBackOff",
                "WaitingForResources",
                "RolloutHalted",
                "Degraded",
                "ImagePullBackOff",
                "ErrImageNeverPull",
            ):
                self.events.record(
                    "backoff" if state == "CrashLoopBackOff" else state.lower(), key, reason
                )

    def _drop(self, key: str) -> None:
        if self.admission is not None:
            self.admission.done(key)
        with self._lock:
            self._status.pop(key, None)
            self._rollouts.pop(key, None)
            self._suspects.pop(key, None)
            self._image_failures.pop(key, None)
            self._pulled = {p for p in self._pulled if p[0] != key}
            self._pull_waiting.discard(key)

    def statuses(self) -> list[ServiceStatus]:
        """Every declared service and every service with containers, by name."""
        with self._lock:
            out = {k: replace(s) for k, s in self._status.items()}
            paused = set(self._paused)
        for name, spec in self._desired.services.items():
            out.setdefault(
                name, ServiceStatus(name=name, desired=spec.replicas, source_file=spec.source_file)
            )
        for s in out.values():
            s.paused = s.name in paused
        return [out[k] for k in sorted(out)]

    def container_statuses(self, service: str | None = None) -> list[ContainerStatus]:
        """One fresh list call: what runs now, not what the last pass saw."""
        observed = self._engine.list_managed()
        out = []
        for c in sorted(observed, key=lambda c: (c.service, c.created, c.name)):
            if service is not None and c.service != service:
                continue
            spec = self._desired.services.get(c.service)
            out.append(
                ContainerStatus(
                    id=c.id,
                    name=c.name,
                    service=c.service,
                    state=c.state.value,
                    status=c.status,
                    health=c.health,
                    restarts=c.restarts,
                    exit_code=c.exit_code,
                    created=c.created,
                    image=c.image,
                    up_to_date=spec is not None and c.spec_hash == spec.spec_hash,
                )
            )
        return out

    def preview(self, service: str | None = None) -> list[Action]:
        """What a pass would do right now, without doing it (one list call)."""
        observed = self._engine.list_managed()
        desired = self._desired
        now = self._clock.time()
        keys = (
            {service}
            if service
            else set(self._desired.services) | {c.service for c in observed if c.service}
        )
        pressure = self.admission is not None and self.admission.pressure().any
        actions: list[Action] = []
        for key in sorted(keys):
            if key in self.paused_services():
                continue
            spec = desired.services.get(key)
            mine = [c for c in observed if c.service == key]
            ctx, _, _ = self._context(key, spec, mine, now, desired, under_pressure=pressure)
            actions.extend(plan(key, spec, observed, ctx).actions)
        return actions

    def summary(self) -> str:
        """One line for logs and sd_notify STATUS=."""
        sts = self.statuses()
        declared = [s for s in sts if s.name in self._desired.services]
        converged = sum(1 for s in declared if s.state == "Converged")
        containers = sum(s.running for s in sts)
        engine = {True: "ok", False: "unreachable", None: "unknown"}[self.engine_ok]
        errors = len(self._desired.errors)
        cfg = f"; {errors} config error(s)" if errors else ""
        return (
            f"{converged}/{len(declared)} services converged, "
            f"{containers} containers running; engine {engine}{cfg}"
        )


def _waiting_reason(spec: ServiceSpec | None, p: Plan) -> str:
    if spec is None:
        return "removing"
    if p.stale:
        return f"rolling update: {p.up_to_date}/{spec.replicas} up to date, waiting for readiness"
    return f"{p.available}/{spec.replicas} available, waiting for readiness"


__all__ = ["DISCOVER", "Controller", "LoopSettings", "Plan", "ServiceStatus"]
