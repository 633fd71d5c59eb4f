"""The create request of a service's container, from Compose's container settings, as the
docker SDK takes it (no docker import: plain keyword arguments).

What each setting becomes follows `docker compose` (its `getCreateConfigs`), so that
the inspected container is the one Compose would have made (tests/integration/
test_compose_diff.py compares the two).
"""

from __future__ import annotations

from typing import Any

from healerd.model import NetworkDecl, ServiceSpec, VolumeDecl

# Networks on which the engine takes no aliases.
_NO_ALIASES = ("bridge", "host", "none", "default")
LABEL_PROJECT = "io.healerd.project"


def _set(out: dict[str, Any], key: str, value: object) -> None:
    if value not in (None, (), False):
        out[key] = value


def host_options(spec: ServiceSpec) -> dict[str, Any]:
    """Keyword arguments for `create_host_config`, besides binds, ports and limits."""
    out: dict[str, Any] = {}
    for key, value in (
        ("privileged", spec.privileged),
        ("read_only", spec.read_only),
        ("cap_add", list(spec.cap_add)),
        ("cap_drop", list(spec.cap_drop)),
        ("security_opt", list(spec.security_opt)),
        ("dns", list(spec.dns)),
        ("dns_search", list(spec.dns_search)),
        ("dns_opt", list(spec.dns_opt)),
        ("extra_hosts", list(spec.extra_hosts)),
        ("group_add", list(spec.group_add)),
        ("devices", list(spec.devices)),
        ("device_cgroup_rules", list(spec.device_cgroup_rules)),
        ("tmpfs", list(spec.tmpfs)),
        ("sysctls", dict(spec.sysctls)),
        ("shm_size", spec.shm_size),
        ("pids_limit", spec.pids_limit),
        ("mem_reservation", spec.mem_reservation),
        ("memswap_limit", spec.memswap_limit),
        ("cpu_shares", spec.cpu_shares),
        ("cpuset_cpus", spec.cpuset),
        ("oom_score_adj", spec.oom_score_adj),
        ("ipc_mode", spec.ipc),
        ("pid_mode", spec.pid),
        ("userns_mode", spec.userns_mode),
        ("runtime", spec.runtime),
    ):
        _set(out, key, value or None)
    if spec.init is not None:
        out["init"] = spec.init
    if spec.ulimits:
        out["ulimits"] = [{"name": u.name, "soft": u.soft, "hard": u.hard} for u in spec.ulimits]
    if spec.logging is not None:
        out["log_config"] = {"type": spec.logging.driver, "config": dict(spec.logging.options)}
    return out


def _expanded(entry: str) -> list[Any]:
    """`1000-1002/udp` -> each port, as the SDK takes them (a tuple for udp or sctp)."""
    ports, _, proto = entry.partition("/")
    first, _, last = ports.partition("-")
    return [
        (p, proto) if proto and proto != "tcp" else p
        for p in range(int(first), int(last or first) + 1)
    ]


def exposed(spec: ServiceSpec) -> list[Any]:
    """Every port the container exposes: the published ones, then `expose`."""
    out: list[Any] = [
        (p.container_port, p.protocol) if p.protocol != "tcp" else p.container_port
        for p in spec.ports
    ]
    for entry in spec.expose:
        out.extend(_expanded(entry))
    return out


def container_options(spec: ServiceSpec) -> dict[str, Any]:
    """Keyword arguments for `create_container`, besides image, command and the rest
    healerd always sets."""
    out: dict[str, Any] = {}
    for key, value in (
        ("hostname", spec.hostname),
        ("domainname", spec.domainname),
        ("stop_signal", spec.stop_signal),
        ("tty", spec.tty),
        ("stdin_open", spec.stdin_open),
    ):
        _set(out, key, value)
    return out


def network_mode(spec: ServiceSpec) -> str | None:
    if spec.network_mode is not None:
        return spec.network_mode
    return spec.networks[0] if spec.networks else None


def aliases(spec: ServiceSpec, network: str) -> list[str]:
    """The service name, then the aliases it declares for `network`, as Compose sets them:
    how the other services of the project find its replicas by name."""
    if network in _NO_ALIASES or network.startswith("container:"):
        return []
    return [spec.name, *dict(spec.network_aliases).get(network, ())]


def owner_labels(decl: NetworkDecl | VolumeDecl) -> dict[str, str]:
    kind = "io.healerd.network" if isinstance(decl, NetworkDecl) else "io.healerd.volume"
    return {LABEL_PROJECT: decl.project, kind: decl.key}
