"""History containers: stopped containers another container of the service replaced,
kept for their logs and exit codes, and how far each is down its line. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from healerd.model import ObservedContainer


def history(mine: Sequence[ObservedContainer]) -> list[ObservedContainer]:
    """Stopped containers that another container of the service replaced: kept for their
    logs and exit codes, never counted, never replaced again."""
    replaced = {c.replaces for c in mine if c.replaces}
    return [c for c in mine if c.id in replaced and not c.running]


def depths(old: Sequence[ObservedContainer]) -> dict[str, int]:
    """How far each history container is from the oldest of its line."""
    parent = {c.id: c.replaces for c in old}
    depth: dict[str, int] = {}
    for c in old:
        n, cid, seen = 0, c.replaces, {c.id}
        while cid in parent and cid not in seen:
            seen.add(cid)
            n, cid = n + 1, parent[cid]
        depth[c.id] = n
    return depth


__all__ = ["depths", "history"]
