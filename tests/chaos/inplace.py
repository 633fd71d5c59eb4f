"""Heal in place (issue 28), as the soak checks it.

healerd starts a failed container of the current spec again as itself (docs/user-guide.md,
"Heal in place"): after `docker kill`, `docker stop`, a crash of its process and a `docker pause`
(stopped, then started) the victim runs again with the same id and a newer
`State.StartedAt`, and nothing is created for it. Only what a start cannot serve is
replaced: a container removed (`docker rm -f`), or one still unhealthy after a restart
in place (the soak's sick file is in the writable layer, which a restart keeps, so an
unhealthy victim is restarted in place once, then replaced: one create).

The crash streak of a container restarted in place is no longer in its labels (fixed at
create) but in healerd's `state_dir/runs.json` (healerd.core.runs): the soak reads it
there when the file has an entry for the container, else from the label.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from healerd.core.runs import Run, from_json
from healerd.model import LABEL_CRASH_STREAK
from tests.chaos.observe import Heal

# Healed by a start of the same container: no create.
IN_PLACE_KINDS = frozenset({"docker-kill", "docker-stop", "process-kill", "docker-pause"})
# Creates one disruption of each kind may cost (before the allowances of a rollout or a
# fixed host port): a removed container is replaced; an unhealthy one is restarted in
# place, then replaced when it turns unhealthy again.
CREATES_PER_KIND: Mapping[str, int] = {
    **{k: 0 for k in IN_PLACE_KINDS},
    "docker-rm": 1,
    "unhealthy": 1,
}


def started_ts(value: str | None) -> float:
    """`State.StartedAt` (RFC 3339, nanoseconds) as a Unix time; 0 for none."""
    if not value or value.startswith("0001-"):
        return 0.0
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return 0.0


def started_again(before: str, after: str | None) -> bool:
    """Whether a container's StartedAt moved on: it was started again since."""
    return started_ts(after) > started_ts(before)


def read_runs(path: Path) -> dict[str, Run]:
    """healerd's run book (healerd.daemon.runbook); {} while it has none (or it cannot
    be read: healerd writes it whole, by rename, so a reader never sees half of it)."""
    try:
        return from_json(json.loads(path.read_bytes()))
    except (OSError, ValueError):
        return {}


def streak(c: Mapping[str, Any], runs: Mapping[str, Run]) -> int:
    """A container's crash streak: its run's when healerd restarted it in place, else the
    one it was created with (its label)."""
    run = runs.get(str(c["Id"]))
    if run is not None:
        return run.streak
    try:
        return int((c.get("Labels") or {}).get(LABEL_CRASH_STREAK, "0"))
    except ValueError:
        return 0


@dataclass(frozen=True)
class Seen:
    """A victim as the engine shows it after quiet (None fields: it is gone)."""

    running: bool = False
    started_at: str | None = None
    status: str = ""  # State.Status: exited, paused, ...


def not_in_place(
    heals: Iterable[Heal],
    seen: Mapping[str, Seen],
    replaced_by: Mapping[str, str],
    unexplained: Mapping[str, list[str]],
) -> list[str]:
    """Invariant 6: what went wrong with each in-place heal (an empty list: none).

    `heals`: the burst's in-place heals that nothing else explains (not confounded);
    `seen`: each victim as inspected now (missing: gone); `replaced_by`: victim id ->
    the container created with `io.healerd.replaces` naming it; `unexplained`: service ->
    the containers created for it in the burst although its only disruptions were
    in-place ones (a create without the label is still one too many)."""
    problems = []
    blamed: set[str] = set()
    for h in heals:
        what = f"{h.kind} victim {h.name or h.victim[:12]} ({h.victim[:12]}) of {h.service}"
        s = seen.get(h.victim)
        if s is None:
            problems.append(f"{what} is gone: not restarted in place")
        elif not s.running:
            problems.append(f"{what} is not running ({s.status})")
        elif not started_again(h.started_at, s.started_at):
            problems.append(
                f"{what} runs but was not started again (StartedAt {h.started_at} -> "
                f"{s.started_at})"
            )
        new = replaced_by.get(h.victim)
        if new is not None:
            problems.append(f"{what} was replaced by a new container {new[:12]}")
        if h.service in unexplained and h.service not in blamed:
            blamed.add(h.service)
            ids = ", ".join(cid[:12] for cid in unexplained[h.service])
            problems.append(
                f"{h.service}: {len(unexplained[h.service])} container(s) created ({ids}) "
                "where only in-place heals were due"
            )
    return problems


__all__ = [
    "CREATES_PER_KIND",
    "IN_PLACE_KINDS",
    "Seen",
    "not_in_place",
    "read_runs",
    "started_again",
    "started_ts",
    "streak",
]
