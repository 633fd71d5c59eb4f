"""Built services in an export (issue 34): where their image comes from elsewhere.

A Compose file keeps the build section, so `docker compose` on another host builds the
same image. A Swarm stack or Kubernetes manifests run on nodes that pull: a service that
names no `image:` is tagged `<project>-<service>` here, which no registry serves, so its
export is refused with what to write; one that names its image exports with it (push it
there first).
"""

from __future__ import annotations

from typing import Any

from healerd.config.project import built_image_name
from healerd.model import ServiceSpec


def unpushed(specs: list[ServiceSpec]) -> list[str]:
    """One error per built service that names no image a node could pull."""
    return [
        f"{s.name}: built here and tagged {s.image!r}, which no registry serves: name where "
        f"it is pushed (image: registry.example.net/{s.name}:1), push it, and export again"
        for s in specs
        if s.build is not None and s.image == built_image_name(s.project, s.name)
    ]


def build_section(spec: ServiceSpec) -> dict[str, Any] | None:
    """The Compose build section of a built service (None: not built)."""
    b = spec.build
    if b is None:
        return None
    out: dict[str, Any] = {"context": b.context}
    if b.dockerfile_inline is not None:
        out["dockerfile_inline"] = b.dockerfile_inline
    elif b.dockerfile != "Dockerfile":
        out["dockerfile"] = b.dockerfile
    for key, pairs in (("args", b.args), ("labels", b.labels)):
        if pairs:
            out[key] = dict(pairs)
    for key, value in (("target", b.target), ("network", b.network), ("shm_size", b.shm_size)):
        if value is not None:
            out[key] = value
    if b.cache_from:
        out["cache_from"] = list(b.cache_from)
    if b.extra_hosts:
        out["extra_hosts"] = list(b.extra_hosts)
    return out
