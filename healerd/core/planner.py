"""The pure planner: desired spec + observed containers -> actions. No I/O here.

One call plans one service from one observation. The loop applies the actions and
observes again, so a plan only has to move towards the desired state, not reach it
in one step: a rolling update takes several passes.

Words used here:
- failed: not running, or unhealthy past its grace. Healed once its crash-loop backoff
  lets it (until then it stays, for its logs, and keeps its slot): started again in
  place when it still can serve (the current spec, a state a start can leave), else
  replaced by a new container.
- alive: running and not failed. available: alive, not `unhealthy` or `starting`, and up
  for `min_ready_seconds` (healerd.core.readiness, with the other readiness notions).
- current / stale: the spec hash label matches the declared spec, or not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from healerd.core import readiness
from healerd.core.crashloop import READY, Replacement, replacement_verdict
from healerd.core.lineage import depths, history
from healerd.core.plantypes import Plan, PlanContext
from healerd.core.readiness import finished
from healerd.core.rolling import at_most, drop_stale, min_available, rollout_step
from healerd.core.runs import exit_words
from healerd.model import (
    Action,
    ActionKind,
    ContainerState,
    ObservedContainer,
    ServiceSpec,
    UpdateOrder,
)

# States in which a failed container still holds what its replacement needs (a fixed
# host port, memory): it is stopped first.
_HOLDING = frozenset({ContainerState.RUNNING, ContainerState.PAUSED, ContainerState.RESTARTING})
# States a start in place can leave (running ones unhealthy, or paused, are stopped
# first): not `dead` (a removal failed half-way) nor `removing` (going).
_STARTABLE = _HOLDING | {ContainerState.EXITED, ContainerState.CREATED}
# How the reason of every start in place begins (events, logs, status).
IN_PLACE = "restarted in place: "


# A plan with nothing remembered: no verdicts, no limits (tests, previews).
_NO_CONTEXT = PlanContext()


def _oldest_first(containers: Sequence[ObservedContainer]) -> list[ObservedContainer]:
    return sorted(containers, key=lambda c: (c.created, c.id))


def plan(
    service: str,
    spec: ServiceSpec | None,
    containers: Sequence[ObservedContainer],
    ctx: PlanContext = _NO_CONTEXT,
) -> Plan:
    """Plan one pass for `service`; `spec` None means it is no longer declared."""
    mine = [c for c in containers if c.service == service]
    if spec is None:
        return _plan_undeclared(service, mine, ctx)
    p = _Planning(service, spec, mine, ctx)
    if len(p.cur) + len(p.done) >= spec.replicas:
        return p.scale_down()
    return p.heal_and_roll()


class _Planning:
    """One plan being built: the service's containers sorted into the planner's words,
    and the actions chosen so far."""

    def __init__(
        self, service: str, spec: ServiceSpec, mine: list[ObservedContainer], ctx: PlanContext
    ) -> None:
        self.service, self.spec, self.ctx = service, spec, ctx
        self.now = ctx.now
        self.history = history(mine)
        mine = [c for c in mine if c not in self.history]
        self.mine = mine
        failed_running = ctx.failed_running
        # A run-once container that exited for good holds its slot: neither failed nor alive.
        self.done = [c for c in mine if finished(c, spec)]
        self.failed = [
            c for c in mine if (not c.running or c.id in failed_running) and c not in self.done
        ]
        alive = [c for c in mine if c.running and c.id not in failed_running]
        self.cur = [c for c in alive if c.spec_hash == spec.spec_hash]
        self.stale = [c for c in alive if c.spec_hash != spec.spec_hash]
        # Data before availability: an old container's anonymous volumes go over to its
        # replacement, which must not run beside it (as Compose recreates: stop-first).
        self.order = spec.update_order
        if any(c.anon_volumes for c in self.stale):
            self.order = UpdateOrder.STOP_FIRST
        self.ready_failed = [c for c in self.failed if self._verdict(c).ready]
        self.held = [c for c in self.failed if not self._verdict(c).ready]
        self.actions: list[Action] = []
        self._held_back = False  # under ctx.hold: something would have acted
        self._pending: list[ObservedContainer] = []
        self._replaced: list[ObservedContainer] = []

    def _verdict(self, c: ObservedContainer) -> Replacement:
        return self.ctx.replacements.get(c.id, READY)

    def remove(self, c: ObservedContainer, reason: str) -> None:
        self.actions.append(
            Action(ActionKind.REMOVE, self.service, reason, spec=self.spec, container=c)
        )

    def prune_history(self, becoming: int = 0) -> None:
        """Keep the newest `history_limit` per replica. The oldest of each line goes
        first: removing a container whose predecessor stays would make that predecessor
        unreplaced again (the label that made it history goes with it)."""
        keep = self.ctx.history_limit * max(1, self.spec.replicas)
        # The failed containers replaced in this pass become history too.
        excess = len(self.history) + becoming - keep
        if excess <= 0:
            return
        depth = depths(self.history)
        oldest = sorted(self.history, key=lambda c: (depth[c.id], c.created, c.id))
        for c in oldest[:excess]:
            self.remove(c, f"history beyond history_limit ({keep})")

    def create(self, reason: str) -> None:
        """A create stands in for the next failed container still to replace, if any."""
        replaces = self._pending.pop(0) if self._pending else None
        if replaces is not None:
            self._replaced.append(replaces)
            reason = f"replace {_failure(replaces, self.ctx)}"
        verdict = self._verdict(replaces) if replaces else READY
        self.actions.append(
            Action(
                ActionKind.CREATE,
                self.service,
                reason,
                spec=self.spec,
                container=replaces,
                restarts=replaces.restarts + 1 if replaces else 0,
                crash_streak=verdict.crash_streak if replaces else 0,
            )
        )

    def scale_down(self) -> Plan:
        """Enough current ones: extras go, not-yet-available and newest first; no old or
        failed container is needed any more."""
        spec, now, desired = self.spec, self.now, self.spec.replicas
        pool = self.cur + self.done
        extras: list[ObservedContainer] = []
        if len(pool) > desired:  # converged (the usual pass) needs no ranking
            ranked = sorted(pool, key=lambda c: (readiness.available(c, spec, now), -c.created))
            extras = ranked[: len(pool) - desired]
        for c in extras:
            self.remove(c, f"scale down to {desired}")
        kept = [c for c in self.cur if c not in extras]
        self.prune_history()
        drop_stale(spec, kept, self.stale, len(self.stale), now, self.remove, self.order)
        for c in _oldest_first(self.failed):
            self.remove(c, f"{_failure(c, self.ctx)}, not needed")
        self._recreate_outdated(kept)
        p = _done(self.actions, spec, self.mine, self.cur, self.stale, [], now, done=self.done)
        return dataclasses.replace(p, held_back=self._held_back)

    def heal_and_roll(self) -> Plan:
        """Replicas missing outright (crashed, removed, scaled up) are made at once with
        the current spec; a held failed container keeps its slot until its backoff ends.
        Each create stands in for one failed container while any is left, so that its
        replacement carries the restart count and crash streak on (and takes over its
        anonymous volumes; the failed one stays as history). Failed containers the host
        has no room to replace yet stay (as held ones do) and keep their slot. Then,
        room permitting, one batch of a rolling update."""
        spec, ctx, cur, stale, held = self.spec, self.ctx, self.cur, self.stale, self.held
        desired = spec.replicas
        missing = max(0, desired - len(cur) - len(stale) - len(held) - len(self.done))
        # What starts in place takes the slots first (the engine's stops first: they had
        # not failed), then the oldest failed ones.
        to_replace = sorted(
            _oldest_first(self.ready_failed),
            key=lambda c: (not self._in_place(c), c.id not in ctx.engine_stopped),
        )
        n_repl = min(missing, len(to_replace))
        n_extra = missing - n_repl
        a_repl, a_extra, room = self._fit(to_replace[:n_repl], n_extra)
        waiting = (n_repl - a_repl) + (n_extra - a_extra)
        made = a_repl + a_extra
        # Failed containers beyond what is missing: a surge create may stand in for them.
        self._heal(to_replace[:a_repl], to_replace[n_repl:], made)
        surplus = len(cur) + len(stale) + len(held) + len(self.done) - desired
        step = False
        if surplus > 0 and stale:
            # More alive than wanted (a surge container is up): old ones go.
            drop_stale(spec, cur, stale, surplus, self.now, self.remove, self.order)
        elif stale and self._may_roll(waiting):
            held_cur = [c for c in held if c.spec_hash == spec.spec_hash]
            step = self._rollout_step(held_cur, made, room)
        if not made and not waiting:
            self._recreate_outdated(cur)
        self._settle_replaced()
        p = self._done(waiting)
        held_back = self._held_back or bool(ctx.hold and waiting)
        return dataclasses.replace(p, rollout_step=step, held_back=held_back)

    def _fit(
        self, to_replace: list[ObservedContainer], n_extra: int
    ) -> tuple[int, int, int | None]:
        """How many replacements and extras start now, and the room left for a rollout's
        surge (PlanContext.room): replacements in their order until one needs room there
        is not, then extras. Under `hold`, none."""
        if self.ctx.hold:
            return 0, 0, 0
        room = self.ctx.room
        a_repl = 0
        for c in to_replace:
            if c.state not in _HOLDING:  # a swap frees what it takes
                if room is not None and room <= 0:
                    break
                room = None if room is None else room - 1
            a_repl += 1
        a_extra = at_most(n_extra, room) if self.ctx.extras_allowed else 0
        return a_repl, a_extra, None if room is None else room - a_extra

    def _may_roll(self, waiting: int) -> bool:
        """A rollout batch may start: allowed, and no create waits for room. Under `hold`
        none starts, but the plan notes that one would have (Plan.held_back)."""
        if not self.ctx.rollout_allowed:
            return False
        if self.ctx.hold and not waiting:  # waiting: held back already
            held_cur = [c for c in self.held if c.spec_hash == self.spec.spec_hash]
            self._held_back |= rollout_step(
                self.spec,
                self.cur,
                self.stale,
                held_cur,
                0,
                self.now,
                lambda c, why: None,
                lambda why: None,
                None,
                self.order,
                lambda c: None,
            )
        return not waiting and not self.ctx.hold

    def _heal(
        self, now: list[ObservedContainer], surplus: list[ObservedContainer], made: int
    ) -> None:
        """Start in place what still can serve; create for the rest."""
        starts = [c for c in now if self._in_place(c)]
        for c in starts:
            self._start(c)
        self._pending = [c for c in now if c not in starts] + surplus
        for _ in range(made - len(starts)):
            self.create(f"{self.spec.replicas} wanted")

    def _in_place(self, c: ObservedContainer) -> bool:
        """Whether a start of this failed container heals it: the current spec, a state
        a start can leave, and no reason to replace it instead."""
        return (
            c.spec_hash == self.spec.spec_hash
            and c.state in _STARTABLE
            and c.id not in self.ctx.replace
        )

    def _start(self, c: ObservedContainer) -> None:
        """Heal in place: stop first what still runs (unhealthy) or is paused, then
        start the same container. It carries its counts on (healerd.core.runs)."""
        why = _in_place_reason(c, self.ctx)
        if c.state in _HOLDING:
            self.actions.append(Action(ActionKind.STOP, self.service, why, self.spec, c))
        self.actions.append(
            Action(
                ActionKind.START,
                self.service,
                IN_PLACE + why,
                spec=self.spec,
                container=c,
                restarts=c.restarts + 1,
                crash_streak=self._verdict(c).crash_streak,
            )
        )

    def _settle_replaced(self) -> None:
        """A replaced container that still holds its slot (unhealthy, paused) is stopped
        first, and stays as history; a failed one no create stood in for is not needed."""
        for c in self._replaced:
            if c.state in _HOLDING:
                self.actions.append(
                    Action(ActionKind.STOP, self.service, _failure(c, self.ctx), self.spec, c)
                )
        for c in self._pending:
            self.remove(c, f"{_failure(c, self.ctx)}, not needed")
        self.prune_history(becoming=len(self._replaced))

    def _rollout_step(self, held_cur: list[ObservedContainer], made: int, room: int | None) -> bool:
        return rollout_step(
            self.spec,
            self.cur,
            self.stale,
            held_cur,
            made,
            self.now,
            self.remove,
            self.create,
            room,
            self.order,
            self._recreate,
        )

    def _recreate_outdated(self, cur: list[ObservedContainer]) -> None:
        """depends_on restart: true (never while a dependency is not ready)."""
        if self.ctx.rollout_allowed:
            outdated = _oldest_first([c for c in cur if c.id in self.ctx.recreate])
            if self.ctx.hold:
                self._held_back |= bool(outdated)
                return
            for c in outdated:
                self._recreate(c, self.ctx.recreate[c.id])

    def _recreate(
        self, c: ObservedContainer, reason: str = "spec changed: stop-first replacement"
    ) -> None:
        """A stop-first step for an old container with anonymous volumes (or one to
        recreate): stop it, create its replacement on its volumes, then remove it."""
        self.actions.append(Action(ActionKind.STOP, self.service, reason, self.spec, c))
        self.actions.append(
            Action(ActionKind.CREATE, self.service, reason, self.spec, c, retire=True)
        )
        self.actions.append(Action(ActionKind.REMOVE, self.service, reason, self.spec, c))

    def _done(self, waiting: int) -> Plan:
        return _done(
            self.actions,
            self.spec,
            self.mine,
            self.cur,
            self.stale,
            self.held,
            self.now,
            waiting,
            done=self.done,
        )


def _failure(c: ObservedContainer | None, ctx: PlanContext) -> str:
    if c is None:
        return ""
    if c.id in ctx.replace:
        return ctx.replace[c.id]
    if c.running:
        return f"{c.name} unhealthy"
    code = f", exit code {c.exit_code}" if c.exit_code is not None else ""
    return f"{c.name} {c.state.value}{code}"


def _in_place_reason(c: ObservedContainer, ctx: PlanContext) -> str:
    """What a start in place heals: `exited with code 137 (killed)`, ..."""
    if c.id in ctx.engine_stopped:
        return "stopped while the engine was away"
    if c.state is ContainerState.PAUSED:
        return "it was paused"
    if c.running:
        return "unhealthy past its grace"
    if c.state is ContainerState.CREATED:
        return "created but never started"
    words = exit_words(c.exit_code, c.oom_killed)
    if c.id in ctx.stopped_outside:
        return f"stopped from outside ({words})"
    return words


def _done(
    actions: list[Action],
    spec: ServiceSpec,
    mine: list[ObservedContainer],
    cur: list[ObservedContainer],
    stale: list[ObservedContainer],
    held: list[ObservedContainer],
    now: float,
    waiting: int = 0,
    *,
    done: list[ObservedContainer] | None = None,
) -> Plan:
    removed = {a.container.id for a in actions if a.kind is ActionKind.REMOVE and a.container}
    stale_left = [c for c in stale if c.id not in removed]
    finished_left = [c for c in done or [] if c.id not in removed]
    settled = len(cur) + len(finished_left) == spec.replicas
    converged = not actions and not held and not waiting and not stale_left and settled
    return Plan(
        actions=tuple(actions),
        converged=converged and len(mine) == spec.replicas,
        held=len(held),
        stale=len(stale_left),
        available=sum(1 for c in cur + stale if readiness.available(c, spec, now)),
        alive=len(cur) + len(stale),
        up_to_date=len(cur),
        waiting=waiting,
        finished=len(finished_left),
    )


def _plan_undeclared(service: str, mine: list[ObservedContainer], ctx: PlanContext) -> Plan:
    if not mine:
        return Plan(actions=(), converged=True)
    if ctx.hold_orphans:
        return Plan(
            actions=(),
            converged=False,
            alive=sum(1 for c in mine if c.running),
            note="not declared, but a config file is broken: containers left as they are",
        )
    removes = tuple(
        Action(ActionKind.REMOVE, service, "service no longer declared", container=c)
        for c in _oldest_first(mine)
    )
    return Plan(actions=removes, converged=False)


__all__ = [
    "IN_PLACE",
    "Plan",
    "PlanContext",
    "Replacement",
    "history",
    "min_available",
    "plan",
    "replacement_verdict",
]
