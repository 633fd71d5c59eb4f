"""The reconcile loop: take service keys from the queue, observe, plan, act, repeat.

Events and timers only put keys into the queue; every pass re-reads the engine with
one label-filtered list call, so a missed event or a restart costs nothing but time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from healerd.config import DesiredState
from healerd.core.backoff import Backoff
from healerd.core.clock import Clock
from healerd.core.executor import ActionResult, Executor
from healerd.core.planner import Plan, plan
from healerd.core.workqueue import WorkQueue
from healerd.engine import Engine, EngineError, EngineUnavailable
from healerd.model import ActionKind, EngineEvent, ObservedContainer, ServiceSpec

log = logging.getLogger("healerd.controller")

# The key of a pass that only looks for services with containers but no declaration.
DISCOVER = ""
# Events after which the container should no longer be listed as running.
SUSPECT_ACTIONS = frozenset({"die", "pause", "oom"})
# How long, and how often, to look again while the list still disagrees with an event.
SUSPECT_WINDOW = 2.0
SUSPECT_RECHECK = 0.02


@dataclass
class ServiceStatus:
    name: str
    desired: int = 0
    running: int = 0
    up_to_date: int = 0
    state: str = "Pending"
    reason: str = ""
    since: float = 0.0


@dataclass
class _CrashState:
    """Kubelet-style crash-loop backoff: replacements of dead containers in quick
    succession wait longer and longer; a quiet spell resets it."""

    count: int = 0
    last_heal: float | None = None
    not_before: float = 0.0


@dataclass
class Stats:
    passes: int = 0
    list_calls: int = 0
    creates: int = 0
    removes: int = 0
    errors: int = 0
    extra: dict[str, int] = field(default_factory=dict)


DEFAULT_BACKOFF = Backoff(0.005, 60.0)
DEFAULT_CRASH_BACKOFF = Backoff(0.25, 60.0)


@dataclass(frozen=True)
class LoopSettings:
    workers: int = 4
    parallel_actions: int = 8
    backoff: Backoff = DEFAULT_BACKOFF
    crash_backoff: Backoff = DEFAULT_CRASH_BACKOFF
    crash_reset: float = 120.0
    engine_down_log_interval: float = 30.0


class Controller:
    def __init__(self, engine: Engine, clock: Clock, settings: LoopSettings) -> None:
        self._engine = engine
        self._clock = clock
        self._settings = settings
        self.queue = WorkQueue(clock, settings.backoff)
        self._executor = Executor(engine, settings.parallel_actions)
        self._key_pool = ThreadPoolExecutor(settings.workers, thread_name_prefix="healerd-key")
        self._slots = threading.Semaphore(settings.workers)
        self._lock = threading.Lock()
        self._desired = DesiredState(services={}, errors=(), hold_orphans=False, broken_files=())
        self._seen: set[str] = set()
        self._crash: dict[str, _CrashState] = {}
        self._suspects: dict[str, dict[str, float]] = {}
        self._status: dict[str, ServiceStatus] = {}
        self.stats = Stats()
        self.engine_ok: bool | None = None
        self._engine_down_logged_at: float | None = None
        self.last_progress = clock.monotonic()
        self.on_engine_back: Callable[[], None] = lambda: None

    # -- inputs --------------------------------------------------------------

    @property
    def desired(self) -> DesiredState:
        return self._desired

    def set_desired(self, state: DesiredState) -> None:
        """Swap in a new desired state and queue every service whose spec changed."""
        old = self._desired
        self._desired = state
        for name in set(old.services) | set(state.services):
            before, after = old.services.get(name), state.services.get(name)
            if before != after:
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
        if event.action in SUSPECT_ACTIONS and event.container_id:
            with self._lock:
                self._suspects.setdefault(event.service, {})[event.container_id] = (
                    self._clock.monotonic()
                )
        self.queue.add(event.service)

    # -- the loop ------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Dispatch keys to the workers until `stop` is set."""
        workers = self._settings.workers
        while not stop.is_set():
            if not self._slots.acquire(timeout=0.5):
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
            observed = self._observe(keys)
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

    # -- one pass -------------------------------------------------------------

    def _observe(self, keys: Iterable[str]) -> list[ObservedContainer] | None:
        """One list call for the whole batch; None when the engine cannot be read."""
        with self._lock:
            self.stats.list_calls += 1
        try:
            observed = self._engine.list_managed()
        except EngineError as exc:
            self._engine_failed(exc, keys)
            return None
        self._engine_reachable()
        with self._lock:
            self._seen = {c.service for c in observed if c.service}
        return observed

    def _engine_failed(self, exc: EngineError, keys: Iterable[str]) -> None:
        now = self._clock.monotonic()
        was_ok = self.engine_ok
        self.engine_ok = False if isinstance(exc, EngineUnavailable) else self.engine_ok
        last = self._engine_down_logged_at
        if (
            was_ok is not False
            or last is None
            or now - last >= self._settings.engine_down_log_interval
        ):
            self._engine_down_logged_at = now
            log.warning(
                "cannot list containers: %s (services wait: %s)",
                exc,
                ", ".join(sorted(k for k in keys if k)) or "-",
            )

    def _engine_reachable(self) -> None:
        if self.engine_ok is False:
            log.info("engine reachable again: resyncing every service")
            self.engine_ok = True
            with self._lock:
                # Containers stopped by an engine restart are no crash loop.
                self._crash.clear()
            self.enqueue_all(force=True)
            self.on_engine_back()
        self.engine_ok = True

    def _handle(self, key: str, observed: Sequence[ObservedContainer] | None) -> None:
        try:
            if observed is None:
                delay = self.queue.add_rate_limited(key)
                self._set_status(key, "EngineUnreachable", f"retry in {delay:.1f}s")
                return
            if key == DISCOVER:
                self._discover(observed)
                return
            self._reconcile(key, observed)
        except Exception:
            log.exception("reconcile of %s failed unexpectedly", key or "<discover>")
            self.queue.add_rate_limited(key)
        finally:
            self.queue.done(key)
            self.last_progress = self._clock.monotonic()

    def _discover(self, observed: Sequence[ObservedContainer]) -> None:
        desired = self._desired.services
        for service in sorted({c.service for c in observed if c.service} - set(desired)):
            self.queue.add(service)
        self.queue.forget(DISCOVER)

    def _reconcile(self, key: str, observed: Sequence[ObservedContainer]) -> None:
        now = self._clock.monotonic()
        desired = self._desired
        spec = desired.services.get(key)
        with self._lock:
            self.stats.passes += 1
            crash = self._crash.get(key)
        allow_heal = crash is None or now >= crash.not_before
        p = plan(key, spec, observed, allow_heal=allow_heal, hold_orphans=desired.hold_orphans)
        results = self._executor.apply(p.actions) if p.actions else []
        self._record(key, results)
        errors = [r for r in results if not r.ok]
        if p.heals and not errors:
            crash = self._note_heal(key, now)
        mine = [c for c in observed if c.service == key]
        if self._still_suspect(key, mine, now):
            self.queue.add_after(key, SUSPECT_RECHECK)
        if errors:
            delay = self.queue.add_rate_limited(key)
            self._set_status(
                key, "Degraded", f"{errors[0].error}; retry in {delay:.1f}s", spec, mine
            )
        elif p.actions:
            # Look again: the engine, not our memory, says whether it worked.
            self.queue.add(key)
            self._set_status(key, "Progressing", p.actions[0].reason, spec, mine)
        elif p.heals_held and crash is not None:
            wait = crash.not_before - now
            self.queue.add_after(key, wait)
            self._set_status(
                key,
                "CrashBackoff",
                f"containers keep stopping; next replacement in {wait:.1f}s",
                spec,
                mine,
            )
        else:
            self.queue.forget(key)
            if spec is None and not mine:
                self._drop(key)
            elif p.note:
                self._set_status(key, "Held", p.note, spec, mine)
            else:
                self._set_status(key, "Converged", "", spec, mine)

    def _still_suspect(self, key: str, mine: Sequence[ObservedContainer], now: float) -> bool:
        """True while a container that an event said stopped is still listed as running."""
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

    def _note_heal(self, key: str, now: float) -> _CrashState:
        s = self._settings
        with self._lock:
            crash = self._crash.setdefault(key, _CrashState())
            recent = crash.last_heal is not None and now - crash.last_heal < s.crash_reset
            crash.count = crash.count + 1 if recent else 0
            crash.last_heal = now
            delay = s.crash_backoff.delay(crash.count)
            crash.not_before = now + delay
        if delay:
            log.info("%s: containers stopped again; next replacement not before %.2fs", key, delay)
        return crash

    def _record(self, key: str, results: Sequence[ActionResult]) -> None:
        for r in results:
            verb = r.action.kind.value
            if r.ok:
                what = r.container_name or r.container_id or ""
                log.info("%s: %sd %s (%s)", key, verb, what, r.action.reason)
            else:
                log.warning("%s: %s failed: %s", key, verb, r.error)
        with self._lock:
            for r in results:
                if not r.ok:
                    self.stats.errors += 1
                elif r.action.kind is ActionKind.CREATE:
                    self.stats.creates += 1
                else:
                    self.stats.removes += 1

    # -- status ---------------------------------------------------------------

    def _set_status(
        self,
        key: str,
        state: str,
        reason: str,
        spec: ServiceSpec | None = None,
        mine: Sequence[ObservedContainer] = (),
    ) -> None:
        now = self._clock.time()
        with self._lock:
            st = self._status.setdefault(key, ServiceStatus(name=key, since=now))
            changed = st.state != state
            if changed:
                st.since = now
            st.state, st.reason = state, reason
            st.running = sum(1 for c in mine if c.running)
            st.desired = spec.replicas if spec is not None else 0
            st.up_to_date = (
                sum(1 for c in mine if c.running and c.spec_hash == spec.spec_hash) if spec else 0
            )
        if changed:
            # A line per change of state, none per pass: the log tells the story.
            log.info(
                "%s: %s (%d/%d running)%s",
                key,
                state,
                st.running,
                st.desired,
                f": {reason}" if reason else "",
            )

    def _drop(self, key: str) -> None:
        with self._lock:
            self._status.pop(key, None)
            self._crash.pop(key, None)

    def statuses(self) -> list[ServiceStatus]:
        with self._lock:
            return [
                ServiceStatus(**vars(s))
                for s in sorted(self._status.values(), key=lambda s: s.name)
            ]

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
            f"{converged}/{len(self._desired.services)} services converged, "
            f"{containers} containers running; engine {engine}{cfg}"
        )


__all__ = ["DISCOVER", "Controller", "LoopSettings", "Plan", "ServiceStatus"]
