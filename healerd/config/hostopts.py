"""The rows of Compose's container settings (issue 16): keys a Compose file gives a
service that healerd passes to the engine as `docker compose` does. Their checks are in
healerd.config.hostchecks; the engine side is healerd.engine.request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from healerd.config import hostchecks as hc
from healerd.config.keys import MAX_ENTRIES, Check, Key
from healerd.config.units import SIZE_PATTERN

_STRINGS: Mapping[str, Any] = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "maxItems": MAX_ENTRIES,
}
_STRING_OR_STRINGS: Mapping[str, Any] = {"anyOf": [{"type": "string", "minLength": 1}, _STRINGS]}
_SIZE: Mapping[str, Any] = {
    "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": f"^{SIZE_PATTERN}$"}]
}
_PAIRS: Mapping[str, Any] = {
    "anyOf": [
        {
            "type": "object",
            "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
        },
        {"type": "array", "items": {"type": "string", "pattern": "^[^=]+="}},
    ]
}


def _key(
    name: str,
    type: str,
    doc: str,
    example: str,
    check: Check,
    schema: Mapping[str, Any],
    default: Any = None,
) -> Key:
    return Key(name, type, doc, example, schema, default, check, compose=name)


def _flag(name: str, doc: str) -> Key:
    return _key(name, "boolean", doc, "true", hc.flag, {"type": "boolean"}, False)


HOST_FIELDS: tuple[Key, ...] = (
    _key("profiles", "list of names", "Compose's profiles: the service runs only when "
         "COMPOSE_PROFILES (in the file's .env or healerd's environment, comma-separated) "
         "names one of them, as with `docker compose --profile`; else it is not declared.",
         "[debug]", hc.string_list, _STRINGS, ()),
    _key("container_name", "container name", "The fixed name of the service's one "
         "container (replicas 0 or 1), instead of <service>-<tag>-<random>. A replacement "
         "takes the name over: the failed or old container is renamed aside, the new one "
         "created, then the old one removed (no history is kept); rolling updates are "
         "stop-first.", "mosquitto", hc.container_name, {"type": "string"}),
    _key("hostname", "host name", "The container's host name. Absent: its id.", "gateway",
         hc.hostname, {"type": "string"}),
    _key("domainname", "domain name", "The container's NIS domain name.", "example.lan",
         hc.hostname, {"type": "string"}),
    _flag("privileged", "Run with every capability and every device (as `docker run "
          "--privileged`)."),
    _flag("read_only", "Mount the container's root filesystem read-only."),
    _key("init", "boolean", "Run an init process as PID 1 that reaps zombies and forwards "
         "signals.", "true", hc.optional_flag, {"type": "boolean"}),
    _flag("tty", "Allocate a terminal."),
    _flag("stdin_open", "Keep standard input open."),
    _key("cap_add", "list of capabilities", "Capabilities to add (NET_ADMIN, SYS_TIME, ALL).",
         "[NET_ADMIN]", hc.capabilities, _STRINGS, ()),
    _key("cap_drop", "list of capabilities", "Capabilities to drop.", "[ALL]",
         hc.capabilities, _STRINGS, ()),
    _key("security_opt", "list of strings", "Security options (label:..., apparmor:..., "
         "seccomp:..., no-new-privileges:true).", "[no-new-privileges:true]",
         hc.string_list, _STRINGS, ()),
    _key("dns", "IP address, or list", "DNS servers.", "[192.168.1.1]", hc.dns_servers,
         _STRING_OR_STRINGS, ()),
    _key("dns_search", "domain, or list", "DNS search domains.", "[lan]", hc.strings,
         _STRING_OR_STRINGS, ()),
    _key("dns_opt", "list of strings", "resolv.conf options.", "[use-vc]", hc.string_list,
         _STRINGS, ()),
    _key("extra_hosts", "list of host:ip, or mapping", "Lines added to /etc/hosts "
         "(host=ip also works; ip may be host-gateway).", '["broker:10.0.0.5"]',
         hc.extra_hosts, {"anyOf": [_STRINGS, {"type": "object"}]}, ()),
    _key("group_add", "list of groups", "Extra groups (names or ids) for the container's "
         "user.", "[dialout]", hc.string_list, {"type": "array"}, ()),
    _key("devices", "list of HOST[:CONTAINER[:rwm]]", "Host devices to give the container.",
         '["/dev/ttyUSB0:/dev/ttyUSB0"]', hc.devices, _STRINGS, ()),
    _key("device_cgroup_rules", "list of strings", "Device cgroup rules ('c 188:* rmw').",
         '["c 188:* rmw"]', hc.string_list, _STRINGS, ()),
    _key("tmpfs", "path, or list of path[:options]", "tmpfs mounts.", "[/run, /tmp:size=64m]",
         hc.tmpfs, _STRING_OR_STRINGS, ()),
    _key("sysctls", "mapping, or list of key=value", "Kernel parameters in the container's "
         "namespaces.", "{net.ipv4.ip_forward: 1}", hc.sysctls, _PAIRS, ()),
    _key("ulimits", "mapping", "Resource limits: a number, or soft and hard.",
         "{nofile: {soft: 20000, hard: 40000}, nproc: 65535}", hc.ulimits, {"type": "object"},
         ()),
    _key("shm_size", "size", "Size of /dev/shm.", "256m", hc.size, _SIZE),
    _key("stop_signal", "signal", "The signal that stops the container (then, after "
         "stop_grace_period, SIGKILL).", "SIGINT", hc.stop_signal,
         {"type": ["string", "integer"]}),
    _key("logging", "mapping", "The engine's log driver for the container and its options.",
         "{driver: json-file, options: {max-size: 10m, max-file: '3'}}", hc.logging,
         {"type": "object", "properties": {"driver": {"type": "string"}, "options": _PAIRS},
          "additionalProperties": False}),
    _key("pids_limit", "integer >= -1", "Most processes in the container; -1: no limit.",
         "200", hc.pids_limit, {"type": "integer", "minimum": -1}),
    _key("mem_reservation", "size", "Memory soft limit.", "128m", hc.size, _SIZE),
    _key("memswap_limit", "size, or -1", "Memory plus swap limit; -1: unlimited swap.",
         "512m", hc.swap_size, {"anyOf": [_SIZE, {"const": -1}]}),
    _key("cpu_shares", "integer 2 to 262144", "Relative CPU weight (1024 is the default).",
         "512", hc.cpu_shares, {"type": "integer", "minimum": 2, "maximum": 262144}),
    _key("cpuset", "CPU list", "CPUs the container may use.", '"0-1"', hc.cpuset,
         {"type": "string"}),
    _key("oom_score_adj", "integer -1000 to 1000", "How willingly the kernel kills it when "
         "memory runs out.", "-500", hc.oom_score_adj,
         {"type": "integer", "minimum": -1000, "maximum": 1000}),
    _key("cpu_period", "integer (µs)", "The CFS period (with cpu_quota).", "100000",
         hc.microseconds, {"type": "integer", "minimum": 0}),
    _key("cpu_quota", "integer (µs)", "CPU time per cpu_period (cpus sets both).", "50000",
         hc.microseconds, {"type": "integer", "minimum": 0}),
    _key("cpu_rt_period", "integer (µs)", "Real-time scheduler period.", "1000000",
         hc.microseconds, {"type": "integer", "minimum": 0}),
    _key("cpu_rt_runtime", "integer (µs)", "Real-time runtime per cpu_rt_period.", "950000",
         hc.microseconds, {"type": "integer", "minimum": 0}),
    _key("mem_swappiness", "integer 0 to 100", "How willingly the container's memory is "
         "swapped.", "10", hc.swappiness, {"type": "integer", "minimum": 0, "maximum": 100}),
    _flag("oom_kill_disable", "Do not OOM-kill the container (with mem_limit only: "
          "otherwise it can hang the host)."),
    _key("cgroup_parent", "cgroup path", "The parent cgroup of the container's.",
         "edge.slice", hc.text, {"type": "string"}),
    _key("storage_opt", "mapping", "Storage driver options (size=1G on overlay2 with "
         "pquota).", "{size: 1G}", hc.sysctls, _PAIRS, ()),
    _key("uts", "host", "The UTS namespace: host shares the host's host name.", "host",
         hc.uts, {"const": "host"}),
    _key("mac_address", "MAC address", "The container's MAC address (one replica).",
         '"02:42:ac:11:00:02"', hc.mac_address, {"type": "string"}),
    _key("ipc", "host | private | shareable | none | container:NAME", "IPC namespace.",
         "host", hc.namespace, {"type": "string"}),
    _key("pid", "host | container:NAME", "PID namespace.", "host", hc.namespace,
         {"type": "string"}),
    _key("userns_mode", "host", "User namespace mode.", "host", hc.namespace,
         {"type": "string"}),
    _key("runtime", "string", "The OCI runtime (runc, nvidia, ...).", "runc", hc.text,
         {"type": "string"}),
    _key("platform", "os/arch[/variant]", "The image platform to run.", "linux/arm64",
         hc.text, {"type": "string"}),
    _key("network_mode", "host | none | bridge | default | service:NAME | container:NAME",
         "host: the host's network stack (ports are not published); none: no network; "
         "service:NAME: the network namespace of a running container of service NAME of "
         "this file (a dependency, service_started; the container is recreated when that "
         "one is replaced); container:NAME: a named container's. Cannot be combined with "
         "networks (nor, sharing a namespace, with ports, expose, hostname, dns, "
         "extra_hosts or links).", "host", hc.network_mode,
         {"anyOf": [{"enum": ["host", "none", "bridge", "default"]},
                    {"type": "string",
                     "pattern": "^(service|container):[a-zA-Z0-9][a-zA-Z0-9_.-]*$"}]}),
    _key("expose", "list of PORT[/PROTOCOL]", "Ports the container listens on, without "
         "publishing them.", '["1883", "8883/tcp"]', hc.expose,
         {"type": "array", "items": {"type": ["string", "integer"]}}, ()),
    _key("depends_on", "list of services, or mapping", "Services whose containers must be "
         "running (service_started), healthy (service_healthy) or exited with code 0 (a "
         "run-once job, service_completed_successfully) before this service's are "
         "created; required: false lets a missing one pass. Until then the service is "
         "Waiting, with the reason; others go on.",
         "{db: {condition: service_healthy, required: false}}",
         hc.depends_on, {"type": ["array", "object"]}, ()),
    _key("restart", 'always | unless-stopped | on-failure[:N] | "no"', "Compose's restart, "
         "with healerd as the one healer (Docker's own policy stays no while healerd "
         "runs). always and unless-stopped: every container that stops or fails is replaced. "
         "on-failure[:N]: "
         "only after a non-zero exit, at most N times; then the service is Failed. \"no\": "
         "a run-once job, left exited (Completed with exit code 0, else Failed) and run "
         "again when its spec changes. With on-failure and no, health never replaces a "
         "container.", "on-failure:3", hc.restart,
         {"anyOf": [{"enum": list(hc.RESTARTS)}, {"type": "string",
                    "pattern": "^on-failure:[1-9][0-9]{0,5}$"}, {"const": False}]}),
)  # fmt: skip
