"""Helpers the integration tests share (fixtures stay in conftest.py)."""

from __future__ import annotations

import contextlib
import secrets
import time
from pathlib import Path
from typing import Any

import docker

from healerd.config import load_service_file
from tests.support import compose_oracle
from tests.support.cluster import Cluster
from tests.support.polling import wait_for

IMAGE = "healerd-test/busybox:1"
SERVICE_LABEL = "com.docker.compose.service"


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(2)}"


HEAL_DEADLINE = 2.0


def current_hash(path: Path, service: str) -> str:
    result = load_service_file(path)
    assert result.services is not None, result.errors
    return result.services[service].spec_hash


def heal_latency(cluster: Cluster, service: str, old_id: str, disrupt: object) -> float:
    """Disrupt the one replica; seconds until it runs again: the same container started
    again in place (a new StartedAt), or another container of the service."""
    before = cluster.api.inspect_container(old_id)["State"]["StartedAt"]

    def healed() -> bool:
        for c in cluster.running(service):
            if c["Id"] != old_id:
                return True
            with contextlib.suppress(docker.errors.NotFound):
                if cluster.api.inspect_container(old_id)["State"]["StartedAt"] != before:
                    return True
        return False

    t0 = time.monotonic()
    disrupt()  # type: ignore[operator]
    wait_for(f"{old_id[:12]} healed", healed, timeout=10, interval=0.01)
    return time.monotonic() - t0


def started_again(api: docker.APIClient, cid: str, started_before: str) -> bool:
    """The container runs again after a start later than `started_before` (its StartedAt):
    healed in place, as itself."""
    state = api.inspect_container(cid)["State"]
    return bool(state["Running"]) and state["StartedAt"] != started_before


HOST_KEYS = (
    "Privileged", "ReadonlyRootfs", "Init", "CapAdd", "CapDrop", "SecurityOpt", "Dns",
    "DnsSearch", "DnsOptions", "ExtraHosts", "GroupAdd", "Devices", "DeviceCgroupRules",
    "Tmpfs", "Sysctls", "Ulimits", "ShmSize", "PidsLimit", "Memory", "MemoryReservation",
    "MemorySwap", "CpuShares", "CpusetCpus", "OomScoreAdj", "IpcMode", "PidMode",
    "UsernsMode", "Runtime", "LogConfig", "PortBindings", "Binds", "Mounts", "NanoCpus",
)  # fmt: skip


CONFIG_KEYS = (
    "Hostname", "Domainname", "Tty", "OpenStdin", "StdinOnce", "StopSignal", "StopTimeout",
    "ExposedPorts", "Env", "Cmd", "Entrypoint", "User", "WorkingDir", "Image", "Healthcheck",
)  # fmt: skip


def as_bind(mount: dict[str, Any]) -> str:
    """The bind string healerd sends for the long-syntax bind docker-compose 1.29.2 sends
    as this Mount (the difference docs/reference/compose.md explains)."""
    words = ["ro" if mount.get("ReadOnly") else "rw"]
    words += [
        (mount.get("BindOptions") or {}).get("Propagation", ""),
        str(mount.get("Consistency") or ""),
    ]
    return f"{mount['Source']}:{mount['Target']}:{','.join(w for w in words if w)}"


def normalised(info: dict[str, Any], service: str, *, compose: bool = False) -> dict[str, Any]:
    host, config = dict(info["HostConfig"]), info["Config"]
    binds, found = list(host.get("Binds") or []), []
    for m in host.get("Mounts") or []:
        if compose and m["Type"] == "bind":
            binds.append(as_bind(m))
        else:
            found.append(m)
    host["Binds"] = sorted(binds)
    host["Mounts"] = sorted(found, key=lambda m: str(m["Target"]))
    out = {f"HostConfig.{k}": host.get(k) for k in HOST_KEYS}
    out |= {f"Config.{k}": config.get(k) for k in CONFIG_KEYS}
    out = {k: v if v else None for k, v in out.items()}  # [] and {} are "not set" too
    out["Config.Env"] = sorted(config.get("Env") or [])
    out["HostConfig.NetworkMode"] = host.get("NetworkMode")
    if compose_oracle.major() >= 2:  # v2 sends some of v1's binds as Mounts: same effect
        out["HostConfig.Binds"] = out["HostConfig.Mounts"] = None
        out["Mounted"] = compose_oracle.mounts(info["HostConfig"])
        out = compose_oracle.same_meaning(out)
    # The networks joined and each one's aliases (the engine adds the short id: not ours;
    # Compose v2 adds its container's name, which it labels with its version).
    labels = info["Config"].get("Labels") or {}
    v2 = str(labels.get("com.docker.compose.version", "1")).split(".")[0] != "1"
    name = str(info["Name"]).lstrip("/")  # v2's alias; its service alias too if the same
    own = {info["Id"][:12]} | ({name} if v2 and name != labels.get(SERVICE_LABEL) else set())
    networks = info["NetworkSettings"]["Networks"] or {}
    out["Networks"] = {
        net: sorted(set(ep.get("Aliases") or []) - own) for net, ep in networks.items()
    }
    return out
