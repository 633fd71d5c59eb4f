"""Between the planner and the host's admission: who claims room, and how much of a
plan's creates may start now (plan again with what is granted)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import replace

from healerd.core.admission import Admission, Claim
from healerd.core.executor import HOLDING_STATES
from healerd.core.lifecycle import ServiceState
from healerd.core.planner import Plan, PlanContext, plan
from healerd.model import ActionKind, ObservedContainer, ServiceSpec


def need(spec: ServiceSpec, admission: Admission) -> int:
    """Memory one container of `spec` is assumed to take."""
    return spec.mem_limit or admission.limits.container_memory


def ahead_may_claim(
    spec: ServiceSpec, services: Mapping[str, ServiceSpec], admission: Admission
) -> bool:
    """Whether services of a higher priority could claim room that `spec`'s creates
    would take: all their replicas and all of `spec`'s need more than the room left.
    Then `spec`'s pass must look at every service (claims come from the look), not at
    its own alone."""
    higher = [s for s in services.values() if s.priority > spec.priority]
    if not higher:
        return False
    wanted = sum(s.replicas * max(0, need(s, admission)) for s in [spec, *higher])
    return wanted > admission.room()


def claims(
    services: Mapping[str, ServiceSpec],
    observed: Sequence[ObservedContainer],
    states: Mapping[str, ServiceState],
    admission: Admission,
    no_image: Set[str] = frozenset(),
) -> dict[str, Claim]:
    """Services missing running containers, from the batch's one list call: the priority
    order needs every service's shortfall, not just the batch's keys. Under pressure
    only replacements can start: a claim covers the failed containers listed, not the
    extras that would wait anyway. A service whose state will not create now, or whose
    image cannot be had (`no_image`), claims nothing."""
    pressure = admission.pressure().any
    running: dict[str, int] = {}
    failed: dict[str, int] = {}
    for c in observed:
        counts = running if c.running else failed
        counts[c.service] = counts.get(c.service, 0) + 1
    out = {}
    for name, spec in services.items():
        missing = spec.replicas - running.get(name, 0)
        if pressure:
            missing = min(missing, failed.get(name, 0))
        state = states.get(name)
        if missing > 0 and name not in no_image and (state is None or state.claims_room):
            out[name] = Claim(spec.priority, missing, need(spec, admission))
    return out


def admit(
    admission: Admission,
    key: str,
    spec: ServiceSpec,
    mine: Sequence[ObservedContainer],
    ctx: PlanContext,
    p: Plan,
) -> tuple[Plan, str]:
    """Ask the host for room for the plan's creates and starts in place (a stopped
    container holds no memory: starting it takes what a new one would); plan again with
    what is granted. Returns the plan to apply and why some wait ("" if none)."""
    creates = [a for a in p.actions if a.kind in (ActionKind.CREATE, ActionKind.START)]
    # A running (unhealthy) or paused container is stopped before it (or its
    # replacement) starts: the swap frees what it takes, it needs no room.
    swaps = sum(
        1 for a in creates if a.container is not None and a.container.state in HOLDING_STATES
    )
    repl = sum(1 for a in creates if a.container is not None) - swaps
    extras = len(creates) - repl - swaps
    g = admission.grant(key, spec.priority, repl, extras, need(spec, admission))
    if g.replacements >= repl and g.extras >= extras:
        return p, ""
    limited = replace(
        ctx,
        max_replacements=g.replacements + swaps,
        max_extras=g.extras,
        rollout_allowed=False,
    )
    return plan(key, spec, mine, limited), g.reason


class HostRoom:
    """A pass's way to the host's admission: how much of a plan may start now."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission

    def pressured(self) -> bool:
        return self._admission.pressure().any

    def done(self, key: str) -> None:
        """The service claims no room any more (paused, gone, nothing to create)."""
        self._admission.done(key)

    def trim(
        self,
        key: str,
        spec: ServiceSpec | None,
        mine: Sequence[ObservedContainer],
        ctx: PlanContext,
        p: Plan,
    ) -> tuple[Plan, str]:
        """The plan the host has room for, and why some of it waits ("" if none)."""
        wait_reason = ""
        if spec is not None and (p.creates or p.starts):
            p, wait_reason = admit(self._admission, key, spec, mine, ctx, p)
        else:
            self._admission.done(key)
        pressure = self._admission.pressure()
        if not wait_reason and pressure.any and p.stale:
            wait_reason = f"the rolling update waits: {pressure.describe()}"
        return p, wait_reason


class NoRoomCheck:
    """No admission configured: every plan starts whole."""

    def pressured(self) -> bool:
        return False

    def done(self, key: str) -> None:
        pass

    def trim(
        self,
        key: str,
        spec: ServiceSpec | None,
        mine: Sequence[ObservedContainer],
        ctx: PlanContext,
        p: Plan,
    ) -> tuple[Plan, str]:
        return p, ""


RoomCheck = HostRoom | NoRoomCheck


def room_for(admission: Admission | None) -> RoomCheck:
    """The pass's room check: the host's admission, or none (the composition root's
    one choice, so that no pass asks whether there is an admission)."""
    return NoRoomCheck() if admission is None else HostRoom(admission)


__all__ = ["HostRoom", "NoRoomCheck", "RoomCheck", "admit", "claims", "need", "room_for"]
