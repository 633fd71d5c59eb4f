"""The planning step of a pass: the planner's context made once from what the loop
remembers, judged (a followed tag's new digest that failed goes back) before the one
plan is made from it, and the plan held back while a dependency is not ready."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from healerd.config import DesiredState
from healerd.core.context import Recall
from healerd.core.dependencies import unmet
from healerd.core.planner import Plan, PlanContext, plan
from healerd.core.rollouts import Rollout
from healerd.model import ObservedContainer, ServiceSpec


@dataclass(frozen=True)
class Planned:
    plan: Plan
    ctx: PlanContext
    wake_at: float | None
    backoff_note: str


@dataclass(frozen=True)
class Prepared:
    """The planner's context of a pass, before its plan: what the rollback is judged on."""

    ctx: PlanContext
    wake_at: float | None = None
    backoff_note: str = ""
    forgiven: frozenset[str] = frozenset()

    def planned(
        self, key: str, spec: ServiceSpec | None, mine: Sequence[ObservedContainer]
    ) -> Planned:
        """The pass's plan (the planner runs here, once)."""
        return Planned(plan(key, spec, mine, self.ctx), self.ctx, self.wake_at, self.backoff_note)


def ordered(
    key: str,
    spec: ServiceSpec | None,
    containers: Sequence[ObservedContainer],
    desired: DesiredState,
    mine: Sequence[ObservedContainer],
    planned: Planned,
) -> tuple[Planned, str]:
    """No create, start or rollout step while a dependency is not ready: the plan
    without them, and why ("" when nothing waits)."""
    if spec is None or not spec.depends_on or not planned.plan.actions:
        return planned, ""
    reason = unmet(spec, containers, desired.services)
    if not reason:
        return planned, ""
    held = replace(planned.ctx, max_replacements=0, max_extras=0, rollout_allowed=False)
    return replace(planned, plan=plan(key, spec, mine, held), ctx=held), reason


def with_rollout(recall: Recall, r: Rollout | None, offset: float) -> Recall:
    """The service's rollout times as wall-clock ones (`offset` = wall - mono)."""
    if r is None:
        return recall
    return replace(recall, rollout=(r.last_progress + offset, r.last_batch + offset))


__all__ = ["Planned", "Prepared", "ordered", "with_rollout"]
