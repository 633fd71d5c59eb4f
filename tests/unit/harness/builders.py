"""Small builders for specs and observed containers, shared by the unit tests."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from healerd.core.planner import history
from healerd.core.signing import HostKey
from healerd.model import (
    LABEL_SERVICE,
    LABEL_SIGNATURE,
    LABEL_SPEC_HASH,
    Action,
    ActionKind,
    ContainerState,
    ObservedContainer,
    ServiceSpec,
)

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


def apply_plan(
    containers: dict[str, ObservedContainer],
    actions: Sequence[Action],
    make: Callable[[Action], ObservedContainer | None],
) -> None:
    """Apply a plan's actions as healerd.core.executor.Executor does, to an in-memory
    engine: stops and removes, then creates and starts, then the removes of a rollout's
    replaced containers. `make(action)` makes a create's container (None: the create failed). A
    replacement names what it replaced (history) and takes over its anonymous volumes; a
    rollout's replaced container is removed only if its replacement was made."""
    retiring = {a.container.id for a in actions if a.retire and a.container is not None}

    def later(a: Action) -> bool:
        return a.container is not None and a.container.id in retiring

    failed: set[str] = set()
    for a in actions:
        if a.container is not None and a.kind is ActionKind.STOP:
            _set(containers, a.container.id, state=ContainerState.EXITED, exit_code=0)
        elif a.container is not None and a.kind is ActionKind.REMOVE and not later(a):
            containers.pop(a.container.id, None)
    for a in actions:
        if a.kind is ActionKind.START and a.container is not None:
            _set(containers, a.container.id, state=ContainerState.RUNNING, exit_code=None)
        elif a.kind is ActionKind.CREATE:
            c = make(a)
            if c is None:
                if a.container is not None:
                    failed.add(a.container.id)
                continue
            if a.container is not None:
                c = dataclasses.replace(
                    c, replaces=a.container.id, anon_volumes=a.container.anon_volumes
                )
            containers[c.id] = c
    for a in actions:
        c = a.container
        if c is not None and a.kind is ActionKind.REMOVE and later(a) and c.id not in failed:
            containers.pop(c.id, None)


def live(containers: Iterable[ObservedContainer]) -> list[ObservedContainer]:
    """The service's containers without its history (replaced failed ones kept)."""
    cs = list(containers)
    old = {c.id for c in history(cs)}
    return [c for c in cs if c.id not in old]


def _set(containers: dict[str, ObservedContainer], cid: str, **changes: Any) -> None:
    if cid in containers:
        containers[cid] = dataclasses.replace(containers[cid], **changes)


KEY = HostKey(b"k" * 32, born=1_700_000_500.0)


def signed(c: ObservedContainer, key: HostKey = KEY, **labels: str) -> ObservedContainer:
    own = {LABEL_SERVICE: c.service, LABEL_SPEC_HASH: c.spec_hash, **labels}
    return dataclasses.replace(
        c, owner_labels=tuple(sorted({**own, LABEL_SIGNATURE: key.sign(c.name, own)}.items()))
    )


def row(cid: str, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "Id": cid * 64,
        "Names": [f"/web-{cid}"],
        "Labels": {LABEL_SERVICE: "web"},
        "State": "running",
        "Status": "Up 5 seconds (healthy)",
        "Image": "web:1",
        "Created": 100,
        "Mounts": [{"Type": "volume", "Name": "f" * 64, "Destination": "/data"}],
    }
    return {**base, **over}
