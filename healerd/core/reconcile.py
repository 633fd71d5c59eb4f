"""One pass over one service: `reconcile(key, observation) -> Outcome`.

It reads the observation (never the engine: the loop listed once for the whole batch),
plans, makes sure of the image, asks the host for room, applies the actions through the
executor, and says what it concluded with `decide`. The loop turns the outcome into
work-queue calls and a status. `preview` is the same pass without acting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from healerd.config import DesiredState
from healerd.core import jobs, rollouts
from healerd.core.admission import Admission
from healerd.core.clock import Clock
from healerd.core.context import Recall, plan_context
from healerd.core.dependencies import outdated, unmet
from healerd.core.executor import ActionResult, Executor
from healerd.core.images import ImagePolicy
from healerd.core.observe import (
    Memory,
    as_dead,
    in_flight,
    note_started,
    still_suspect,
    unlisted_starts,
)
from healerd.core.outcome import Facts, Outcome, decide
from healerd.core.planner import Plan, PlanContext, plan
from healerd.core.readiness import finished
from healerd.core.readmodel import tally
from healerd.core.report import Reporter
from healerd.core.rollouts import Rollout
from healerd.core.room import admit
from healerd.core.runs import NoRunBook, RunBook
from healerd.core.state import ServiceState
from healerd.core.timings import Timings
from healerd.core.updates import Updates, follows
from healerd.model import Action, ActionKind, ObservedContainer, ServiceSpec
from healerd.vocabulary import EventKind


@dataclass(frozen=True)
class Observation:
    """What one list call of the loop saw, and the declaration it is compared with."""

    containers: Sequence[ObservedContainer]
    desired: DesiredState

    @cached_property
    def _by_service(self) -> dict[str, list[ObservedContainer]]:
        grouped: dict[str, list[ObservedContainer]] = {}
        for c in self.containers:
            grouped.setdefault(c.service, []).append(c)
        return grouped

    def of(self, service: str) -> list[ObservedContainer]:
        """The containers of one service: grouped once per look, not scanned per pass
        (at 10 services x 100 the scans were a tenth of a pass)."""
        return list(self._by_service.get(service, ()))


@dataclass(frozen=True)
class _Planned:
    plan: Plan
    ctx: PlanContext
    wake_at: float | None
    backoff_note: str
    forgiven: frozenset[str] = frozenset()


class Reconciler:
    def __init__(
        self,
        clock: Clock,
        executor: Executor,
        images: ImagePolicy,
        reporter: Reporter,
        admission: Admission | None,
        memory: Memory,
        lock: threading.Lock,
        is_paused: Callable[[str], bool],
        history_limit: int = 1,
        updates: Updates | None = None,
        spec_now: Callable[[str], ServiceSpec | None] | None = None,
        runbook: RunBook | None = None,
        after_start: Callable[[str, str | None], None] | None = None,
        timings: Timings | None = None,
    ) -> None:
        """`updates`: the pins of services that follow their tag; `spec_now(key)` the
        service's spec as the loop has it now (after a rollback moved its pin)."""
        self._t = timings or Timings()
        self._clock = clock
        self._executor = executor
        self._images = images
        self._report = reporter
        self._admission = admission
        # Shared with the loop, which folds lists and events into it under `lock`.
        self._mem = memory
        self._lock = lock
        self._is_paused = is_paused
        self._history_limit = history_limit
        self._updates = updates
        self._spec_now = spec_now
        self._runbook = runbook or NoRunBook()
        # Told when a start of `_start_later` ends (its error or None); None: starts are
        # waited for like every other action.
        self._after_start = after_start
        self.rollouts: dict[str, Rollout] = {}

    def reconcile(self, key: str, obs: Observation) -> Outcome:
        now, mono = self._clock.time(), self._clock.monotonic()
        # One snapshot for the whole pass: the declaration may be swapped meanwhile.
        desired = obs.desired
        spec = desired.services.get(key)
        mine = self._mine(key, obs, mono)
        self._report.count("passes")
        if self._is_paused(key):
            self._done_with_room(key)
            self.hold_rollout(key)
            return decide(Facts(paused=True, tally=tally(spec, mine)), self._t)
        if self._updates is not None and spec is not None and follows(spec):
            spec = self._first_pin(key, spec, mine)
        self._track_rollout(key, spec, mine, now, mono)
        planned = self._plan(key, spec, mine, now, desired, obs.containers)
        if spec is not None and self._rolled_back(spec, mine, now, planned):
            spec = self._spec_now(key) if self._spec_now is not None else spec
            self._track_rollout(key, spec, mine, now, mono)
            planned = self._plan(key, spec, mine, now, desired, obs.containers)
        planned, waits_for = _ordered(key, spec, obs, mine, planned)
        if waits_for:
            self.hold_rollout(key)
        p = planned.plan
        if spec is not None and (p.creates or p.rollout_step):
            # A start in place needs no image check: its container has its image.
            counts = tally(spec, mine, p.available, p.up_to_date)
            problem = self._images.ensure(key, spec, counts)
            if problem is not None:
                self._done_with_room(key)
                return decide(Facts(image_problem=problem, tally=counts), self._t)
        p, wait_reason = self._room(key, spec, mine, planned)
        errors = self._act(key, p, mono)
        with self._lock:
            suspect = self._suspect(key, mine)
            r = self.rollouts.get(key)
        facts = Facts(
            declared=spec is not None,
            has_containers=bool(mine),
            actions=len(p.actions),
            first_action=p.actions[0].reason if p.actions else "",
            error=errors[0] if errors else "",
            wait_reason=wait_reason,
            dependency_wait=waits_for,
            wake_in=None if planned.wake_at is None else planned.wake_at - now,
            suspect=suspect,
            held=p.held > 0,
            backoff_note=planned.backoff_note,
            halted=rollouts.halted(r, spec, self._clock.monotonic()),
            note=p.note,
            settled=p.converged and spec is not None,
            tally=tally(spec, mine, p.available, p.up_to_date),
            file_error=_file_error(spec, desired),
            progress=_waiting_reason(spec, p),
            job=_job(spec, p, mine),
        )
        outcome = decide(facts, self._t)
        return self._with_update_note(key, outcome)

    def _mine(self, key: str, obs: Observation, mono: float) -> list[ObservedContainer]:
        """The service's containers as the pass plans with them: a death an event told
        of before the list shows it (as_dead), a start or a create of healerd's own on
        its way (in_flight)."""
        creating = self._executor.creating()
        listed = obs.of(key)
        with self._lock:
            mine = [self._as_listed(c, mono, creating) for c in listed]
            late = unlisted_starts(self._mem, key, listed, mono, self._t.start_on_its_way)
            return mine + late

    def preview(self, key: str, obs: Observation) -> list[Action]:
        """What a pass would do right now, without doing it."""
        if self._is_paused(key):
            return []
        spec = obs.desired.services.get(key)
        mine = obs.of(key)
        planned = self._plan(key, spec, mine, self._clock.time(), obs.desired, obs.containers)
        return list(planned.plan.actions)

    def hold_rollout(self, key: str) -> None:
        """healerd itself holds the service's rollout (paused, a dependency not ready,
        the engine away): that is no lack of progress, so its deadline starts again
        (else a long pause would roll a followed tag back as failed)."""
        with self._lock:
            r = self.rollouts.get(key)
            if r is not None:
                r.last_progress = self._clock.monotonic()

    def forget(self, key: str) -> None:
        """The service is gone."""
        if self._admission is not None:
            self._admission.done(key)
        self._images.forget(key)
        if self._updates is not None:
            self._updates.forget(key)
        with self._lock:
            self.rollouts.pop(key, None)
            self._mem.suspects.pop(key, None)

    # -- the steps of a pass --------------------------------------------------------

    def _as_listed(
        self, c: ObservedContainer, mono: float, creating: frozenset[str]
    ) -> ObservedContainer:
        """The list's row with what events said since (under the lock): dead if a `die`
        came, running if a start or a create of ours is on its way."""
        dead = as_dead(self._mem, c, mono, self._t.suspect_window)
        return in_flight(self._mem, dead, mono, self._t.start_on_its_way, creating)

    def _suspect(self, key: str, mine: Sequence[ObservedContainer]) -> bool:
        """(Under the lock.) An event the list does not confirm yet: look again soon."""
        mono, window = self._clock.monotonic(), self._t.suspect_window
        return still_suspect(self._mem, key, mine, mono, window)

    def _first_pin(
        self, key: str, spec: ServiceSpec, mine: Sequence[ObservedContainer]
    ) -> ServiceSpec:
        """A service following its tag, not pinned yet: pin it before planning, so that
        its first containers are made from the digest (no rollout just to pin them)."""
        assert self._updates is not None
        return self._updates.first_pin(spec, mine, lambda: self._images.ensure(key, spec) is None)

    def _rolled_back(
        self,
        spec: ServiceSpec,
        mine: Sequence[ObservedContainer],
        now: float,
        planned: _Planned,
    ) -> bool:
        """A new digest under way that failed: its pin goes back (the caller plans again)."""
        if self._updates is None:
            return False
        with self._lock:
            r = self.rollouts.get(spec.name)
        return self._updates.judge(
            spec,
            mine,
            now,
            unhealthy=planned.ctx.failed_running,
            forgiven=planned.forgiven,
            halted=rollouts.halted(r, spec, self._clock.monotonic()),
        )

    def _with_update_note(self, key: str, outcome: Outcome) -> Outcome:
        """A converged service that follows its tag says what its last update did."""
        note = self._updates.note(key) if self._updates is not None else ""
        if note and outcome.state is ServiceState.CONVERGED and not outcome.reason:
            return replace(outcome, reason=note)
        return outcome

    def _plan(
        self,
        key: str,
        spec: ServiceSpec | None,
        mine: Sequence[ObservedContainer],
        now: float,
        desired: DesiredState,
        everything: Sequence[ObservedContainer] = (),
    ) -> _Planned:
        """Turn remembered times into the planner's verdicts, and plan."""
        if spec is None:
            ctx = PlanContext(now=now, hold_orphans=desired.hold_orphans)
            return _Planned(plan(key, spec, mine, ctx), ctx, None, "")
        # Remembered times are monotonic; the planner's are wall-clock ones.
        offset = now - self._clock.monotonic()
        with self._lock:
            recall = self._mem.recall({c.id for c in mine}, offset)
            r = self.rollouts.get(key)
        if r is not None:
            recall = _with_rollout(recall, r, offset)
        # A rolling update needs a surge container (or room for a stop-first one): not
        # under pressure.
        pressured = self._admission is not None and self._admission.pressure().any
        ctx, wake, note = plan_context(spec, mine, now, recall, rollout_allowed=not pressured)
        ctx = replace(
            ctx, history_limit=self._history_limit, recreate=outdated(spec, mine, everything)
        )
        return _Planned(
            plan(key, spec, mine, ctx),
            ctx,
            min(wake) if wake else None,
            note,
            frozenset(recall.forgiven),
        )

    def _track_rollout(
        self,
        key: str,
        spec: ServiceSpec | None,
        mine: Sequence[ObservedContainer],
        now: float,
        mono: float,
    ) -> None:
        with self._lock:
            r, event = rollouts.track(self.rollouts.get(key), spec, mine, now, mono)
            if r is None:
                self.rollouts.pop(key, None)
            else:
                self.rollouts[key] = r
        if event is EventKind.ROLLOUT_STARTED and spec is not None:
            n = rollouts.stale_count(spec, mine)
            self._report.events.record(event, key, f"{n} container(s) to replace")
        elif event is EventKind.ROLLOUT_COMPLETE:
            self._report.events.record(event, key, "all containers run the new spec")

    def _room(
        self,
        key: str,
        spec: ServiceSpec | None,
        mine: Sequence[ObservedContainer],
        planned: _Planned,
    ) -> tuple[Plan, str]:
        """The plan the host has room for, and why some of it waits ("" if none)."""
        p, wait_reason = planned.plan, ""
        if self._admission is None:
            return p, ""
        if spec is not None and (p.creates or p.starts):
            p, wait_reason = admit(self._admission, key, spec, mine, planned.ctx, p)
        else:
            self._admission.done(key)
        pressure = self._admission.pressure()
        if not wait_reason and pressure.any and p.stale:
            wait_reason = f"the rolling update waits: {pressure.describe()}"
        if wait_reason:
            # Waiting for room is no lack of progress: the progress deadline stops.
            with self._lock:
                r = self.rollouts.get(key)
                if r is not None:
                    r.last_progress = self._clock.monotonic()
        return p, wait_reason

    def _act(self, key: str, p: Plan, mono: float) -> list[str]:
        """Apply the plan; returns the errors of the actions that failed. A plan of
        starts in place only is not waited for (`_start_later`)."""
        if not p.actions:
            return []
        if self._after_start is not None and _starts_only(p):
            self._start_later(key, p, mono)
            return []
        results = self._executor.apply(p.actions)
        self._report.results(key, results)
        for res in results:
            self._healed(key, res)
        self._note_starts(results)
        if p.rollout_step:
            with self._lock:
                r = self.rollouts.get(key)
                if r is not None:
                    r.last_batch = self._clock.monotonic()
        return [res.error for res in results if res.error is not None]

    def _start_later(self, key: str, p: Plan, mono: float) -> None:
        """The starts go to the executor's pool and the pass ends: deaths that come
        meanwhile are planned and started at once, as the engine reports them, not a
        batch of starts later (a storm). Each start's end is reported (`_started`) and
        looks at the service again; until then its container counts as starting."""
        with self._lock:
            for a in p.actions:
                assert a.container is not None
                self._mem.starting[a.container.id] = mono
                self._mem.start_rows[a.container.id] = a.container
        self._executor.start_later(p.actions, lambda res: self._started(key, res))

    def _started(self, key: str, res: ActionResult) -> None:
        """One start of `_start_later` ended (an executor thread)."""
        self._report.results(key, [res])
        c = res.action.container
        assert c is not None
        with self._lock:
            self._mem.starting.pop(c.id, None)
            self._mem.start_rows.pop(c.id, None)
        self._healed(key, res)
        self._note_starts([res])
        assert self._after_start is not None
        self._after_start(key, res.error)

    def _healed(self, key: str, res: ActionResult) -> None:
        """The heal latency of a failed container a start or a create brought back."""
        a = res.action
        if not res.ok or a.container is None or a.kind not in (ActionKind.CREATE, ActionKind.START):
            return
        with self._lock:
            died = self._mem.dead_since.get(a.container.id)
        if died is not None:
            how = "in-place" if a.kind is ActionKind.START else "replaced"
            self._report.healed(key, max(0.0, self._clock.monotonic() - died), how)

    def _note_starts(self, results: Sequence[ActionResult]) -> None:
        """The containers started in place carry their counts on (healerd.core.runs):
        remembered, and kept in the run book for a healerd started after this one."""
        wall, mono = self._clock.time(), self._clock.monotonic()
        with self._lock:
            for res in results:
                if res.ok and res.action.kind is ActionKind.START:
                    note_started(self._mem, res.action, mono, wall)
        self.save_runs()

    def save_runs(self) -> None:
        """Write the runs out if they changed (not under the lock: a file write)."""
        with self._lock:
            if not self._mem.runs_dirty:
                return
            self._mem.runs_dirty = False
            runs = dict(self._mem.runs)
        self._runbook.save(runs)

    def _done_with_room(self, key: str) -> None:
        if self._admission is not None:
            self._admission.done(key)


def _ordered(
    key: str,
    spec: ServiceSpec | None,
    obs: Observation,
    mine: Sequence[ObservedContainer],
    planned: _Planned,
) -> tuple[_Planned, str]:
    """No create, start or rollout step while a dependency is not ready: the plan
    without them, and why ("" when nothing waits)."""
    if spec is None or not spec.depends_on or not planned.plan.actions:
        return planned, ""
    reason = unmet(spec, obs.containers, obs.desired.services)
    if not reason:
        return planned, ""
    held = replace(planned.ctx, max_replacements=0, max_extras=0, rollout_allowed=False)
    return replace(planned, plan=plan(key, spec, mine, held), ctx=held), reason


def _starts_only(p: Plan) -> bool:
    """Starts in place of stopped containers and nothing else (none is stopped first)."""
    return all(
        a.kind is ActionKind.START and a.container is not None and not a.container.running
        for a in p.actions
    )


def _job(
    spec: ServiceSpec | None, p: Plan, mine: Sequence[ObservedContainer]
) -> tuple[bool, str] | None:
    """A run-once service with nothing left to do and every replica finished."""
    if spec is None or p.actions or not spec.replicas or p.finished != spec.replicas:
        return None
    return jobs.verdict(spec, [c for c in mine if finished(c, spec)])


def _with_rollout(recall: Recall, r: Rollout, offset: float) -> Recall:
    return replace(recall, rollout=(r.last_progress + offset, r.last_batch + offset))


def _file_error(spec: ServiceSpec | None, desired: DesiredState) -> str:
    """The first error of the service's file, if that file is broken now."""
    if spec is None or not spec.source_file or spec.source_file not in desired.broken_files:
        return ""
    first = next((e for e in desired.errors if e.file == spec.source_file), None)
    detail = f": {first}" if first else ""
    return f"its file is invalid, the last good spec keeps running{detail}"


def _waiting_reason(spec: ServiceSpec | None, p: Plan) -> str:
    if spec is None:
        return "removing"
    if p.stale:
        return f"rolling update: {p.up_to_date}/{spec.replicas} up to date, waiting for readiness"
    return f"{p.available}/{spec.replicas} available, waiting for readiness"


__all__ = ["Observation", "Reconciler"]
