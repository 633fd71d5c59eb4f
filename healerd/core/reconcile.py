"""One pass over one service: `reconcile(key, obs, memory) -> (Outcome, MemoryDelta)`.

It reads the observation (never the engine: the loop listed once for the whole batch),
plans, makes sure of the image, asks the host for room, applies the actions through the
executor, and says what it concluded with `decide`. It reads a snapshot of the loop's
memory and returns what it changed there (healerd.core.memdelta), never the loop's lock.
The loop applies the delta and turns the outcome into work-queue calls and a status.
`preview` is the same pass without acting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, partial

from healerd.config import DesiredState
from healerd.core import jobs
from healerd.core.act import Acting, starts_only
from healerd.core.clock import Clock
from healerd.core.context import plan_context
from healerd.core.dependencies import outdated
from healerd.core.images import ImagePolicy
from healerd.core.lifecycle import ServiceState
from healerd.core.memdelta import MemoryDelta, Recorder
from healerd.core.observe import (
    Memory,
    as_dead,
    in_flight,
    started_since,
    still_suspect,
    unlisted_starts,
)
from healerd.core.outcome import Facts, Outcome, decide
from healerd.core.passplan import Prepared, hold_for, with_rollout
from healerd.core.planner import Plan, PlanContext
from healerd.core.readiness import finished
from healerd.core.readmodel import tally
from healerd.core.report import Reporter
from healerd.core.rolloutbook import RolloutBook
from healerd.core.room import RoomCheck
from healerd.core.timings import Timings
from healerd.core.updates import Updates, follows
from healerd.model import Action, ObservedContainer, ServiceSpec

_TIMINGS = Timings()


@dataclass(frozen=True)
class Observation:
    """What one list call of the loop saw, and the declaration it is compared with."""

    containers: Sequence[ObservedContainer]
    desired: DesiredState
    # When the list call began (monotonic): a container started since then shows as it
    # was before (observe.started_since).
    began: float = float("-inf")

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


class Reconciler:
    def __init__(
        self,
        clock: Clock,
        images: ImagePolicy,
        reporter: Reporter,
        acting: Acting,
        room: RoomCheck,
        updates: Updates,
        spec_now: Callable[[str], ServiceSpec | None],
        is_paused: Callable[[str], bool],
        history_limit: int = 1,
        timings: Timings = _TIMINGS,
    ) -> None:
        """`acting` applies plans (and owns the `share` of memory deltas); `updates`:
        the pins of services that follow their tag; `spec_now(key)` the service's spec
        as the loop has it now (after a rollback moved its pin)."""
        self._t = timings
        self._clock = clock
        self._images = images
        self._report = reporter
        self._acting = acting
        self._room = room
        self._updates = updates
        self._spec_now = spec_now
        self._is_paused = is_paused
        self._history_limit = history_limit
        self._rollouts = RolloutBook(clock, reporter)

    def reconcile(self, key: str, obs: Observation, memory: Memory) -> tuple[Outcome, MemoryDelta]:
        """One pass on `memory`, the caller's snapshot of what it remembers of the
        service (healerd.core.memdelta.snapshot): the outcome, and the pass's changes to
        the loop's memory, which the caller applies under its own lock."""
        rec = Recorder(memory)
        return self._pass(key, obs, rec), rec.delta()

    def preview(self, key: str, obs: Observation, memory: Memory) -> list[Action]:
        """What a pass would do right now, without doing it."""
        if self._is_paused(key) or self._updates.data.held(key):
            return []
        spec = obs.desired.services.get(key)
        mine = obs.of(key)
        prep = self._prepare(key, spec, mine, self._clock.time(), obs, memory)
        return list(prep.plan(key, spec, mine).actions)

    def hold_rollout(self, key: str) -> None:
        """healerd itself holds the service's rollout (paused, a dependency not ready,
        the engine away): that is no lack of progress, so its deadline starts again
        (else a long pause would roll a followed tag back as failed)."""
        self._rollouts.hold(key)

    def forget(self, key: str) -> None:
        """The service is gone."""
        self._room.done(key)
        self._images.forget(key)
        self._updates.forget(key)
        self._rollouts.forget(key)
        self._acting.share(MemoryDelta((partial(_forget_suspects, service=key),)))

    def share(self, delta: MemoryDelta) -> None:
        """Hand a pass's delta to the memory's owner (applied under its lock)."""
        self._acting.share(delta)

    def save_runs(self) -> None:
        """Write the runs out if they changed (the memory's owner does, with any delta)."""
        self._acting.share(MemoryDelta())

    # -- the steps of a pass --------------------------------------------------------

    def _left_alone(
        self, key: str, spec: ServiceSpec | None, mine: list[ObservedContainer]
    ) -> Outcome | None:
        """Paused by the operator, or held by the updater (stopped for a snapshot of its
        volumes, or a restore): the pass does nothing, and says why."""
        held = self._updates.data.held(key)
        if not (self._is_paused(key) or held):
            return None
        self._room.done(key)
        self.hold_rollout(key)
        paused = not held
        return decide(Facts(paused=paused, updating=held, tally=tally(spec, mine)), self._t)

    def _pass(self, key: str, obs: Observation, rec: Recorder) -> Outcome:
        now, mono = self._clock.time(), self._clock.monotonic()
        # One snapshot for the whole pass: the declaration may be swapped meanwhile.
        spec = obs.desired.services.get(key)
        mine = self._mine(key, obs, rec, mono)
        self._report.count("passes")
        if (left := self._left_alone(key, spec, mine)) is not None:
            return left
        if spec is not None and follows(spec):
            spec = self._first_pin(key, spec, mine)
        spec, prep = self._judged(key, spec, mine, now, mono, obs, rec.memory)
        if (left := self._left_alone(key, spec, mine)) is not None:
            return left  # a rollback that restores the volumes holds it from now
        hold = hold_for(spec, obs.desired, obs.containers)
        # The one plan of the pass: within the room offered, held for a dependency.
        p, wait_reason = self._room.fit(
            key,
            None if hold else spec,
            lambda offer: prep.plan(key, spec, mine, offer, hold),
        )
        planned = prep.planned(p)
        waits_for = hold if p.actions or p.held_back else ""
        if waits_for:
            self.hold_rollout(key)
        if spec is not None and (p.creates or p.rollout_step or (p.waiting and not hold)):
            # A start in place needs no image check: its container has its image.
            counts = tally(spec, mine, p.available, p.up_to_date)
            problem = self._images.ensure(key, spec, counts)
            if problem is not None:
                self._room.release(key, p)
                return decide(Facts(image_problem=problem, tally=counts), self._t)
        if wait_reason:
            # Waiting for room is no lack of progress: the progress deadline stops.
            self.hold_rollout(key)
        errors = self._acting.act(key, p, rec, mono)
        if p.rollout_step and p.actions and not starts_only(p):
            self._rollouts.batched(key)
        at, window = self._clock.monotonic(), self._t.suspect_window
        suspect = rec.do(partial(still_suspect, service=key, mine=mine, mono=at, window=window))
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
            halted=self._rollouts.halted(key, spec),
            note=p.note,
            settled=p.converged and spec is not None,
            tally=tally(spec, mine, p.available, p.up_to_date),
            file_error=_file_error(spec, obs.desired),
            progress=_waiting_reason(spec, p),
            job=_job(spec, p, mine),
        )
        return _with_update_note(decide(facts, self._t), self._updates.note(key))

    def _mine(
        self, key: str, obs: Observation, rec: Recorder, mono: float
    ) -> list[ObservedContainer]:
        """The service's containers as the pass plans with them: a death an event told
        of before the list shows it (as_dead), a start or a create of healerd's own on
        its way (in_flight)."""
        creating = self._acting.creating()
        listed = obs.of(key)
        window, way = self._t.suspect_window, self._t.start_on_its_way
        mine = [
            rec.do(
                partial(
                    _as_listed,
                    c=c,
                    began=obs.began,
                    mono=mono,
                    creating=creating,
                    window=window,
                    way=way,
                )
            )
            for c in listed
        ]
        late = rec.do(
            partial(unlisted_starts, service=key, listed=listed, mono=mono, on_its_way=way)
        )
        return mine + late

    def _first_pin(
        self, key: str, spec: ServiceSpec, mine: Sequence[ObservedContainer]
    ) -> ServiceSpec:
        """A service following its tag, not pinned yet: pin it before planning, so that
        its first containers are made from the digest (no rollout just to pin them)."""
        return self._updates.first_pin(spec, mine, lambda: self._images.ensure(key, spec) is None)

    def _judged(
        self,
        key: str,
        spec: ServiceSpec | None,
        mine: Sequence[ObservedContainer],
        now: float,
        mono: float,
        obs: Observation,
        mem: Memory,
    ) -> tuple[ServiceSpec | None, Prepared]:
        """The rollout tracked and the planner's context made, after a new digest under
        way that failed had its pin moved back: decided before the one plan is made."""
        self._rollouts.track(key, spec, mine, now, mono)
        prep = self._prepare(key, spec, mine, now, obs, mem)
        if spec is None or not self._updates.judge(
            spec,
            mine,
            now,
            unhealthy=prep.ctx.failed_running,
            forgiven=prep.forgiven,
            halted=self._rollouts.halted(spec.name, spec),
        ):
            return spec, prep
        spec = self._spec_now(key)
        self._rollouts.track(key, spec, mine, now, mono)
        return spec, self._prepare(key, spec, mine, now, obs, mem)

    def _prepare(
        self,
        key: str,
        spec: ServiceSpec | None,
        mine: Sequence[ObservedContainer],
        now: float,
        obs: Observation,
        mem: Memory,
    ) -> Prepared:
        """Turn remembered times into the planner's verdicts: its context."""
        if spec is None:
            return Prepared(PlanContext(now=now, hold_orphans=obs.desired.hold_orphans))
        # Remembered times are monotonic; the planner's are wall-clock ones.
        offset = now - self._clock.monotonic()
        recall = with_rollout(
            mem.recall({c.id for c in mine}, offset), self._rollouts.get(key), offset
        )
        # A rolling update needs a surge container (or room for a stop-first one): not
        # under pressure.
        pressured = self._room.pressured()
        ctx, wake, note = plan_context(spec, mine, now, recall, rollout_allowed=not pressured)
        ctx = replace(
            ctx, history_limit=self._history_limit, recreate=outdated(spec, mine, obs.containers)
        )
        return Prepared(ctx, min(wake) if wake else None, note, frozenset(recall.forgiven))


def _as_listed(
    mem: Memory,
    c: ObservedContainer,
    began: float,
    mono: float,
    creating: frozenset[str],
    window: float,
    way: float,
) -> ObservedContainer:
    """The list's row with what events and healerd's own starts said since: starting if
    it started after the list began, dead if a `die` came, running if a start or a
    create of ours is on its way."""
    c = started_since(mem, c, began)
    return in_flight(mem, as_dead(mem, c, mono, window), mono, way, creating)


def _forget_suspects(mem: Memory, service: str) -> None:
    mem.suspects.pop(service, None)


def _with_update_note(outcome: Outcome, note: str) -> Outcome:
    """A converged service that follows its tag says what its last update did."""
    if note and outcome.state is ServiceState.CONVERGED and not outcome.reason:
        return replace(outcome, reason=note)
    return outcome


def _job(
    spec: ServiceSpec | None, p: Plan, mine: Sequence[ObservedContainer]
) -> tuple[bool, str] | None:
    """A run-once service with nothing left to do and every replica finished."""
    if spec is None or p.actions or not spec.replicas or p.finished != spec.replicas:
        return None
    return jobs.verdict(spec, [c for c in mine if finished(c, spec)])


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
