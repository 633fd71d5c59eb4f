"""The Kubernetes Service of an exported service (issue 34): under healerd every service
name resolves on its project's network, so a Service is made wherever a name is used,
not only where ports are published:

- a service another one reaches: named in its `depends_on`, `links` or
  `network_mode: service:` (a dependency held only until it completes,
  `service_completed_successfully`, is waited for, not reached: no Service for that);
- a service that publishes `ports` or declares `expose`: its ports are the Service's.

Without a port the Service is headless (`clusterIP: None`): the name still resolves,
to the pods' own addresses, which is what a container name gives under Compose.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from healerd.model import ServiceSpec
from healerd.vocabulary import Condition

_DNS_LABEL_BAD = re.compile(r"[^a-z0-9-]+")
# A Service lists each port: a wider `expose` range is left to the container's ports.
MAX_RANGE = 100


def k8s_name(name: str) -> str:
    """A DNS-1035 label (what a Service name must be): lower case, '-' for the rest."""
    text = _DNS_LABEL_BAD.sub("-", name.lower()).strip("-")
    if not text[:1].isalpha():
        text = f"s-{text}"
    return text[:63].rstrip("-")


def labels(spec: ServiceSpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": k8s_name(spec.name), "healerd.io/service": spec.name}


def depended_on(specs: Iterable[ServiceSpec]) -> frozenset[str]:
    """The services some service in `specs` reaches by name."""
    names: set[str] = set()
    for spec in specs:
        names.update(
            d.service for d in spec.depends_on if d.condition != Condition.COMPLETED_SUCCESSFULLY
        )
        names.update(service for service, _ in spec.links)
        mode = spec.network_mode or ""
        if mode.startswith("service:"):
            names.add(mode.removeprefix("service:"))
    return frozenset(names)


def exposed_ports(spec: ServiceSpec) -> list[tuple[int, str]]:
    """`expose` as (port, protocol) pairs, a range as each of its ports (up to
    MAX_RANGE of them)."""
    out: list[tuple[int, str]] = []
    for entry in spec.expose:
        ports, _, protocol = entry.partition("/")
        first, _, last = ports.partition("-")
        low, high = int(first), int(last or first)
        if high - low < MAX_RANGE:
            out += [(n, protocol or "tcp") for n in range(max(low, 1), min(high, 65535) + 1)]
    return out


def service_ports(spec: ServiceSpec) -> list[tuple[int, str]]:
    """Every published container port and every exposed one, each once, in order."""
    pairs = [(p.container_port, p.protocol) for p in spec.ports] + exposed_ports(spec)
    return list(dict.fromkeys(pairs))


def wants_service(spec: ServiceSpec, reached: frozenset[str]) -> bool:
    return spec.name in reached or bool(spec.ports or spec.expose)


def service(spec: ServiceSpec) -> dict[str, Any]:
    name = k8s_name(spec.name)
    body: dict[str, Any] = {"selector": {"app.kubernetes.io/name": name}}
    ports = [
        {"name": f"{protocol}-{number}", "port": number, "targetPort": number,
         "protocol": protocol.upper()}
        for number, protocol in service_ports(spec)
    ]  # fmt: skip
    if ports:
        body["ports"] = ports
    else:
        body["clusterIP"] = "None"  # headless: the name resolves to the pods
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels(spec)},
        "spec": body,
    }
