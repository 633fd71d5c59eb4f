"""A service as the user declared it, normalised so that equal specs hash equal: which
fields enter the spec hash (all but the STEERING ones) and the hash itself.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from typing import Any

from healerd.model.build import BuildSpec
from healerd.model.labels import SPEC_HASH_LEN
from healerd.model.parts import (
    Dependency,
    DeviceRequest,
    HealthcheckSpec,
    Hook,
    LoggingSpec,
    NetworkDecl,
    NetworkEndpoint,
    PortSpec,
    PullPolicy,
    RestartPolicy,
    SecretMount,
    Substitution,
    Ulimit,
    UpdateConfig,
    UpdateOrder,
    VolumeDecl,
    VolumeSpec,
)
from healerd.model.updatepolicy import UpdatePolicy
from healerd.vocabulary import AutoUpdate, Restart

# A ServiceSpec field that steers healerd rather than shaping the container is marked
# with STEERING; every other field enters the spec hash (when it differs from its
# default, so that a new optional field never replaces running containers). Opt-out, not
# opt-in: a new field forgotten here rolls containers instead of silently never rolling
# them, and tests/unit/test_model.py fails until it is classified.
STEERING: dict[str, object] = {"steering": True}


def steering(default: object) -> Any:
    """A field that is not part of the spec hash (replicas, rollout and restart pacing)."""
    return field(default=default, metadata=STEERING)


@dataclass(frozen=True)
class ServiceSpec:
    """What the user declared for one service, normalised so equal specs hash equal."""

    name: str = field(metadata=STEERING)  # in the container's name and labels already
    image: str
    # Compose's container_name: the one replica's fixed name (else <service>-<tag>-<random>).
    container_name: str | None = None
    replicas: int = steering(1)
    command: tuple[str, ...] | None = None
    entrypoint: tuple[str, ...] | None = None
    environment: tuple[tuple[str, str], ...] = ()
    env_files: tuple[str, ...] = ()
    # sha256 of the env files' values (read when the config is loaded): part of the hash,
    # so that editing an env file rolls the containers, while no value sits in the spec.
    env_digest: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    user: str | None = None
    working_dir: str | None = None
    volumes: tuple[VolumeSpec, ...] = ()
    ports: tuple[PortSpec, ...] = ()
    networks: tuple[str, ...] = ()  # the engine's names, the first the primary one
    # Aliases declared per network (engine name -> aliases); the service name is always
    # an alias on every user-defined network, as in Compose.
    network_aliases: tuple[tuple[str, tuple[str, ...]], ...] = ()
    mem_limit: int | None = None
    cpus: float | None = None
    stop_grace_period: float = 10.0
    healthcheck: HealthcheckSpec | None = None
    # Compose's container settings, passed to the engine as `docker compose` passes them
    # (healerd.config.hostopts); each default is "not set", so none changes the hash of a
    # service that does not use it.
    hostname: str | None = None
    domainname: str | None = None
    privileged: bool = False
    read_only: bool = False
    init: bool | None = None
    tty: bool = False
    stdin_open: bool = False
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    dns: tuple[str, ...] = ()
    dns_search: tuple[str, ...] = ()
    dns_opt: tuple[str, ...] = ()
    extra_hosts: tuple[str, ...] = ()  # host:ip
    group_add: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()  # host[:container[:permissions]]
    device_cgroup_rules: tuple[str, ...] = ()
    tmpfs: tuple[str, ...] = ()  # /path[:options]
    sysctls: tuple[tuple[str, str], ...] = ()
    ulimits: tuple[Ulimit, ...] = ()
    shm_size: int | None = None
    stop_signal: str | None = None
    logging: LoggingSpec | None = None
    pids_limit: int | None = None
    mem_reservation: int | None = None
    memswap_limit: int | None = None
    cpu_shares: int | None = None
    cpuset: str | None = None
    oom_score_adj: int | None = None
    # Compose's finer CPU and memory knobs (microseconds, a percentage, a flag).
    cpu_period: int | None = None
    cpu_quota: int | None = None
    cpu_rt_period: int | None = None
    cpu_rt_runtime: int | None = None
    mem_swappiness: int | None = None
    oom_kill_disable: bool = False
    cgroup_parent: str | None = None
    storage_opt: tuple[tuple[str, str], ...] = ()
    uts: str | None = None
    mac_address: str | None = None
    ipc: str | None = None
    pid: str | None = None
    userns_mode: str | None = None
    runtime: str | None = None
    platform: str | None = None
    network_mode: str | None = None
    expose: tuple[str, ...] = ()  # port[/protocol]
    # Compose's secrets and configs (bind mounts of host files), with a digest of the
    # files' contents: editing one rolls the containers, as editing an env file does.
    secrets: tuple[SecretMount, ...] = ()
    configs: tuple[SecretMount, ...] = ()
    secrets_digest: str = ""
    # Compose's links: (service, alias) pairs, resolved by the linking container only.
    links: tuple[tuple[str, str], ...] = ()
    network_endpoints: tuple[NetworkEndpoint, ...] = ()
    device_requests: tuple[DeviceRequest, ...] = ()
    # Compose's post_start hooks, run in each container healerd starts (healerd.core.hooks).
    # In the hash, as Compose hashes them: they run once, when a container starts, so a
    # container started before an edit never ran the new ones; a replacement does.
    post_start: tuple[Hook, ...] = ()
    # Compose's build: the image (`image`, else <project>-<service>) is built from it
    # (healerd.core.images); its context hash is in the spec hash, so a changed context
    # rolls the service out on the new image.
    build: BuildSpec | None = None
    # What follows steers healerd, not the container: it is not part of the hash.
    pull_policy: PullPolicy = field(default=PullPolicy.MISSING, metadata=STEERING)
    # REGISTRY: follow the tag's digest in its registry, roll out and roll back
    # (healerd.core.updates); NEVER never looks.
    auto_update: AutoUpdate = field(default=AutoUpdate.NEVER, metadata=STEERING)
    # When an update may start (x-healerd's update_window, update_delay, update_lock).
    update_policy: UpdatePolicy = field(default_factory=UpdatePolicy, metadata=STEERING)
    unhealthy_grace: float = steering(0.0)
    # x-healerd's notify: false mutes the service's notifications (healerd.yaml's targets).
    notify: bool = steering(True)
    # x-healerd's snapshot: the engine's names of the volumes copied before a new
    # digest starts and copied back at its rollback (healerd.daemon.snapshots), and how
    # many of those copies are kept. The container is the same either way.
    snapshot: tuple[str, ...] = steering(())
    snapshot_keep: int = steering(2)
    # Compose's pre_stop hooks, run before healerd stops or removes a running container.
    # Not in the hash, unlike Compose's: they are read from the declaration in force when
    # a container is stopped, so an edit reaches every running container at its next
    # stop, and no container is restarted only to change what runs before its stop.
    pre_stop: tuple[Hook, ...] = steering(())
    # x-healerd's pre_update: run in the service's oldest running container before an
    # image update rolls out; one that fails postpones the update (healerd.core.hooks).
    pre_update: tuple[Hook, ...] = steering(())
    # When not every container fits the host's headroom, higher priorities go first.
    priority: int = steering(0)
    # Compose's `restart` (healerd.core.jobs): None, always and unless-stopped replace
    # every container that stops; "no" and on-failure[:N] make a run-once service.
    # Docker's own restart policy stays "no" while healerd runs (core/handoff.py).
    restart: Restart | None = field(default=None, metadata=STEERING)
    # Compose's profiles: the service runs only when COMPOSE_PROFILES names one of them.
    profiles: tuple[str, ...] = steering(())
    # The Compose project (the file) and what it declares that this service uses: made
    # when missing, before the container (their names are in the fields above already).
    depends_on: tuple[Dependency, ...] = steering(())
    project: str = steering("")
    networks_to_create: tuple[NetworkDecl, ...] = steering(())
    volumes_to_create: tuple[VolumeDecl, ...] = steering(())
    update_config: UpdateConfig = field(default_factory=UpdateConfig, metadata=STEERING)
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy, metadata=STEERING)
    source_file: str = field(default="", compare=False, metadata=STEERING)
    # The file's ${NAME}s and their values: what views mask. Not compared: the values
    # themselves are in the fields above.
    substitutions: tuple[Substitution, ...] = field(
        default=(), compare=False, repr=False, metadata=STEERING
    )

    @cached_property
    def spec_hash(self) -> str:
        """Hash of what shapes a container; replicas, rollout and restart settings and the
        origin are left out, so changing them never replaces containers."""
        data = {
            f.name: asdict(self)[f.name]
            for f in fields(self)
            if not f.metadata.get("steering") and getattr(self, f.name) != f.default
        }
        if "volumes" in data:
            data["volumes"] = [v.hashed() for v in self.volumes]
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:SPEC_HASH_LEN]

    @property
    def update_order(self) -> UpdateOrder:
        """Two containers cannot hold one fixed host port, nor one container_name: such
        services go stop-first."""
        if self.has_fixed_host_port or self.container_name:
            return UpdateOrder.STOP_FIRST
        return self.update_config.order

    @property
    def has_fixed_host_port(self) -> bool:
        return any(p.host_port is not None for p in self.ports)
