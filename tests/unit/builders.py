"""Small builders for specs and observed containers, shared by the unit tests."""

from __future__ import annotations

import itertools

from healerd.model import ContainerState, ObservedContainer, ServiceSpec

_ids = itertools.count(1)


def spec(name: str = "web", replicas: int = 1, image: str = "img:1", **kw: object) -> ServiceSpec:
    return ServiceSpec(name=name, image=image, replicas=replicas, **kw)  # type: ignore[arg-type]


def container(
    s: ServiceSpec,
    state: ContainerState = ContainerState.RUNNING,
    *,
    created: float | None = None,
    spec_hash: str | None = None,
) -> ObservedContainer:
    n = next(_ids)
    return ObservedContainer(
        id=f"c{n:06d}",
        name=f"{s.name}-x-{n}",
        service=s.name,
        spec_hash=spec_hash if spec_hash is not None else s.spec_hash,
        state=state,
        created=float(n) if created is None else created,
    )
