"""The planning step of a pass: the planner's context made once from what the loop
remembers, judged (a followed tag's new digest that failed goes back) before the one
plan is made from it, within the room the host offers and held back while a
dependency is not ready (both known before the plan: a pass plans once)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from healerd.config import DesiredState
from healerd.core.context import Recall
from healerd.core.dependencies import unmet
from healerd.core.planner import Plan, PlanContext, plan
from healerd.core.plantypes import UNLIMITED, Offer
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

    def plan(
        self,
        key: str,
        spec: ServiceSpec | None,
        mine: Sequence[ObservedContainer],
        offer: Offer = UNLIMITED,
        hold: str = "",
    ) -> Plan:
        """The pass's one plan, within the room offered and held for a dependency."""
        ctx = replace(self.ctx, room=offer.fits, extras_allowed=offer.extras, hold=hold)
        return plan(key, spec, mine, ctx)

    def planned(self, p: Plan) -> Planned:
        return Planned(p, self.ctx, self.wake_at, self.backoff_note)


def hold_for(
    spec: ServiceSpec | None, desired: DesiredState, obs: Sequence[ObservedContainer]
) -> str:
    """Why the service's creates, starts and rollout wait for a dependency ("" when they
    need not), known before its plan (PlanContext.hold)."""
    if spec is None or not spec.depends_on:
        return ""
    return unmet(spec, obs, desired.services)


def with_rollout(recall: Recall, r: Rollout | None, offset: float) -> Recall:
    """The service's rollout times as wall-clock ones (`offset` = wall - mono)."""
    if r is None:
        return recall
    return replace(recall, rollout=(r.last_progress + offset, r.last_batch + offset))


__all__ = ["Planned", "Prepared", "hold_for", "with_rollout"]
