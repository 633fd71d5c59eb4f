"""Differential test against Docker Compose itself (issue 16): one Compose file, run once
with Debian's `docker-compose -p P up -d` and once under healerd on the same private
engine; per service, the inspected container configuration that matters must be equal.

`privileged` is not in the stack: this machine (itself a container without
CAP_SYS_RESOURCE) cannot run a privileged container at all; its request is checked in
tests/unit/test_compose_fields.py.

Compared: HostConfig (capabilities, devices, DNS, hosts, limits, namespaces, tmpfs,
sysctls, ulimits, log config, network mode of the host-network service...) and Config
(command, env, user, hostname, stop signal, exposed ports, tty...), and the networks
each container joins with its aliases (both on `cdiff_default`: healerd names the
project after its file, cdiff.yaml, and uses the network Compose made). Left out, as the
README explains: labels (each tool adds its own), the restart policy (healerd is the one
healer: Docker's stays "no") and the container name.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from tests.integration.conftest import IMAGE
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

PROJECT = "cdiff"
STACK = f"""\
services:
  gw:
    image: {IMAGE}
    command: {list(COMMAND)}
    restart: unless-stopped
    hostname: gateway
    domainname: example.lan
    read_only: true
    init: true
    tty: true
    stdin_open: true
    cap_add: [NET_ADMIN, SYS_TIME]
    cap_drop: [MKNOD]
    security_opt: ["no-new-privileges:true"]
    dns: [192.0.2.53]
    dns_search: [lan]
    dns_opt: [use-vc]
    extra_hosts: ["broker:192.0.2.10"]
    group_add: ["20"]
    devices: ["/dev/null:/dev/xnull:rw"]
    device_cgroup_rules: ["c 1:3 rmw"]
    tmpfs: [/run, "/scratch:size=64m"]
    sysctls: {{net.core.somaxconn: 1024}}
    ulimits: {{nofile: {{soft: 1024, hard: 4096}}, nproc: 4096}}
    shm_size: 32m
    stop_signal: SIGINT
    logging: {{driver: json-file, options: {{max-size: 10m, max-file: "3"}}}}
    pids_limit: 200
    mem_limit: 256m
    mem_reservation: 64m
    memswap_limit: 512m
    cpu_shares: 512
    cpuset: "0"
    oom_score_adj: 300
    ipc: shareable
    expose: ["1883", "5683/udp"]
    environment: {{TZ: UTC, MODE: edge}}
    user: "0:0"
    working_dir: /tmp
    stop_grace_period: 2s
  hostnet:
    image: {IMAGE}
    command: {list(COMMAND)}
    restart: always
    network_mode: host
    pid: host
    runtime: runc
    userns_mode: host
    stop_grace_period: 2s
"""

HOST_KEYS = (
    "Privileged", "ReadonlyRootfs", "Init", "CapAdd", "CapDrop", "SecurityOpt", "Dns",
    "DnsSearch", "DnsOptions", "ExtraHosts", "GroupAdd", "Devices", "DeviceCgroupRules",
    "Tmpfs", "Sysctls", "Ulimits", "ShmSize", "PidsLimit", "Memory", "MemoryReservation",
    "MemorySwap", "CpuShares", "CpusetCpus", "OomScoreAdj", "IpcMode", "PidMode",
    "UsernsMode", "Runtime", "LogConfig", "PortBindings", "Binds", "NanoCpus",
)  # fmt: skip
CONFIG_KEYS = (
    "Hostname", "Domainname", "Tty", "OpenStdin", "StdinOnce", "StopSignal", "StopTimeout",
    "ExposedPorts", "Env", "Cmd", "Entrypoint", "User", "WorkingDir", "Image", "Healthcheck",
)  # fmt: skip


def normalised(info: dict[str, Any], service: str) -> dict[str, Any]:
    host, config = info["HostConfig"], info["Config"]
    out = {f"HostConfig.{k}": host.get(k) for k in HOST_KEYS}
    out |= {f"Config.{k}": config.get(k) for k in CONFIG_KEYS}
    out = {k: v if v else None for k, v in out.items()}  # [] and {} are "not set" too
    out["Config.Env"] = sorted(config.get("Env") or [])
    out["HostConfig.NetworkMode"] = host.get("NetworkMode")
    # The networks joined and each one's aliases (the engine adds the short id: not ours).
    networks = info["NetworkSettings"]["Networks"] or {}
    out["Networks"] = {
        net: sorted(set(ep.get("Aliases") or []) - {info["Id"][:12]})
        for net, ep in networks.items()
    }
    return out


@pytest.fixture
def compose(dockerd: PrivateDockerd, tmp_path: Any) -> Iterator[Any]:
    project_dir = tmp_path / "compose"
    project_dir.mkdir()
    (project_dir / "docker-compose.yml").write_text(STACK)
    env = dict(os.environ, DOCKER_HOST=dockerd.url, COMPOSE_PROJECT_NAME=PROJECT)

    def run(*args: str) -> None:
        p = subprocess.run(
            ["docker-compose", "-p", PROJECT, *args],
            cwd=project_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, f"docker-compose {' '.join(args)}: {p.stderr[-2000:]}"

    yield run
    run("down", "--timeout", "1")


def test_healerd_makes_the_containers_docker_compose_makes(
    compose: Any,
    healerd: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    api: docker.APIClient,
) -> None:
    compose("up", "-d", "--no-build")
    by_compose = {
        svc: api.inspect_container(c["Id"])
        for svc in ("gw", "hostnet")
        for c in api.containers(filters={"label": f"com.docker.compose.service={svc}"})
    }
    assert set(by_compose) == {"gw", "hostnet"}
    config.write("cdiff.yaml", textwrap.dedent(STACK))
    healerd.start()
    wait_for(
        "both services running under healerd",
        lambda: cluster.converged("gw", 1) and cluster.converged("hostnet", 1),
        timeout=30,
    )
    differences = []
    for svc, theirs in by_compose.items():
        (mine,) = cluster.running(svc)
        ours = api.inspect_container(mine["Id"])
        assert ours["HostConfig"]["RestartPolicy"]["Name"] in ("", "no"), "healerd heals"
        a, b = normalised(theirs, svc), normalised(ours, svc)
        differences += [f"{svc} {k}: compose {a[k]!r}, healerd {b[k]!r}" for k in a if a[k] != b[k]]
    assert not differences, "\n".join(differences)
