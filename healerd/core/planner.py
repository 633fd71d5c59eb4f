"""The pure planner: desired spec + observed containers -> actions. No I/O here.

One call plans one service from one observation. The loop applies the actions and
observes again, so a plan only has to move towards the desired state, not reach it
in one step (a rolling replacement takes several passes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from healerd.model import Action, ActionKind, ObservedContainer, ServiceSpec


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    converged: bool
    # Replacements for containers that stopped running; the loop uses this for crash backoff.
    heals: int = 0
    # Replacements held back because the service is in crash backoff.
    heals_held: int = 0
    note: str = ""

    @property
    def creates(self) -> int:
        return sum(1 for a in self.actions if a.kind is ActionKind.CREATE)

    @property
    def removes(self) -> int:
        return sum(1 for a in self.actions if a.kind is ActionKind.REMOVE)


def _newest_first(containers: Sequence[ObservedContainer]) -> list[ObservedContainer]:
    return sorted(containers, key=lambda c: (c.created, c.id), reverse=True)


def _oldest_first(containers: Sequence[ObservedContainer]) -> list[ObservedContainer]:
    return sorted(containers, key=lambda c: (c.created, c.id))


def plan(
    service: str,
    spec: ServiceSpec | None,
    containers: Sequence[ObservedContainer],
    *,
    allow_heal: bool = True,
    hold_orphans: bool = False,
) -> Plan:
    """Plan one pass for `service`.

    `spec` None means the service is no longer declared: its containers go, unless
    `hold_orphans` says a broken config file might still declare it.
    `allow_heal` False holds back replacements of containers that stopped running
    (crash backoff); containers removed with `docker rm -f` leave no trace and are
    replaced regardless, like a scale-up.
    """
    mine = [c for c in containers if c.service == service]
    if spec is None:
        if not mine:
            return Plan(actions=(), converged=True)
        if hold_orphans:
            return Plan(
                actions=(),
                converged=False,
                note="not declared, but a config file is broken: containers left as they are",
            )
        removes = tuple(
            Action(ActionKind.REMOVE, service, "service no longer declared", container=c)
            for c in _oldest_first(mine)
        )
        return Plan(actions=removes, converged=False)

    desired = spec.replicas
    current_hash = spec.spec_hash
    stopped = [c for c in mine if not c.running]
    current = [c for c in mine if c.running and c.spec_hash == current_hash]
    stale = [c for c in mine if c.running and c.spec_hash != current_hash]

    actions: list[Action] = []

    def remove(c: ObservedContainer, reason: str) -> None:
        actions.append(Action(ActionKind.REMOVE, service, reason, container=c))

    def create(n: int, reason: str) -> None:
        actions.extend(Action(ActionKind.CREATE, service, reason, spec=spec) for _ in range(n))

    heals = heals_held = 0
    if len(current) >= desired:
        for c in _newest_first(current)[: len(current) - desired]:
            remove(c, f"scale down to {desired}")
        for c in _oldest_first(stale):
            remove(c, "spec changed and enough current replicas run")
        for c in _oldest_first(stopped):
            remove(c, f"not running ({c.state.value}) and not needed")
    else:
        serving = len(current) + len(stale)
        missing = desired - serving
        if missing < 0:
            # Too many serving: a rollout step whose new container is up; drop old ones.
            for c in _oldest_first(stale)[:-missing]:
                remove(c, "replaced by a container with the current spec")
            missing = 0
        elif missing == 0 and stale:
            # Rolling replacement, one at a time. A fixed host port cannot be held
            # by two containers, so that case goes stop-first, otherwise start-first.
            if spec.has_fixed_host_port:
                remove(_oldest_first(stale)[0], "spec changed (stop-first: fixed host port)")
            else:
                create(1, "spec changed: start a replacement first")
        heals = min(missing, len(stopped))
        fresh = missing - heals
        if not allow_heal:
            heals_held, heals = heals, 0
        create(fresh, f"{serving} of {desired} running")
        if heals:
            create(heals, "replace containers that stopped running")
        # Stopped containers are kept while their replacement is held back, so that
        # an operator can still read their logs; otherwise they go.
        if not heals_held:
            for c in _oldest_first(stopped):
                remove(c, f"not running ({c.state.value})")

    converged = not actions and not heals_held
    return Plan(actions=tuple(actions), converged=converged, heals=heals, heals_held=heals_held)
