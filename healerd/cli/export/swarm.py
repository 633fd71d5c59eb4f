"""`healerctl export --to swarm`: a stack file (Compose v3.8) for `docker stack deploy`."""

from __future__ import annotations

from typing import Any

from healerd.cli.export.attachments import swarm_more, top_level
from healerd.cli.export.common import (
    Loss,
    Options,
    Rendered,
    changed,
    compose_base,
    dump,
    go_duration,
    header,
    mount_options,
    named_volumes,
    networks,
    size_text,
    user_networks,
    volume_entry,
)
from healerd.cli.export.hostopts import networks_with_aliases, order_lost, swarm_fields
from healerd.cli.export.variables import all_substitutions, argv_warnings, env_note, written_back
from healerd.model import PortSpec, ServiceSpec
from healerd.vocabulary import RestartMode

# Steering fields Swarm has no equivalent for, and why.
LOST = {
    "priority": "Swarm has no priorities between services",
    "unhealthy_grace": "Swarm replaces an unhealthy task at once",
    "update_config.progress_deadline": "Swarm has no rollout deadline; failure_action "
    "rollback acts when a task fails within `monitor` instead",
    "restart_policy.max_delay": "Swarm restarts after a fixed `delay`, with no exponential backoff",
    "pull_policy": "stack files have no pull_policy; use `docker stack deploy "
    "--resolve-image always|changed|never`",
}


def _volumes(spec: ServiceSpec, losses: list[Loss]) -> list[Any]:
    """The mounts as a stack file (3.8) has them: it has no SELinux relabelling (`docker
    stack deploy` ignores z/Z) and no tmpfs mode, which are lost, and no
    create_host_path (Swarm never makes a missing host path: false is what it does)."""
    out: list[Any] = []
    for v in spec.volumes:
        opts = mount_options(v)
        if opts.selinux:
            losses.append(
                Loss(spec.name, "volumes", f"{v.target}: {opts.selinux}: Swarm does not relabel")
            )
        if v.tmpfs_mode is not None:
            reason = f"{v.target}: tmpfs mode {v.tmpfs_mode:o}: stack files take a size only"
            losses.append(Loss(spec.name, "volumes", reason))
        if v.recursive:
            reason = f"{v.target}: recursive: {v.recursive}: stack files (3.8) have no such key"
            losses.append(Loss(spec.name, "volumes", reason))
        entry = volume_entry(v)
        if isinstance(entry, dict):
            section = entry.pop(v.kind.value, {})
            section = {k: x for k, x in section.items() if k not in _NOT_IN_STACKS}
            entry |= {v.kind.value: section} if section else {}
        out.append(entry)
    return out


_NOT_IN_STACKS = ("selinux", "create_host_path", "mode", "recursive")


def _update_config(spec: ServiceSpec) -> dict[str, Any]:
    u = spec.update_config
    return {
        "parallelism": u.parallelism,
        "delay": go_duration(u.delay),
        "order": str(spec.update_order),
        "failure_action": "rollback",
        "monitor": go_duration(u.min_ready_seconds),
    }


def _deploy(spec: ServiceSpec) -> dict[str, Any]:
    r = spec.restart_policy
    deploy: dict[str, Any] = {
        "replicas": spec.replicas,
        "update_config": _update_config(spec),
        "rollback_config": {
            "parallelism": spec.update_config.parallelism,
            "order": str(spec.update_order),
        },
        # healerd never gives up, so neither does Swarm: no max_attempts.
        "restart_policy": {
            "condition": "any",
            "delay": go_duration(r.delay),
            "window": go_duration(r.window),
        },
    }
    _run_once(spec, deploy["restart_policy"])
    limits: dict[str, str] = {}
    if spec.mem_limit is not None:
        limits["memory"] = size_text(spec.mem_limit)
    if spec.cpus is not None:
        limits["cpus"] = f"{spec.cpus:g}"
    if limits:
        deploy["resources"] = {"limits": limits}
    return deploy


def _run_once(spec: ServiceSpec, policy: dict[str, Any]) -> None:
    """restart "no" is Swarm's condition none; on-failure[:N] its on-failure with N tries."""
    r = spec.restart
    if r is not None and r.mode is RestartMode.NO:
        policy["condition"] = "none"
    elif r is not None and r.mode is RestartMode.ON_FAILURE:
        policy["condition"] = "on-failure"
        if r.max_retries is not None:
            policy["max_attempts"] = r.max_retries


def _port(spec: ServiceSpec, p: PortSpec, losses: list[Loss], notes: list[str]) -> dict[str, Any]:
    port: dict[str, Any] = {"target": p.container_port, "protocol": p.protocol, "mode": "ingress"}
    if p.host_port is None:
        return port  # Swarm picks a published port (30000+), as the engine picks a host port
    port["published"] = p.host_port
    if p.host_ip:
        losses.append(
            Loss(
                spec.name,
                "ports",
                f"{p.host_ip}: Swarm publishes on every address of "
                "every node (ingress), it cannot bind one address",
            )
        )
    notes.append(
        f"{spec.name}: ports: {p.host_port} is published in ingress mode (the routing mesh, "
        "on every node, fine with replicas > 1); `mode: host` binds only the node that runs "
        "the task, as healerd does"
    )
    return port


def _service(spec: ServiceSpec, losses: list[Loss], notes: list[str]) -> dict[str, Any]:
    svc = compose_base(spec)
    if spec.volumes:
        svc["volumes"] = _volumes(spec, losses)
    if spec.ports:
        svc["ports"] = [_port(spec, p, losses, notes) for p in spec.ports]
    nets = networks_with_aliases(spec, user_networks(spec))
    if nets:
        svc["networks"] = nets
    svc |= swarm_fields(spec, losses)
    swarm_more(spec, svc, losses)  # secrets and configs; links, addresses, GPUs lost
    order_lost(spec, losses, "docker stack deploy")
    svc["deploy"] = _deploy(spec)
    for name, value in changed(spec, tuple(LOST)):
        losses.append(Loss(spec.name, name, f"{value}: {LOST[name]}"))
    return svc


def render(specs: list[ServiceSpec], opts: Options) -> Rendered:
    losses: list[Loss] = []
    notes: list[str] = []
    doc: dict[str, Any] = {
        "version": "3.8",
        "services": {
            s.name: written_back(_service(s, losses, notes), s.substitutions, f"services.{s.name}")
            for s in specs
        },
    }
    nets = networks(specs)
    if nets:
        # healerd joins existing networks; a stack makes its own overlays, named
        # <stack>_<name>, so the services of the stack reach each other by name there.
        doc["networks"] = {n: {"driver": "overlay"} for n in nets}
        notes.append("networks: " + ", ".join(nets) + ": declared as overlay networks of the stack")
    doc |= written_back(top_level(specs, losses), all_substitutions(specs))
    vols = named_volumes(specs)
    if vols:
        doc["volumes"] = {v: {} for v in vols}
        notes.append(
            "volumes: " + ", ".join(vols) + ": named volumes are local to each node in Swarm"
        )
    notes += [n for n in [env_note(specs, "swarm")] if n]
    warnings = [w for s in specs for w in argv_warnings(s, "written as ${...}")]
    return Rendered(header("swarm", opts.sources) + dump(doc), losses, notes, warnings)
