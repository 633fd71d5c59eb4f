"""What an operator asks about one service after something went wrong: the output of a
replica, or of the last one that failed (`healerctl logs [--previous]`), and how its
replicas died (`healerctl describe`). Failed containers that were replaced stay on the
engine, stopped, as history (healerd.core.planner.history) for exactly this."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from healerd.core.planner import history
from healerd.engine import Death, Engine
from healerd.model import ObservedContainer


@dataclass(frozen=True)
class Dead:
    """A failed container kept as history, and how it ended."""

    container: ObservedContainer
    death: Death


def pick(
    observed: Sequence[ObservedContainer], service: str, *, previous: bool
) -> ObservedContainer | None:
    """The replica whose output `logs` shows: the newest running one; with `previous`,
    the newest failed one kept (or any stopped one, if none was replaced yet)."""
    mine = [c for c in observed if c.service == service]
    if previous:
        old = history(mine) or [c for c in mine if not c.running]
        return max(old, key=lambda c: (c.created, c.id), default=None)
    running = [c for c in mine if c.running]
    return max(running or mine, key=lambda c: (c.created, c.id), default=None)


def deaths(
    engine: Engine,
    observed: Sequence[ObservedContainer],
    service: str,
    limit: int | None = None,
) -> list[Dead]:
    """The service's history, newest first (the `limit` newest), each with one inspect
    of how it ended: what a describe costs the engine is bounded, whatever the replicas
    and history_limit."""
    old = sorted(
        history([c for c in observed if c.service == service]),
        key=lambda c: (-c.created, c.id),
    )
    return [Dead(c, engine.death(c.id)) for c in old[:limit]]


__all__ = ["Dead", "deaths", "pick"]
