"""The planner's rolling-update part: the availability floor a rollout keeps, one batch
of it (stop-first or start-first), and which old containers go first. Pure."""

from __future__ import annotations

from collections.abc import Callable

from healerd.core import readiness
from healerd.model import ObservedContainer, ServiceSpec, UpdateOrder


def min_available(spec: ServiceSpec, order: UpdateOrder | None = None) -> int:
    """The floor a rollout keeps: all replicas start-first, `parallelism` fewer stop-first."""
    if (order or spec.update_order) is UpdateOrder.STOP_FIRST:
        return max(0, spec.replicas - spec.update_config.parallelism)
    return spec.replicas


def at_most(n: int, limit: int | None) -> int:
    return n if limit is None else max(0, min(n, limit))


def rollout_step(
    spec: ServiceSpec,
    cur: list[ObservedContainer],
    stale: list[ObservedContainer],
    held_cur: list[ObservedContainer],
    made: int,
    now: float,
    remove: Callable[[ObservedContainer, str], None],
    create: Callable[[str], None],
    room: int | None,
    order: UpdateOrder,
    recreate: Callable[[ObservedContainer], None],
) -> bool:
    """One batch of a rolling update, never going below `min_available`; a start-first
    batch makes at most `room` surge containers (None: no limit)."""
    desired, parallelism = spec.replicas, spec.update_config.parallelism
    # One batch at a time: the previous one must be available first.
    if any(not readiness.available(c, spec, now) for c in cur) or held_cur or made:
        return False
    available = sum(1 for c in cur + stale if readiness.available(c, spec, now))
    floor = min_available(spec, order)
    if order is UpdateOrder.STOP_FIRST:
        removable = min(parallelism, len(stale), max(0, available - floor))
        for c in stale_victims(stale, spec, now)[:removable]:
            if c.anon_volumes:
                recreate(c)
            else:
                remove(c, "spec changed: stop-first replacement")
        # The replacements are created on the next pass, once the ports are free.
        return removable > 0
    surge_room = desired + parallelism - len(cur) - len(stale)
    n = at_most(max(0, min(surge_room, desired - len(cur))), room)
    for _ in range(n):
        create("spec changed: start a replacement first")
    return n > 0


def drop_stale(
    spec: ServiceSpec,
    cur: list[ObservedContainer],
    stale: list[ObservedContainer],
    count: int,
    now: float,
    remove: Callable[[ObservedContainer, str], None],
    order: UpdateOrder | None = None,
) -> None:
    """Remove up to `count` old containers, those that serve nothing first, but never
    below the availability floor (a new container still starting does not count)."""
    if not stale or count <= 0:
        return
    available = sum(1 for c in cur + stale if readiness.available(c, spec, now))
    floor = min(min_available(spec, order), available)
    for c in stale_victims(stale, spec, now)[:count]:
        if readiness.available(c, spec, now):
            if available - 1 < floor:
                break
            available -= 1
        remove(c, "replaced by a container with the current spec")


def stale_victims(
    stale: list[ObservedContainer], spec: ServiceSpec, now: float
) -> list[ObservedContainer]:
    """Old containers that serve nothing go first, then the oldest."""
    return sorted(stale, key=lambda c: (readiness.available(c, spec, now), c.created, c.id))


__all__ = ["at_most", "drop_stale", "min_available", "rollout_step", "stale_victims"]
