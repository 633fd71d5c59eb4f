"""Differential test of the Compose merge (issue 34): every merge docker-compose 1.29.2 can
express (`-f base -f override`, and `extends` in the same file or from another
directory) gives the model `docker-compose config` gives.

Both sides end as healerd's model: `docker-compose config` prints the merged project as
one Compose file, which healerd's checker reads into ServiceSpecs; healerd's own merge
(healerd.config.merge, healerd.config.extends) goes through the same checker. What
carries no meaning is normalised on both sides: the order of mounts, ports, capabilities
and the other lists whose order the engine ignores (1.29.2 sorts some of them), never
the order of `dns` or `command`. Needs no engine (`config` talks to none), only
Debian's docker-compose 1.29.2; Compose v2 merges some fields by other rules
(healerd.config.merge's docstring), so with v2 as the oracle the test is skipped. The
containers these models make are compared with docker-compose's by the engine tests
(test_compose_diff.py); the merged project as a whole, under a running healerd, is the
lead's test_project_dir.py.
"""

from __future__ import annotations

import dataclasses
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from healerd.config import parse_service_text
from healerd.config.envfile import effective_environment
from healerd.config.errors import ConfigError
from healerd.config.keys import At, Context
from healerd.config.merge import merge_documents, strip_tags
from healerd.config.servicefile import FileResult, _document, load_service_file
from healerd.config.yamlload import LineDict, load_yaml
from healerd.model import ServiceSpec
from tests.support import compose_oracle

MERGES = {
    "scalars replaced, command and entrypoint whole": (
        """
        services:
          web:
            image: busybox:1.36
            command: [httpd, -f, -p, "8080"]
            entrypoint: [/bin/sh, -c]
            user: "1000"
            working_dir: /srv
            hostname: one
            stop_signal: SIGINT
            stop_grace_period: 5s
            restart: always
            mem_limit: 64m
            cpus: 0.5
            read_only: true
        """,
        """
        services:
          web:
            image: busybox:1.37
            command: sleep 3600
            entrypoint: /bin/sh
            hostname: two
            mem_limit: 128m
            restart: on-failure:3
            tty: true
            privileged: false
        """,
    ),
    "environment, labels and sysctls as mappings and lists": (
        """
        services:
          web:
            image: busybox
            environment: [A=1, B=2, "C=x=y"]
            labels: {team: a, tier: web}
            sysctls: [net.core.somaxconn=1024]
          db:
            image: busybox
            environment: {A: 1, B: two}
            labels: [x=1, y=2]
        """,
        """
        services:
          web:
            environment: {B: 3, D: ""}
            labels: [tier=edge, extra=1]
            sysctls: {net.ipv4.tcp_syncookies: 0, net.core.somaxconn: 2048}
          db:
            environment: [B=three, C=4]
            labels: {y: 3}
        """,
    ),
    "mounts and devices by target": (
        """
        services:
          web:
            image: busybox
            volumes:
              - ./data:/data
              - cache:/cache:ro
              - /var/log
              - {type: bind, source: ./conf, target: /etc/app, read_only: true}
              - {type: tmpfs, target: /scratch}
            devices: ["/dev/null:/dev/xnull", "/dev/zero:/dev/xzero:r"]
        volumes:
          cache: {}
        """,
        """
        services:
          web:
            volumes:
              - other:/data
              - ./logs:/var/log:rw
              - {type: volume, source: cache, target: /cache}
              - /extra
            devices: ["/dev/random:/dev/xnull:rw", "/dev/urandom:/dev/xrandom"]
        volumes:
          other: {}
        """,
    ),
    "ports by address, target, published port and protocol": (
        """
        services:
          web:
            image: busybox
            ports:
              - "8080:80"
              - "127.0.0.1:8443:443"
              - "9000"
              - {target: 53, published: 5353, protocol: udp}
        """,
        """
        services:
          web:
            ports:
              - "8080:80"
              - "8081:80"
              - "127.0.0.1:8443:443/udp"
              - target: 53
                published: 5353
                protocol: udp
              - {target: 22, published: 2222}
        """,
    ),
    "lists: one copy each, or appended": (
        """
        services:
          web:
            image: busybox
            cap_add: [NET_ADMIN, SYS_TIME]
            cap_drop: [MKNOD]
            security_opt: ["no-new-privileges:true"]
            expose: ["1883", "5683/udp"]
            device_cgroup_rules: ["c 1:3 rmw"]
            dns: 1.1.1.1
            dns_search: [lan]
            tmpfs: /run
            profiles: [a]
        """,
        """
        services:
          web:
            cap_add: [SYS_TIME, NET_RAW]
            cap_drop: [MKNOD, AUDIT_WRITE]
            security_opt: ["no-new-privileges:true", "apparmor=unconfined"]
            expose: ["1883", "8883"]
            device_cgroup_rules: ["c 1:3 rmw", "c 1:5 r"]
            dns: [8.8.8.8, 9.9.9.9]
            dns_search: home
            tmpfs: ["/scratch:size=64m"]
            profiles: [b, a]
        """,
    ),
    "dns_opt and group_add replaced, as 1.29.2 does": (
        """
        services:
          web:
            image: busybox
            dns_opt: [use-vc]
            group_add: ["20"]
        """,
        """
        services:
          web:
            dns_opt: [ndots:2]
            group_add: ["30", audio]
        """,
    ),
    "extra_hosts and ulimits by name": (
        """
        services:
          web:
            image: busybox
            extra_hosts: ["broker:192.0.2.10", "db:192.0.2.11"]
            ulimits: {nofile: {soft: 1024, hard: 4096}, nproc: 4096}
        """,
        """
        services:
          web:
            extra_hosts: {broker: 192.0.2.20, cache: 192.0.2.30}
            ulimits: {nofile: 2048, memlock: {soft: -1, hard: -1}}
        """,
    ),
    "networks, aliases, addresses and network_mode": (
        """
        services:
          web:
            image: busybox
            networks:
              front: {aliases: [www]}
              back:
          db:
            image: busybox
            networks: [back]
          host:
            image: busybox
            network_mode: host
        networks:
          front: {}
          back:
            ipam: {config: [{subnet: 10.213.78.0/24}]}
        """,
        """
        services:
          web:
            networks:
              front: {aliases: [web2]}
              back: {ipv4_address: 10.213.78.5}
          db:
            networks: {front: {}}
          host:
            network_mode: none
        networks:
          front: {internal: true}
        """,
    ),
    "depends_on, links, secrets and configs": (
        """
        services:
          web:
            image: busybox
            depends_on: [db]
            links: [db, "db:database"]
            secrets: [token, {source: key, target: /etc/key}]
            configs: [conf]
          db:
            image: busybox
            healthcheck: {test: [CMD, "true"]}
          cache:
            image: busybox
        secrets:
          token: {file: ./token.txt}
          key: {file: ./key.txt}
        configs:
          conf: {file: ./key.txt}
        """,
        """
        services:
          web:
            depends_on:
              db: {condition: service_healthy}
              cache: {condition: service_started}
            links: ["cache:database"]
            secrets: [{source: token, target: /etc/token}]
            configs: [{source: conf, target: /etc/conf}]
        secrets:
          key: {file: ./other-key.txt}
        """,
    ),
    # 1.29.2 refuses `disable: true` beside the keys it merges onto: healerd's disable
    # drops them (test_compose_merge.py).
    "healthcheck keys, test replaced; logging by driver": (
        """
        services:
          web:
            image: busybox
            healthcheck: {test: [CMD, a], interval: 5s, retries: 3}
            logging: {driver: json-file, options: {max-size: 10m, max-file: "3"}}
          db:
            image: busybox
            logging: {driver: json-file, options: {max-size: 10m}}
          job:
            image: busybox
            healthcheck: {test: [CMD, a]}
        """,
        """
        services:
          web:
            healthcheck: {test: [CMD-SHELL, "exit 0"], timeout: 2s}
            logging: {options: {max-file: "5"}}
          db:
            logging: {driver: local, options: {max-size: 1m}}
          job:
            healthcheck: {disable: true}
        """,
    ),
    "resources, namespaces and the other settings": (
        """
        services:
          web:
            image: busybox
            deploy:
              replicas: 2
              resources:
                limits: {cpus: "0.5", memory: 64m}
                reservations: {memory: 32m}
            pids_limit: 100
            shm_size: 32m
            cpu_shares: 512
            cpuset: "0"
            ipc: shareable
            init: true
            domainname: example.lan
            oom_score_adj: 100
            storage_opt: {size: 1G}
            mem_swappiness: 10
            stdin_open: true
          solo:
            image: busybox
            container_name: solo-one
            mac_address: "02:42:ac:11:00:02"
            pid: host
            userns_mode: host
            runtime: runc
        """,
        """
        services:
          web:
            deploy:
              resources:
                limits: {memory: 128m}
            pids_limit: 200
            cpu_rt_runtime: 0
            memswap_limit: 512m
            oom_kill_disable: true
            cgroup_parent: /custom
            storage_opt: {size: 2G, other: "1"}
          solo:
            container_name: solo-two
            platform: linux/amd64
        """,
    ),
    "env_file, new services and top-level declarations": (
        """
        services:
          web:
            image: busybox
            env_file: [a.env]
        volumes:
          data: {labels: {a: "1"}}
          kept: {}
        networks:
          net1: {driver: bridge}
        """,
        """
        services:
          web:
            env_file: b.env
          extra:
            image: busybox
            volumes: [data:/data, kept:/kept]
            networks: [net1, net2]
        volumes:
          data: {name: shared-data}
        networks:
          net1: {internal: true}
          net2: {}
        """,
    ),
}

EXTENDS = {
    "same file, a chain": """
        services:
          base:
            image: busybox
            environment: {TZ: UTC, LEVEL: info}
            ports: ["80"]
            volumes: [./data:/data]
            cap_add: [NET_ADMIN]
          mid:
            extends: base
            environment: [LEVEL=debug]
            ports: ["127.0.0.1::90"]
            command: [sleep, "1"]
          web:
            extends: {service: mid}
            volumes: [other:/data]
            user: "1000"
        volumes:
          other: {}
        """,
    "from a file in another directory": """
        services:
          web:
            extends: {file: lib/common.yaml, service: common}
            environment: {MODE: edge}
            ports: ["8081:81"]
          worker:
            extends: {file: ./lib/common.yaml, service: worker}
        """,
}
COMMON = """
services:
  common:
    image: busybox
    env_file: common.env
    environment: {MODE: lab, TZ: UTC}
    volumes: [./state:/state, "../shared:/shared:ro"]
    ports: ["80"]
  worker:
    extends: common
    command: [sleep, "2"]
"""

# Order the engine ignores (1.29.2 sorts mounts and ports by target, capabilities, ...).
_UNORDERED = (
    "volumes", "ports", "cap_add", "cap_drop", "security_opt", "expose", "devices",
    "device_cgroup_rules", "secrets", "configs", "links", "extra_hosts", "profiles",
    "depends_on", "networks", "network_aliases", "network_endpoints", "ulimits",
    "volumes_to_create", "networks_to_create",
)  # fmt: skip


@pytest.fixture(autouse=True)
def _compose_v1() -> None:
    try:
        major = compose_oracle.major()
    except (OSError, RuntimeError) as exc:
        pytest.skip(f"no docker-compose: {exc}")
    if major != 1:
        pytest.skip("the merge follows docker-compose 1.29.2 where Compose v2 differs")


def _project(tmp_path: Path) -> Path:
    """Files the services name: env files, secrets, bind sources."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, text in (("a.env", "A=1\nB=2\n"), ("b.env", "B=3\n"), ("token.txt", "t\n")):
        (tmp_path / name).write_text(text)
    for name in ("key.txt", "other-key.txt"):
        (tmp_path / name).write_text("k\n")
    return tmp_path


def _oracle(directory: Path, files: list[str]) -> FileResult:
    flags = [arg for f in files for arg in ("-f", f)]
    p = subprocess.run(
        [*compose_oracle.command(), "--project-directory", str(directory), *flags, "config"],
        cwd=directory, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, f"docker-compose config: {p.stderr[-2000:]}"
    return parse_service_text(p.stdout, str(directory / "p.yaml"), env={})


def _merged(directory: Path, files: list[str]) -> FileResult:
    errors: list[ConfigError] = []
    context = Context(directory)
    merged: LineDict | None = None
    for name in files:
        data, found = load_yaml((directory / name).read_text(), name)
        assert not found and isinstance(data, LineDict), found
        at = At(errors, name, "", None, None, context)
        merged = data if merged is None else merge_documents(merged, data, at)
    strip_tags(merged)
    specs, _ = _document(merged, At(errors, str(directory / "p.yaml"), "", None, None, context))
    return FileResult("p.yaml", None if errors else specs, tuple(errors))


def _model(result: FileResult) -> dict[str, dict[str, Any]]:
    assert result.services is not None, "\n".join(map(str, result.errors))
    return {name: _normalised(spec) for name, spec in result.services.items()}


def _normalised(spec: ServiceSpec) -> dict[str, Any]:
    """`docker-compose config` writes the env files' values into `environment`."""
    out = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.compare}
    out["environment"] = effective_environment(spec, strict_modes=False)
    out["env_files"], out["env_digest"] = (), ""
    for key in _UNORDERED:
        out[key] = tuple(sorted(out[key], key=repr))
    out["network_aliases"] = tuple((n, tuple(sorted(a))) for n, a in out["network_aliases"])
    return out


def _differences(theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    assert sorted(theirs) == sorted(ours)
    return [
        f"{svc}.{key}: docker-compose {theirs[svc][key]!r}, healerd {ours[svc][key]!r}"
        for svc in theirs
        for key in theirs[svc]
        if theirs[svc][key] != ours[svc][key]
    ]


@pytest.mark.parametrize("case", sorted(MERGES))
def test_an_override_file_merges_as_docker_compose_merges_it(case: str, tmp_path: Path) -> None:
    base, override = MERGES[case]
    directory = _project(tmp_path)
    (directory / "base.yaml").write_text(textwrap.dedent(base))
    (directory / "override.yaml").write_text(textwrap.dedent(override))
    files = ["base.yaml", "override.yaml"]
    theirs, ours = _model(_oracle(directory, files)), _model(_merged(directory, files))
    assert not _differences(theirs, ours), "\n".join(_differences(theirs, ours))


@pytest.mark.parametrize("case", sorted(EXTENDS))
def test_extends_resolves_as_docker_compose_resolves_it(case: str, tmp_path: Path) -> None:
    directory = _project(tmp_path / "app")
    (directory / "lib").mkdir(parents=True)
    (directory / "lib" / "common.yaml").write_text(COMMON)
    (directory / "lib" / "common.env").write_text("FROM_FILE=1\n")
    main = directory / "p.yaml"
    main.write_text(textwrap.dedent(EXTENDS[case]))
    theirs = _model(_oracle(directory, ["p.yaml"]))
    ours = _model(load_service_file(main))
    assert not _differences(theirs, ours), "\n".join(_differences(theirs, ours))
