"""Between the planner and the host's admission: who claims room, and the room offered
to a pass before its one plan (what the plan takes is reserved)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set

from healerd.core.admission import Admission, Claim, Use
from healerd.core.executor import HOLDING_STATES
from healerd.core.lifecycle import ServiceState
from healerd.core.planner import Plan
from healerd.core.plantypes import UNLIMITED, Offer
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


def used(p: Plan) -> Use:
    """What a plan takes of the host's room: its creates and starts in place (a stopped
    container holds no memory: starting it takes what a new one would), except those
    that stop a running (unhealthy) or paused container first (the swap frees what it
    takes); and how many wait."""
    taking = [
        a
        for a in p.actions
        if a.kind in (ActionKind.CREATE, ActionKind.START)
        and (a.container is None or a.container.state not in HOLDING_STATES)
    ]
    repl = sum(1 for a in taking if a.container is not None)
    return Use(repl, len(taking) - repl, p.waiting)


class HostRoom:
    """A pass's way to the host's admission: the room offered to its one plan."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission

    def pressured(self) -> bool:
        return self._admission.pressure().any

    def done(self, key: str) -> None:
        """The service claims no room any more (paused, gone, nothing to create)."""
        self._admission.done(key)

    def release(self, key: str, p: Plan) -> None:
        """The plan's creates will not happen: the room it reserved goes back. A plan
        that reserved none (all of it waits) gives back nothing: the reservation of the
        service's last pass is for containers being made."""
        use = used(p)
        if use.replacements or use.extras:
            self._admission.release(key)
        self._admission.done(key)

    def fit(
        self, key: str, spec: ServiceSpec | None, make: Callable[[Offer], Plan]
    ) -> tuple[Plan, str]:
        """The pass's plan, made within the room the host offers (`spec` None: the
        service asks for none), and why some of it waits ("" if none)."""
        if spec is None:
            p, wait_reason = make(UNLIMITED), ""
        else:
            need_ = need(spec, self._admission)
            p, wait_reason = self._admission.fit(key, spec.priority, need_, make, used)
        if spec is None or not (p.creates or p.starts or p.waiting):
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

    def release(self, key: str, p: Plan) -> None:
        pass

    def fit(
        self, key: str, spec: ServiceSpec | None, make: Callable[[Offer], Plan]
    ) -> tuple[Plan, str]:
        return make(UNLIMITED), ""


RoomCheck = HostRoom | NoRoomCheck


def room_for(admission: Admission | None) -> RoomCheck:
    """The pass's room check: the host's admission, or none (the composition root's
    one choice, so that no pass asks whether there is an admission)."""
    return NoRoomCheck() if admission is None else HostRoom(admission)


__all__ = [
    "HostRoom",
    "NoRoomCheck",
    "RoomCheck",
    "claims",
    "need",
    "room_for",
    "used",
]
