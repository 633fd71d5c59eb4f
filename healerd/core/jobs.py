"""Run-once services: Compose's `restart: "no"` and `on-failure[:N]` (pure).

healerd stays the one healer (Docker's own restart policy is "no" while healerd runs,
and a clean stop hands only long-running services to it: core/handoff.py), so these
meanings live here: a container of such a service that exited is *finished*
(healerd.core.readiness.finished) - it holds
its replica slot, is never replaced, and says Completed (exit 0) or Failed - unless
on-failure wants it run again (a non-zero exit, fewer than N restarts so far). A finished
container of an older spec is run again with the new one, like a Kubernetes Job's pods
of a new template. No record beyond the engine's: a finished container that someone
removes is run again.
"""

from __future__ import annotations

from collections.abc import Sequence

from healerd.model import ObservedContainer, ServiceSpec
from healerd.vocabulary import RestartMode


def run_once(spec: ServiceSpec) -> bool:
    """Whether its containers may finish (restart "no" or on-failure)."""
    return spec.restart is not None and spec.restart.run_once


def restart_limit(spec: ServiceSpec) -> int | None:
    """on-failure:N's N (None: no limit, or not on-failure)."""
    r = spec.restart
    return r.max_retries if r is not None and r.mode is RestartMode.ON_FAILURE else None


def verdict(spec: ServiceSpec, done: Sequence[ObservedContainer]) -> tuple[bool, str]:
    """(succeeded, why) for a service all of whose replicas finished."""
    bad = sorted((c for c in done if c.exit_code != 0), key=lambda c: c.name)
    if not bad:
        n = len(done)
        return True, f"{n} run(s) exited with code 0" if n != 1 else "exited with code 0"
    c = bad[0]
    limit = restart_limit(spec)
    gave_up = f" after {c.restarts} restart(s) (on-failure:{limit})" if limit is not None else ""
    more = f"; {len(bad) - 1} more failed" if len(bad) > 1 else ""
    return False, f"{c.name} exited with code {c.exit_code}{gave_up}{more}"


__all__ = ["restart_limit", "run_once", "verdict"]
