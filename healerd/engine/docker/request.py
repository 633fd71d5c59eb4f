"""The create request of a service's container, from Compose's container settings, as the
docker SDK takes it (no docker import: plain keyword arguments).

What each setting becomes follows `docker compose` (its `getCreateConfigs`), so that
the inspected container is the one Compose would have made (tests/integration/
test_compose_diff.py compares the two).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from healerd.model import (
    LABEL_SERVICE,
    LABEL_SPEC_HASH,
    NetworkDecl,
    ServiceSpec,
    VolumeDecl,
    VolumeSpec,
)

# bind.recursive as the Mount API takes it (as Compose sends it), and the API version
# each needs beyond healerd's floor (NonRecursive is older than the floor).
_RECURSIVE: dict[str, tuple[str, str | None]] = {
    "disabled": ("NonRecursive", None),
    "writable": ("ReadOnlyNonRecursive", "1.44"),
    "readonly": ("ReadOnlyForceRecursive", "1.44"),
}
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
        ("cpu_period", spec.cpu_period),
        ("cpu_quota", spec.cpu_quota),
        ("cpu_rt_period", spec.cpu_rt_period),
        ("cpu_rt_runtime", spec.cpu_rt_runtime),
        ("mem_swappiness", spec.mem_swappiness),
        ("oom_kill_disable", spec.oom_kill_disable),
        ("cgroup_parent", spec.cgroup_parent),
        ("storage_opt", dict(spec.storage_opt)),
        ("uts_mode", spec.uts),
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
    if spec.device_requests:
        out["device_requests"] = device_requests(spec)
    return out


def device_requests(spec: ServiceSpec) -> list[dict[str, Any]]:
    """`gpus` and deploy.resources.reservations.devices, as the SDK's DeviceRequest takes
    them (Compose sends the capabilities as one AND-set)."""
    return [
        {
            "driver": d.driver,
            "count": d.count if d.count is not None else 0,
            "device_ids": list(d.device_ids) or None,
            "capabilities": [list(d.capabilities)],
            "options": dict(d.options) or None,
        }
        for d in spec.device_requests
    ]


def secret_mounts(spec: ServiceSpec) -> list[dict[str, Any]]:
    """Secrets and configs: read-only binds of their host files, as docker-compose
    1.29.2 sends secrets (Mounts, not Binds)."""
    return [
        {"Target": m.target, "Source": m.source, "Type": "bind", "ReadOnly": True}
        for m in (*spec.secrets, *spec.configs)
    ]


def endpoint(spec: ServiceSpec, network: str) -> dict[str, Any]:
    """Keyword arguments of the container's endpoint on `network`: its aliases, its fixed
    addresses and its links (`service:alias`, resolved by the engine through the linked
    service's name, an alias each of its replicas has)."""
    out: dict[str, Any] = {"aliases": aliases(spec, network) or None}
    for e in spec.network_endpoints:
        if e.network == network:
            out["ipv4_address"] = e.ipv4_address or None
            out["ipv6_address"] = e.ipv6_address or None
            out["link_local_ips"] = list(e.link_local_ips) or None
    if spec.links and network not in _NO_ALIASES:
        out["links"] = [(service, alias) for service, alias in spec.links]
    return {k: v for k, v in out.items() if v is not None}


def shared_network(spec: ServiceSpec) -> str | None:
    """The service whose container's network namespace this one joins
    (network_mode service:NAME), else None."""
    mode = spec.network_mode or ""
    return mode.removeprefix("service:") if mode.startswith("service:") else None


def ipam(decl: NetworkDecl) -> dict[str, Any] | None:
    """A network's IPAM as the engine takes it (Compose sends driver "default")."""
    if not decl.ipam_pools and not decl.ipam_driver and not decl.ipam_options:
        return None
    pools = [
        {
            k: v
            for k, v in (
                ("Subnet", p.subnet),
                ("IPRange", p.ip_range),
                ("Gateway", p.gateway),
                ("AuxiliaryAddresses", dict(p.aux_addresses)),
            )
            if v
        }
        for p in decl.ipam_pools
    ]
    options = dict(decl.ipam_options) or None
    return {"Driver": decl.ipam_driver or "default", "Config": pools, "Options": options}


def _bind_text(v: VolumeSpec) -> str:
    """The engine's bind string: of a short-syntax mount (its mode as written, as
    docker-compose sends it), or of a long-syntax bind that may create its host path."""
    if not v.kind:
        mode = v.mode or ("ro" if v.read_only else "rw")
    else:
        words = ("ro" if v.read_only else "rw", v.selinux, v.propagation, v.consistency)
        mode = ",".join(w for w in words if w and w != "default")
    return f"{v.source}:{v.target}:{mode}"


def _mount(v: VolumeSpec, inherited: str) -> dict[str, Any]:
    """A long-syntax mount as docker-compose 1.29.2 sends it (the SDK's Mount)."""
    out: dict[str, Any] = {
        "Target": v.target,
        "Source": v.source or inherited,
        "Type": v.kind,
        "ReadOnly": v.read_only,
    }
    if v.consistency:
        out["Consistency"] = v.consistency
    bind: dict[str, Any] = {"Propagation": v.propagation} if v.propagation else {}
    if v.recursive:
        bind[_RECURSIVE[v.recursive][0]] = True
        # A bind the syntax cannot carry (API 1.42+; an older engine wants the path).
        if v.create_host_path:
            bind["CreateMountpoint"] = True
    if bind:
        out["BindOptions"] = bind
    if v.nocopy:
        out["VolumeOptions"] = {"NoCopy": True}
    tmpfs = {"SizeBytes": v.tmpfs_size, "Mode": v.tmpfs_mode}
    if any(value is not None for value in tmpfs.values()):
        out["TmpfsOptions"] = {k: value for k, value in tmpfs.items() if value is not None}
    return out


def mounts(
    spec: ServiceSpec, taken: Sequence[tuple[str, str]]
) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """The container's binds, its Mounts, and the mount points that get a fresh anonymous
    volume, given the anonymous volumes (volume, mount point) it takes over (issue 14).

    As docker-compose 1.29.2: short syntax as binds, long syntax as Mounts; except a
    long-syntax bind that may create its host path (`create_host_path`, true unless
    said), which only a bind string does (the Mount API refuses a missing path), as
    Compose v2 sends it. A long-syntax anonymous volume taken over keeps its options."""
    inherited = {target: volume for volume, target in taken}
    binds: list[str] = []
    found: list[dict[str, Any]] = []
    anonymous: list[str] = []
    for v in spec.volumes:
        if (
            v.source
            and (not v.kind or (v.kind == "bind" and v.create_host_path))
            and not (v.recursive)
        ):
            binds.append(_bind_text(v))
        elif v.kind:
            found.append(_mount(v, inherited.pop(v.target, "") if v.kind == "volume" else ""))
        elif v.target not in inherited:
            anonymous.append(v.target)
    binds += [f"{volume}:{target}:rw" for target, volume in inherited.items()]
    return binds, found, anonymous


def api_needs(spec: ServiceSpec) -> list[tuple[str, str]]:
    """What of `spec` needs an engine API newer than healerd's floor: (the field as
    written, the API version), checked at create time against the one negotiated."""
    needs = ((v, _RECURSIVE[v.recursive][1]) for v in spec.volumes if v.recursive)
    return [(f"volume {v.target}: bind.recursive: {v.recursive}", n) for v, n in needs if n]


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
        ("mac_address", spec.mac_address),
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


def port_bindings(spec: ServiceSpec) -> dict[str, Any]:
    bindings: dict[str, Any] = {}
    for p in spec.ports:
        key = f"{p.container_port}/{p.protocol}"
        host = str(p.host_port) if p.host_port is not None else None
        bindings.setdefault(key, []).append((p.host_ip, host) if p.host_ip else host)
    return bindings


def _ns(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1e9)


def healthcheck(spec: ServiceSpec) -> dict[str, Any] | None:
    """None keeps the image's own healthcheck; disable turns it off."""
    hc = spec.healthcheck
    if hc is None:
        return None
    if hc.disable:
        return {"test": ["NONE"]}
    out: dict[str, Any] = {"test": list(hc.test) if hc.test else None}
    for key in ("interval", "timeout", "start_period"):
        value = _ns(getattr(hc, key))
        if value is not None:
            out[key] = value
    if hc.retries is not None:
        out["retries"] = hc.retries
    return out


def container_labels(spec: ServiceSpec, labels: Mapping[str, str]) -> dict[str, str]:
    """The service's labels and healerd's. The caller's win: it may pass the hash of the
    spec as declared, before it filled in values (env files) that must not change it."""
    return {
        **dict(spec.labels),
        LABEL_SERVICE: spec.name,
        LABEL_SPEC_HASH: spec.spec_hash,
        **labels,
    }
