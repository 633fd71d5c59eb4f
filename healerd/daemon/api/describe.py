"""`GET /v1/services/NAME/describe` (and what `.../logs`, in api.logs, shares with it):
what an operator asks after a failure.

Values of the environment never appear (only variable names), nor do values that came
from a `${VAR}` (shown as `${VAR}`, healerd.config.masking); logs are the container's
own output, as `docker logs` would show it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from healerd.config.masking import mask_free, mask_tree, shown
from healerd.core.executor import plain_tag
from healerd.core.postmortem import Dead
from healerd.core.readlanes import PRIVILEGED, Reader
from healerd.core.status import ContainerStatus
from healerd.daemon.api.views import (
    ControllerLike,
    Subs,
    container_view,
    event_view,
    service_view,
    termination_view,
)
from healerd.engine import EngineError
from healerd.model import ServiceSpec, VolumeSpec
from healerd.vocabulary import VolumeKind

# How many of the service's events describe shows.
DESCRIBE_EVENTS = 10
# How many failed containers kept as history describe shows (and inspects), newest first.
DESCRIBE_HISTORY = 10


class NoSuchService(LookupError):
    pass


class EngineAway(RuntimeError):
    pass


def describe_payload(
    c: ControllerLike,
    name: str,
    tag: Callable[[str], str] = plain_tag,
    reader: Reader = PRIVILEGED,
) -> dict[str, Any]:
    """`tag`: the spec's revision as container names show it (salted with the host key:
    any local reader may ask, and the bare spec hash would let one test guesses of a
    secret in the spec). The engine calls are on `reader`'s budget, and the history
    shown is the DESCRIBE_HISTORY newest (one inspect each)."""
    known(c, name)
    now = time.time()
    try:
        rows: list[ContainerStatus] = c.container_statuses(name, reader)
        dead = c.deaths(name, reader, DESCRIBE_HISTORY)
    except EngineError as exc:
        raise EngineAway(f"cannot describe: engine unreachable: {exc}") from None
    kept = {d.container.id for d in dead}
    status = next((s for s in c.statuses() if s.name == name), None)
    spec = c.desired.services.get(name)
    subs = shown(spec)
    events = [e for e in c.events.since(0) if e.service == name][-DESCRIBE_EVENTS:]
    return {
        "service": service_view(status, now, subs) if status else None,
        "spec": _masked(_spec_view(spec, tag), subs) if spec else None,
        "containers": [_container(c, r, now, subs) for r in rows if r.id not in kept],
        "history": [_dead_view(d, subs) for d in dead],
        "events": [event_view(e, subs) for e in events],
    }


def _container(c: ControllerLike, r: ContainerStatus, now: float, subs: Subs) -> dict[str, Any]:
    """A replica, with how the run before its latest start in place ended."""
    term = c.termination(r.id)
    view = container_view(r, now, subs)
    view["last_termination"] = termination_view(term) if term is not None else None
    return view


def known(c: ControllerLike, name: str) -> None:
    if name not in c.desired.services and not any(s.name == name for s in c.statuses()):
        raise NoSuchService(f"no such service: {name}")


def _dead_view(d: Dead, subs: Subs) -> dict[str, Any]:
    return {
        "name": d.container.name,
        "id": d.container.id,
        "created": d.container.created,
        "restarts": d.container.restarts,
        **_death_view(d, subs),
    }


def _death_view(d: Dead, subs: Subs = ()) -> dict[str, Any]:
    return {
        "exit_code": d.death.exit_code,
        "oom_killed": d.death.oom_killed,
        "finished_at": d.death.finished_at,
        "error": mask_free(d.death.error, subs) if d.death.error else d.death.error,
    }


# What healerd writes itself: a short value must not garble it.
_NOT_MASKED = frozenset({"revision", "source_file", "update_order"})


def _masked(view: dict[str, Any], subs: Subs) -> dict[str, Any]:
    return {k: v if k in _NOT_MASKED else mask_tree(v, subs) for k, v in view.items()}


def _mount(v: VolumeSpec) -> str:
    """`SOURCE:TARGET[:ro]`, `tmpfs:TARGET` or `TARGET` (an anonymous volume)."""
    source = "tmpfs:" if v.kind is VolumeKind.TMPFS else f"{v.source}:" if v.source else ""
    return f"{source}{v.target}{':ro' if v.read_only else ''}"


def _spec_view(s: ServiceSpec, tag: Callable[[str], str]) -> dict[str, Any]:
    """The spec as declared; describe_payload masks what came from variables."""
    hc = s.healthcheck
    return {
        "image": s.image,
        "replicas": s.replicas,
        "command": list(s.command) if s.command is not None else None,
        "entrypoint": list(s.entrypoint) if s.entrypoint is not None else None,
        "environment": [k for k, _ in s.environment],  # names only, never values
        "env_files": list(s.env_files),
        "volumes": [_mount(v) for v in s.volumes],
        "ports": [
            f"{p.host_ip + ':' if p.host_ip else ''}{p.host_port or ''}"
            f"{':' if p.host_port else ''}{p.container_port}/{p.protocol}"
            for p in s.ports
        ],
        "healthcheck": list(hc.test) if hc and not hc.disable else None,
        # None: the spec declares none (the image's own, if any, applies).
        "healthcheck_options": {
            "interval": hc.interval,
            "timeout": hc.timeout,
            "retries": hc.retries,
            "start_period": hc.start_period,
            "disable": hc.disable,
        }
        if hc
        else None,
        "update_order": s.update_order.value,
        "restart_policy": {
            "delay": s.restart_policy.delay,
            "max_delay": s.restart_policy.max_delay,
            "window": s.restart_policy.window,
        },
        "revision": tag(s.spec_hash),
        "source_file": s.source_file,
    }


__all__ = ["DESCRIBE_HISTORY", "EngineAway", "NoSuchService", "describe_payload", "known"]
