"""depends_on at run time: whether a service's dependencies are ready, from the same one
list call the pass observes (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from healerd.model import Health, ObservedContainer, ServiceSpec


def unmet(
    spec: ServiceSpec,
    containers: Sequence[ObservedContainer],
    services: Mapping[str, ServiceSpec],
) -> str:
    """Why `spec`'s containers may not be created yet ("" when they may): a dependency
    with no running container (service_started) or none healthy (service_healthy). One
    scaled to 0 or undeclared with `required: false` is no reason to wait."""
    for dep in spec.depends_on:
        other = services.get(dep.service)
        if other is None or other.replicas == 0:
            if other is None and dep.required:
                return f"waiting for {dep.service}: not declared"
            continue
        live = [c for c in containers if c.service == dep.service and c.running]
        if dep.condition == "service_healthy":
            if not any(c.health is Health.HEALTHY for c in live):
                return f"waiting for {dep.service} to be healthy (depends_on)"
        elif not live:
            return f"waiting for {dep.service} to be running (depends_on)"
    return ""
