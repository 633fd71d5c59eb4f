"""Compose's `down` for the project resources healerd made, level-triggered: the networks
no declared service names go once nothing uses them; named volumes only on request
(`healerctl prune volumes`). Pure choices here; the executor does the engine calls."""

from __future__ import annotations

from healerd.config import DesiredState
from healerd.core.events import EventLog
from healerd.core.executor import Executor
from healerd.vocabulary import EventKind


class PruneRefused(Exception):
    """A prune that cannot be done safely now."""


def prune_volumes(
    desired: DesiredState, executor: Executor, events: EventLog, dry_run: bool
) -> list[str]:
    """The named volumes healerd made that no declared service names and no container
    uses. Refused while a file is broken (its last good services may not be known)."""
    if desired.hold_orphans:
        raise PruneRefused(
            "a config file is broken: its services' volumes cannot be told apart; fix "
            "it first (healerctl validate)"
        )
    keep = frozenset(v.name for s in desired.services.values() for v in s.volumes_to_create)
    names = executor.prune_volumes(keep, dry_run)
    if not dry_run:
        for name in names:
            events.record(EventKind.VOLUME_PRUNED, "", f"removed volume {name}")
    return names


def networks_kept(desired: DesiredState) -> frozenset[str]:
    """The project networks the declared services name: every other one healerd made
    goes, once no container uses it (a network still in use is tried again later)."""
    return frozenset(n.name for s in desired.services.values() for n in s.networks_to_create)


__all__ = ["PruneRefused", "networks_kept", "prune_volumes"]
