"""Documents the tests share: Compose stacks, the invalid-config corpus, the schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from healerd.config.schema import SCHEMA_FILE
from healerd.config.yamlload import load_yaml

STACK = """\
name: iot
networks:
  back:
    enable_ipv6: true
    ipam:
      driver: default
      config:
        - {subnet: 10.77.0.0/24, ip_range: 10.77.0.128/25, gateway: 10.77.0.1}
        - {subnet: "fd00:77::/64"}
services:
  db:
    image: busybox
    networks:
      back:
        ipv4_address: 10.77.0.10
        ipv6_address: "fd00:77::10"
        link_local_ips: [169.254.8.8]
      default: {priority: 10}
  web:
    image: busybox
    links: [db, "db:database"]
    depends_on: {db: {condition: service_started}}
  side:
    image: busybox
    network_mode: service:db
  peer:
    image: busybox
    network_mode: container:legacy-vpn
"""


EVERYTHING = """\
services:
  gw:
    image: busybox:1.36
    restart: unless-stopped
    hostname: gateway
    domainname: example.lan
    privileged: true
    read_only: true
    init: true
    tty: true
    stdin_open: true
    cap_add: [NET_ADMIN, SYS_TIME]
    cap_drop: [ALL]
    security_opt: ["no-new-privileges:true", "apparmor:unconfined"]
    dns: 192.168.1.1
    dns_search: [lan, example.org]
    dns_opt: [use-vc]
    extra_hosts: ["broker:10.0.0.5", "gw=host-gateway"]
    group_add: [dialout, 20]
    devices: ["/dev/null:/dev/xnull:rw", /dev/zero]
    device_cgroup_rules: ["c 188:* rmw"]
    tmpfs: [/run, "/tmp:size=64m"]
    sysctls: {net.core.somaxconn: 1024}
    ulimits: {nofile: {soft: 20000, hard: 40000}, nproc: 65535}
    shm_size: 64m
    stop_signal: SIGINT
    logging: {driver: json-file, options: {max-size: 10m, max-file: 3}}
    pids_limit: 200
    mem_reservation: 32m
    memswap_limit: -1
    cpu_shares: 512
    cpuset: "0-1"
    oom_score_adj: -500
    ipc: shareable
    pid: host
    userns_mode: host
    runtime: runc
    platform: linux/amd64
    network_mode: host
    expose: [1883, "5683-5684/udp"]
"""


CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "invalid"


INDEX = CORPUS / "EXPECTED.yaml"


def load_index() -> dict[str, dict[str, Any]]:
    with INDEX.open(encoding="utf-8") as f:
        index: dict[str, dict[str, Any]] = yaml.safe_load(f)
    return index


CASES = load_index()


REPO = Path(__file__).resolve().parents[3]


def validator() -> jsonschema.Draft7Validator:
    schema = json.loads((REPO / SCHEMA_FILE).read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def load(text: str, file: str) -> Any:
    data, errors = load_yaml(text, file)
    assert errors == [], [str(e) for e in errors]
    return data
