"""What "ready" means, three ways, side by side (pure).

- `available`: a replica serves. Rollouts wait for it, the status counts it, and
  scale-down removes the others first; it waits out `min_ready_seconds`.
- `dependency_unmet`: a service's depends_on condition on another service holds (its
  containers run, are healthy, or completed). No `min_ready_seconds`: Compose's
  conditions are the engine's states, read from the same one list.
- `finished`: a run-once replica exited for good (healerd.core.jobs): it holds its slot,
  is not replaced, and is what `service_completed_successfully` waits for.

Convergence, which counts these, is one rule too: healerd.core.status.converged_counts.
"""

from __future__ import annotations

from collections.abc import Sequence

from healerd.model import ContainerState, Dependency, Health, ObservedContainer, ServiceSpec
from healerd.vocabulary import Condition, RestartMode


def available(c: ObservedContainer, spec: ServiceSpec, now: float) -> bool:
    """Serving: running, not `starting` or `unhealthy`, and - for the current spec - up
    for min_ready_seconds. An old-spec container has proven itself already; it is never
    the one that has to wait before the rollout may count it."""
    if not c.running or c.health in (Health.STARTING, Health.UNHEALTHY):
        return False
    if c.spec_hash != spec.spec_hash:
        return True
    return now >= min_ready_at(c, spec)


def min_ready_at(c: ObservedContainer, spec: ServiceSpec) -> float:
    """When a container of the current spec has run min_ready_seconds. The engine's
    list gives creation times in whole seconds: such a time is taken as the end of its
    second, so that a container up for 0.2 s never counts as up for 1.2 s."""
    started = c.run_started
    started = started + 1.0 if started == int(started) else started
    return started + spec.update_config.min_ready_seconds


def finished(c: ObservedContainer, spec: ServiceSpec) -> bool:
    """Exited for good: restart "no", or on-failure with exit 0 or no restart left."""
    r = spec.restart
    if r is None or not r.run_once or c.state is not ContainerState.EXITED:
        return False
    if c.spec_hash != spec.spec_hash:
        return False
    if r.mode is RestartMode.NO or c.exit_code == 0:
        return True
    return r.max_retries is not None and c.restarts >= r.max_retries


def dependency_unmet(
    dep: Dependency, spec: ServiceSpec, containers: Sequence[ObservedContainer]
) -> str:
    """Why `dep` does not hold yet ("" when it does). `spec` is the service it names,
    `containers` that service's, without those kept as history."""
    if dep.condition is Condition.COMPLETED_SUCCESSFULLY:
        return _completed(dep.service, spec, containers)
    live = [c for c in containers if c.running]
    if dep.condition is Condition.HEALTHY:
        if live and all(c.health is None for c in live):
            return f"waiting for {dep.service} to be healthy: it has no healthcheck"
        if not any(c.health is Health.HEALTHY for c in live):
            return f"waiting for {dep.service} to be healthy (depends_on)"
    elif not live:
        return f"waiting for {dep.service} to be running (depends_on)"
    return ""


def _completed(name: str, spec: ServiceSpec, containers: Sequence[ObservedContainer]) -> str:
    """Every replica of its current spec exited with code 0. One that failed for good
    blocks its dependents until its spec changes (or its container is removed: it runs
    again)."""
    done = [c for c in containers if finished(c, spec)]
    bad = next((c for c in done if c.exit_code != 0), None)
    if bad is not None:
        return (
            f"blocked: {name} failed ({bad.name} exited with code {bad.exit_code}); "
            "depends_on needs it to complete successfully"
        )
    if len(done) < spec.replicas:
        return f"waiting for {name} to complete successfully (depends_on)"
    return ""


__all__ = ["available", "dependency_unmet", "finished", "min_ready_at"]
