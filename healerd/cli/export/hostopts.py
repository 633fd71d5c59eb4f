"""Compose's container settings (issue 16) in the exports: Compose syntax for a Compose
file and a stack file, with what Swarm ignores as losses, and Kubernetes' few
equivalents (securityContext, tty, stdin) with losses for the rest. None is dropped
silently (export.common's rule)."""

from __future__ import annotations

from typing import Any

from healerd.cli.export.common import DEFAULT_SPEC, Loss, size_text
from healerd.config.hostopts import HOST_FIELDS
from healerd.model import ServiceSpec

NAMES = tuple(k.name for k in HOST_FIELDS if k.name not in ("restart", "depends_on", "profiles"))
_SIZES = ("shm_size", "mem_reservation", "memswap_limit")

# What `docker stack deploy` ignores or services cannot do, and why.
SWARM_LOST = {
    "privileged": "Swarm services cannot run privileged",
    "devices": "Swarm services cannot map devices",
    "device_cgroup_rules": "Swarm services have no device cgroup rules",
    "security_opt": "docker stack deploy ignores security_opt",
    "network_mode": "docker stack deploy ignores network_mode (use the host network)",
    "userns_mode": "docker stack deploy ignores userns_mode",
    "ipc": "Swarm services have no IPC mode",
    "pid": "Swarm services have no PID mode",
    "cpu_shares": "Swarm services have no CPU shares (use deploy.resources)",
    "cpuset": "Swarm services have no cpuset",
    "oom_score_adj": "Swarm services have no OOM score",
    "memswap_limit": "Swarm services have no swap limit",
    "mem_reservation": "see deploy.resources.reservations.memory",
    "shm_size": "Swarm services have no shm size (mount a tmpfs on /dev/shm)",
    "runtime": "Swarm services use the engine's default runtime",
    "platform": "use deploy.placement constraints on node.platform",
    "group_add": "docker stack deploy has no group_add",
    "domainname": "docker stack deploy ignores domainname",
    "container_name": "docker stack deploy names tasks <stack>_<service>.<slot>.<id>",
}
K8S_MAPPED = ("privileged", "read_only", "cap_add", "cap_drop", "tty", "stdin_open")


def _value(name: str, value: Any) -> Any:
    if name in _SIZES:
        return -1 if value == -1 else size_text(value)
    if name == "sysctls":
        return dict(value)
    if name == "ulimits":
        return {
            u.name: u.soft if u.soft == u.hard else {"soft": u.soft, "hard": u.hard} for u in value
        }
    if name == "logging":
        return (
            {"driver": value.driver, "options": dict(value.options)}
            if value.options
            else {"driver": value.driver}
        )
    return list(value) if isinstance(value, tuple) else value


def set_fields(spec: ServiceSpec) -> list[tuple[str, Any]]:
    """(name, Compose value) of each setting the service gives."""
    return [
        (name, _value(name, getattr(spec, name)))
        for name in NAMES
        if getattr(spec, name) != getattr(DEFAULT_SPEC, name)
    ]


def compose_fields(spec: ServiceSpec) -> dict[str, Any]:
    return dict(set_fields(spec))


def swarm_fields(spec: ServiceSpec, losses: list[Loss]) -> dict[str, Any]:
    out = {}
    for name, value in set_fields(spec):
        if name in SWARM_LOST:
            losses.append(Loss(spec.name, name, f"{value}: {SWARM_LOST[name]}"))
        else:
            out[name] = value
    return out


def kubernetes_fields(
    spec: ServiceSpec, losses: list[Loss]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(container fields, securityContext fields); the rest are losses."""
    container: dict[str, Any] = {}
    security: dict[str, Any] = {}
    caps: dict[str, Any] = {}
    for name, value in set_fields(spec):
        if name == "privileged":
            security["privileged"] = True
        elif name == "read_only":
            security["readOnlyRootFilesystem"] = True
        elif name in ("cap_add", "cap_drop"):
            caps["add" if name == "cap_add" else "drop"] = [
                c.upper().removeprefix("CAP_") for c in value
            ]
        elif name == "tty":
            container["tty"] = True
        elif name == "stdin_open":
            container["stdin"] = True
        elif name == "expose":
            continue  # the container's ports and its Service (healerd.cli.export.kubeservice)
        else:
            reason = "no equivalent in a pod's container; set it in the pod yourself"
            losses.append(Loss(spec.name, name, f"{value}: {reason}"))
    if caps:
        security["capabilities"] = caps
    return container, security


def depends_on(spec: ServiceSpec) -> dict[str, Any]:
    """Compose's long syntax."""
    return {
        d.service: {
            "condition": d.condition.value,
            **({} if d.required else {"required": False}),
            **({"restart": True} if d.restart else {}),
        }
        for d in spec.depends_on
    }


def order_lost(spec: ServiceSpec, losses: list[Loss], target: str) -> None:
    if spec.depends_on:
        names = ", ".join(d.service for d in spec.depends_on)
        losses.append(
            Loss(spec.name, "depends_on", f"{names}: {target} starts services in no order")
        )


def networks_with_aliases(spec: ServiceSpec, names: list[str]) -> Any:
    """A service's networks in Compose's form: a list, or a mapping when some have
    aliases (the service name is one anyway in Compose and Swarm)."""
    aliases = dict(spec.network_aliases)
    default = [n.name for n in spec.networks_to_create if n.key == "default" and n.name in aliases]
    if not any(n in aliases for n in names) and not default:
        return names
    out: dict[str, Any] = {"default": {"aliases": list(aliases[default[0]])}} if default else {}
    out |= {n: {"aliases": list(aliases[n])} if n in aliases else None for n in names}
    return out
