"""Secrets, configs, links, fixed addresses and GPUs (issue 16) in the exports: Compose
syntax where the target has it, a loss (never a silent drop) where it has not."""

from __future__ import annotations

from typing import Any

from healerd.cli.export.common import Loss
from healerd.model import DeviceRequest, SecretMount, ServiceSpec


def _refs(mounts: tuple[SecretMount, ...]) -> list[dict[str, str]]:
    return [{"source": m.name, "target": m.target} for m in mounts]


def _device(d: DeviceRequest) -> dict[str, Any]:
    out: dict[str, Any] = {"capabilities": list(d.capabilities)}
    if d.count is not None:
        out["count"] = "all" if d.count == -1 else d.count
    if d.device_ids:
        out["device_ids"] = list(d.device_ids)
    if d.driver:
        out["driver"] = d.driver
    if d.options:
        out["options"] = dict(d.options)
    return out


def _files(spec: ServiceSpec, svc: dict[str, Any]) -> None:
    if spec.secrets:
        svc["secrets"] = _refs(spec.secrets)
    if spec.configs:
        svc["configs"] = _refs(spec.configs)


def compose_more(spec: ServiceSpec, svc: dict[str, Any], losses: list[Loss]) -> None:
    """Adds them to the Compose service `svc` (its networks already there)."""
    _files(spec, svc)
    if spec.links:
        svc["links"] = [s if s == a else f"{s}:{a}" for s, a in spec.links]
    if spec.device_requests:
        devices = [_device(d) for d in spec.device_requests]
        svc.setdefault("deploy", {})["resources"] = {"reservations": {"devices": devices}}
    if not spec.network_endpoints:
        return
    nets = svc.get("networks") or {}
    if isinstance(nets, list):
        nets = {n: None for n in nets}
    for e in spec.network_endpoints:
        entry = dict(nets.get(e.network) or {})
        for key, value in (("ipv4_address", e.ipv4_address), ("ipv6_address", e.ipv6_address)):
            if value:
                entry[key] = value
        if e.link_local_ips:
            entry["link_local_ips"] = list(e.link_local_ips)
        nets[e.network] = entry
    svc["networks"] = nets


def top_level(specs: list[ServiceSpec], losses: list[Loss]) -> dict[str, Any]:
    """The top-level secrets and configs the services name: {file: the host file}."""
    out: dict[str, dict[str, Any]] = {}
    for key in ("secrets", "configs"):
        for spec in specs:
            for m in getattr(spec, key):
                known = out.setdefault(key, {}).setdefault(m.name, {"file": m.source})
                if known["file"] != m.source:
                    losses.append(
                        Loss(spec.name, key, f"{m.name}: another service's {m.name} is "
                             f"{known['file']}; this one's ({m.source}) is not exported")
                    )  # fmt: skip
    return out


def swarm_more(spec: ServiceSpec, svc: dict[str, Any], losses: list[Loss]) -> None:
    """A stack takes file secrets and configs (as Swarm objects); not the rest."""
    _files(spec, svc)
    for field, value, why in (
        ("links", spec.links, "docker stack deploy ignores links (services resolve by name)"),
        ("networks", spec.network_endpoints, "Swarm services cannot have a fixed address"),
        ("gpus", spec.device_requests, "Swarm services take GPUs only as generic resources"),
    ):
        if value:
            losses.append(Loss(spec.name, field, f"{_text(value)}: {why}"))


def kubernetes_losses(spec: ServiceSpec, losses: list[Loss]) -> None:
    for field, value, why in (
        ("secrets", spec.secrets, "create a Secret and mount it in the pod"),
        ("configs", spec.configs, "create a ConfigMap and mount it in the pod"),
        ("links", spec.links, "pods reach a Service by its name; no per-pod alias"),
        ("networks", spec.network_endpoints, "a pod's address is the cluster's to give"),
        ("gpus", spec.device_requests, "request the device plugin's resource "
         "(nvidia.com/gpu) in the container's limits"),
    ):  # fmt: skip
        if value:
            losses.append(Loss(spec.name, field, f"{_text(value)}: {why}"))


def _text(value: tuple[Any, ...]) -> str:
    parts = []
    for v in value:
        if isinstance(v, SecretMount):
            parts.append(f"{v.name} at {v.target}")
        elif isinstance(v, tuple):
            parts.append(":".join(v))
        elif isinstance(v, DeviceRequest):
            parts.append(",".join(v.capabilities))
        else:
            parts.append(getattr(v, "ipv4_address", "") or getattr(v, "ipv6_address", "") or "?")
    return ", ".join(parts)
