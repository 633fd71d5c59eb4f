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
    scaled to 0, or with `required: false`, is no reason to wait."""
    for dep in spec.depends_on:
        other = services.get(dep.service)
        if not dep.required or other is None or other.replicas == 0:
            # required: false never holds a service back (Compose only warns); an
            # undeclared required one was refused with the file.
            continue
        live = [c for c in containers if c.service == dep.service and c.running]
        if dep.condition == "service_healthy":
            if live and all(c.health is None for c in live):
                return f"waiting for {dep.service} to be healthy: it has no healthcheck"
            if not any(c.health is Health.HEALTHY for c in live):
                return f"waiting for {dep.service} to be healthy (depends_on)"
        elif not live:
            return f"waiting for {dep.service} to be running (depends_on)"
    return ""
