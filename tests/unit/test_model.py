"""The spec hash is opt-out: every ServiceSpec field shapes the container unless it is
marked as steering healerd (model.STEERING). A new field must be classified here."""

from __future__ import annotations

import dataclasses
from typing import Any

from healerd.model import (
    BuildSpec,
    DeviceRequest,
    HealthcheckSpec,
    Hook,
    LoggingSpec,
    NetworkEndpoint,
    PortSpec,
    PullPolicy,
    SecretMount,
    ServiceSpec,
    Ulimit,
    VolumeSpec,
)

# Fields that steer healerd and must never replace containers when changed.
STEERING_ONLY = {
    "name",
    "update_policy",
    "replicas",
    "pull_policy",
    "auto_update",
    "notify",
    "snapshot",
    "snapshot_keep",
    "unhealthy_grace",
    "priority",
    "update_config",
    "restart_policy",
    "source_file",
    "restart",
    "profiles",
    "depends_on",
    "project",
    "networks_to_create",
    "volumes_to_create",
    "substitutions",
    "pre_stop",
    "pre_update",
}
# Compose's container settings (issue 16), each with a non-default value.
HOST_CHANGED: dict[str, Any] = {
    "container_name": "n",
    "hostname": "h",
    "domainname": "d",
    "privileged": True,
    "read_only": True,
    "init": True,
    "tty": True,
    "stdin_open": True,
    "cap_add": ("NET_ADMIN",),
    "cap_drop": ("ALL",),
    "security_opt": ("no-new-privileges:true",),
    "dns": ("1.1.1.1",),
    "dns_search": ("lan",),
    "dns_opt": ("use-vc",),
    "extra_hosts": ("a:1.2.3.4",),
    "group_add": ("dialout",),
    "devices": ("/dev/null",),
    "device_cgroup_rules": ("c 1:3 rmw",),
    "tmpfs": ("/run",),
    "sysctls": (("net.core.somaxconn", "1024"),),
    "ulimits": (Ulimit("nofile", 1, 2),),
    "shm_size": 1 << 26,
    "stop_signal": "SIGINT",
    "logging": LoggingSpec("local"),
    "pids_limit": 100,
    "mem_reservation": 1 << 26,
    "memswap_limit": -1,
    "cpu_shares": 512,
    "cpuset": "0",
    "oom_score_adj": 100,
    "cpu_period": 100000,
    "cpu_quota": 50000,
    "cpu_rt_period": 1000000,
    "cpu_rt_runtime": 950000,
    "mem_swappiness": 10,
    "oom_kill_disable": True,
    "cgroup_parent": "edge.slice",
    "storage_opt": (("size", "1G"),),
    "uts": "host",
    "mac_address": "02:42:ac:11:00:99",
    "ipc": "host",
    "pid": "host",
    "userns_mode": "host",
    "runtime": "runc",
    "platform": "linux/amd64",
    "network_mode": "host",
    "expose": ("80",),
    "network_aliases": (("n", ("a",)),),
    # Secrets, configs, links, fixed addresses and GPUs (issue 16).
    "secrets": (SecretMount("pw", "/srv/pw", "/run/secrets/pw"),),
    "configs": (SecretMount("app", "/srv/app.conf", "/app"),),
    "secrets_digest": "abc",
    "links": (("db", "database"),),
    "network_endpoints": (NetworkEndpoint("n", "10.0.0.2"),),
    "device_requests": (DeviceRequest(count=-1, capabilities=("gpu",)),),
    # A built image (issue 34): its context's content is in the hash.
    "build": BuildSpec("/srv/app", context_hash="abc"),
}
# Fields that shape the container: a change rolls the service.
SHAPES_CONTAINER = {
    "image",
    "command",
    "entrypoint",
    "environment",
    "env_files",
    "env_digest",
    "labels",
    "user",
    "working_dir",
    "volumes",
    "ports",
    "networks",
    "mem_limit",
    "cpus",
    "stop_grace_period",
    "healthcheck",
    "post_start",
    *HOST_CHANGED,
}
# A non-default value for each container field.
CHANGED: dict[str, Any] = {
    "image": "other:2",
    "command": ("sh",),
    "entrypoint": ("sh", "-c"),
    "environment": (("A", "1"),),
    "env_files": ("x.env",),
    "env_digest": "abc",
    "labels": (("a", "b"),),
    "user": "1000",
    "working_dir": "/w",
    "volumes": (VolumeSpec("/a", "/b"),),
    "ports": (PortSpec(80),),
    "networks": ("n",),
    "mem_limit": 1 << 20,
    "cpus": 0.5,
    "stop_grace_period": 3.0,
    "healthcheck": HealthcheckSpec(test=("CMD", "true")),
    "post_start": (Hook(("touch", "/ready")),),
    **HOST_CHANGED,
}


def test_every_service_field_is_classified_as_container_or_steering() -> None:
    names = {f.name for f in dataclasses.fields(ServiceSpec)}
    unclassified = names - STEERING_ONLY - SHAPES_CONTAINER
    assert not unclassified, f"classify these fields (STEERING in model.py or not): {unclassified}"
    steering = {f.name for f in dataclasses.fields(ServiceSpec) if f.metadata.get("steering")}
    assert steering == STEERING_ONLY


def test_each_container_field_changes_the_hash_and_no_steering_field_does() -> None:
    base = ServiceSpec(name="web", image="img:1")
    for name in SHAPES_CONTAINER:
        changed = dataclasses.replace(base, **{name: CHANGED[name]})
        assert changed.spec_hash != base.spec_hash, name
    steered = dataclasses.replace(
        base,
        replicas=9,
        pull_policy=PullPolicy.ALWAYS,
        unhealthy_grace=5.0,
        priority=3,
        source_file="f",
        pre_stop=(Hook(("sh", "-c", "drain")),),
        pre_update=(Hook(("backup",)),),
    )
    assert steered.spec_hash == base.spec_hash


def test_the_hash_of_an_existing_spec_is_unchanged() -> None:
    """Containers made by earlier versions must not roll on an upgrade."""
    assert ServiceSpec(name="a", image="b").spec_hash == "43bf9e7862831f17"
