"""Plain data shared by every layer: desired specs, observed containers, actions.

Nothing here does I/O, so the planner and the tests can build these freely.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from functools import cached_property
from typing import Any

from healerd.vocabulary import AutoUpdate, Condition, Restart, VolumeKind

LABEL_SERVICE = "io.healerd.service"
LABEL_SPEC_HASH = "io.healerd.spec-hash"
# Replacements in this replica's line so far, and how many of them came in quick succession
# (the crash-loop backoff streak): labels, so that a restarted healerd knows them too.
LABEL_RESTARTS = "io.healerd.restarts"
LABEL_CRASH_STREAK = "io.healerd.crash-streak"
# The file that declared the container's service: after a restart, a service declared in
# two files keeps the declaration that was applied. Not part of the hash.
LABEL_SOURCE_FILE = "io.healerd.source-file"
# On a replacement: the id of the failed container it replaced. A stopped container that
# another container of its service names here is history: kept for its logs and exit
# code (`healerctl logs --previous`, `describe`), never counted as a replica.
LABEL_REPLACES = "io.healerd.replaces"
# The image reference the container was created from, as the spec named it: signed, so
# that a container of another image cannot wear a removed container's labels.
LABEL_IMAGE = "io.healerd.image"
# An HMAC with the host key over the container's name and its other io.healerd.* labels:
# what makes a container healerd's (healerd.core.ownership).
LABEL_SIGNATURE = "io.healerd.signature"
OWNER_LABEL_PREFIX = "io.healerd."
SIGNED_LABELS = (
    LABEL_SERVICE,
    LABEL_SPEC_HASH,
    LABEL_RESTARTS,
    LABEL_CRASH_STREAK,
    LABEL_SOURCE_FILE,
    LABEL_REPLACES,
    LABEL_IMAGE,
)

# How many hex digits of the spec hash the label carries, and how many the name shows.
SPEC_HASH_LEN = 16
NAME_HASH_LEN = 5


class PullPolicy(StrEnum):
    ALWAYS = "always"  # once per spec; a registry away falls back to the local image
    MISSING = "missing"
    NEVER = "never"


class UpdateOrder(StrEnum):
    START_FIRST = "start-first"
    STOP_FIRST = "stop-first"


class Health(StrEnum):
    """The engine's health states (a container without a healthcheck has none)."""

    STARTING = "starting"
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


@dataclass(frozen=True)
class PortSpec:
    """One published port; host_port None means the engine picks one."""

    container_port: int
    protocol: str = "tcp"
    host_ip: str = ""
    host_port: int | None = None


@dataclass(frozen=True)
class VolumeSpec:
    """A mount. `kind` SHORT is Compose's short syntax (a bind or a named volume, sent as
    a bind string); BIND, VOLUME or TMPFS a long-syntax mapping. An empty source
    is an anonymous volume (carried to a replacement, issue 14)."""

    source: str
    target: str
    read_only: bool = False
    # The fields below are left out of the spec hash while they keep their defaults, so
    # that a mount written before they existed keeps its hash (see `hashed`).
    mode: str = ""  # short syntax: its access mode as written, when more than ro or rw
    kind: VolumeKind = VolumeKind.SHORT
    propagation: str = ""
    selinux: str = ""
    create_host_path: bool = True
    nocopy: bool = False
    consistency: str = ""
    tmpfs_size: int | None = None
    tmpfs_mode: int | None = None
    recursive: str = ""  # a long-syntax bind's bind.recursive, "" for enabled (issue 31)

    def hashed(self) -> dict[str, Any]:
        """What the spec hash takes of this mount: the original three fields always, any
        other only when it is set."""
        data = asdict(self)
        base = ("source", "target", "read_only")
        return {k: v for k, v in data.items() if k in base or v != VOLUME_DEFAULTS.get(k)}


VOLUME_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(VolumeSpec)}


@dataclass(frozen=True)
class HealthcheckSpec:
    """Compose's healthcheck; None fields keep the engine's (or the image's) defaults."""

    test: tuple[str, ...] = ()
    interval: float | None = None
    timeout: float | None = None
    retries: int | None = None
    start_period: float | None = None
    disable: bool = False


@dataclass(frozen=True)
class NetworkDecl:
    """A network of a Compose project that healerd creates when it is missing (never an
    external one): `name` is the engine's name (`<project>_<key>` unless given)."""

    name: str
    project: str
    key: str
    driver: str = "bridge"
    internal: bool = False
    attachable: bool = False
    labels: tuple[tuple[str, str], ...] = ()
    options: tuple[tuple[str, str], ...] = ()
    enable_ipv6: bool = False
    ipam_driver: str = ""
    ipam_pools: tuple[IpamPool, ...] = ()


@dataclass(frozen=True)
class IpamPool:
    """One address pool of a network's `ipam.config` (Compose's subnet, ip_range,
    gateway)."""

    subnet: str
    ip_range: str = ""
    gateway: str = ""


@dataclass(frozen=True)
class SecretMount:
    """A Compose secret or config, bind-mounted read-only from `source` (a host file) at
    `target`, as `docker compose` mounts file-based ones on one engine."""

    name: str
    source: str
    target: str


@dataclass(frozen=True)
class NetworkEndpoint:
    """What a service asks of its endpoint on one network (engine name) beyond aliases:
    fixed addresses (Compose's ipv4_address, ipv6_address, link_local_ips)."""

    network: str
    ipv4_address: str = ""
    ipv6_address: str = ""
    link_local_ips: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviceRequest:
    """An engine DeviceRequest (Compose's `gpus` and deploy.resources.reservations
    .devices); count -1 is all."""

    driver: str = ""
    count: int | None = None
    device_ids: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class VolumeDecl:
    """A named volume of a Compose project that healerd creates when it is missing, and
    never removes."""

    name: str
    project: str
    key: str
    driver: str = "local"
    labels: tuple[tuple[str, str], ...] = ()
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Dependency:
    """Compose's depends_on entry: `service` must meet `condition` before this service's
    containers are created (service_started, service_healthy or
    service_completed_successfully); `restart`: recreate them when it is replaced."""

    service: str
    condition: Condition = Condition.STARTED
    required: bool = True
    restart: bool = False


@dataclass(frozen=True)
class LoggingSpec:
    """Compose's `logging`: the engine's log driver for the container and its options."""

    driver: str = ""
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Ulimit:
    name: str
    soft: int
    hard: int


@dataclass(frozen=True)
class UpdateConfig:
    """How a spec change rolls out. start-first keeps `replicas` available throughout;
    stop-first (forced by a fixed host port) lets `parallelism` of them be down."""

    parallelism: int = 1
    delay: float = 0.0
    order: UpdateOrder = UpdateOrder.START_FIRST
    # A container counts as available only after running this long (like Swarm's
    # `monitor`): one that starts and dies at once must not replace a healthy one.
    min_ready_seconds: float = 5.0
    progress_deadline: float = 600.0


@dataclass(frozen=True)
class RestartPolicy:
    """Crash-loop backoff per replica: `delay` doubling up to `max_delay`; a container
    that ran for `window` seconds resets it. It never gives up."""

    delay: float = 10.0
    max_delay: float = 300.0
    window: float = 600.0


@dataclass(frozen=True)
class Substitution:
    """One `${NAME}` of a service file and the text it gave (healerd.config.interpolate):
    views show `${NAME}` where the text would be (healerd.config.masking), the container
    gets the text. `field`: where it went (`services.web.command[2]`; an environment or
    label entry by its name); `shown`: false in environment and labels, which no view
    shows (so a value such as `1` there does not mask every 1 elsewhere)."""

    name: str
    value: str = field(repr=False)
    shown: bool = True
    field: str = ""


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
    # What follows steers healerd, not the container: it is not part of the hash.
    pull_policy: PullPolicy = field(default=PullPolicy.MISSING, metadata=STEERING)
    # REGISTRY: follow the tag's digest in its registry, roll out and roll back
    # (healerd.core.updates); NEVER never looks.
    auto_update: AutoUpdate = field(default=AutoUpdate.NEVER, metadata=STEERING)
    unhealthy_grace: float = steering(0.0)
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


@dataclass(frozen=True)
class Threshold:
    """A floor for a host resource: an amount (bytes, inodes) or a percentage of the total."""

    amount: float
    percent: bool = False

    def floor(self, total: int) -> float:
        return total * self.amount / 100.0 if self.percent else self.amount

    def __str__(self) -> str:
        return f"{self.amount:g}%" if self.percent else f"{self.amount:.0f}"


@dataclass(frozen=True)
class NodeLimits:
    """How healerd guards a small host (healerd.yaml); kubelet's eviction defaults."""

    memory_available: Threshold = Threshold(100 * 2**20)
    disk_free: Threshold = Threshold(10.0, percent=True)
    inodes_free: Threshold = Threshold(5.0, percent=True)
    # What a container without mem_limit is assumed to take when room is counted.
    container_memory: int = 32 * 2**20
    # The size assumed for an image to pull whose size is not known.
    pull_disk_margin: int = 500 * 2**20
    engine_calls_per_second: float = 50.0
    engine_call_burst: int = 200


@dataclass(frozen=True)
class DockerTLS:
    """TLS to a `tcp://` engine (healerd.yaml's `docker_tls`): the CA that signed the
    engine's certificate and healerd's client certificate and key, as file paths."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify: bool = True


@dataclass(frozen=True)
class RegistryAuth:
    """The credentials of one registry for a pull (from auth.json): a user and password
    (or an identity token), or the name of a credential helper (`docker-credential-NAME`)
    that the engine adapter asks. Secrets are left out of repr and str."""

    registry: str  # the host as written in image references ("docker.io" for Docker Hub)
    username: str = ""
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)
    helper: str = ""
    # The helper's program, found on PATH and checked when auth.json was read: the one
    # path the engine adapter runs; or why it cannot be run (healerd.config.credhelpers).
    helper_path: str = ""
    helper_error: str = ""


class ContainerState(StrEnum):
    """A container's states; only RUNNING counts towards the desired replicas."""

    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    RESTARTING = "restarting"
    REMOVING = "removing"
    EXITED = "exited"
    DEAD = "dead"


@dataclass(frozen=True)
class ObservedContainer:
    """One healerd-labelled container as a single list call reports it."""

    id: str
    name: str
    service: str
    spec_hash: str
    state: ContainerState
    created: float
    status: str = ""
    image: str = ""
    health: Health | None = None  # None without a healthcheck
    exit_code: int | None = None
    restarts: int = 0
    crash_streak: int = 0
    source_file: str = ""
    replaces: str = ""  # LABEL_REPLACES
    # Anonymous volumes mounted (volume name, mount point): a replacement takes them over.
    anon_volumes: tuple[tuple[str, str], ...] = ()
    # The container whose network namespace this one joined (network_mode service:NAME or
    # container:NAME, as the list call shows HostConfig.NetworkMode), else "".
    network_of: str = ""
    # Every io.healerd.* label as listed, sorted: what its signature is checked against.
    owner_labels: tuple[tuple[str, str], ...] = ()
    # What the list does not say and the loop remembers (healerd.core.observe): when the
    # current (or last) run began, 0 meaning at `created` (made and started at once);
    # whether the kernel's OOM killer ended the last run.
    started: float = 0.0
    oom_killed: bool = False

    @property
    def running(self) -> bool:
        return self.state is ContainerState.RUNNING

    @property
    def run_started(self) -> float:
        """When the run that is going on (or last ended) began: a container restarted in
        place is as old as its creation but has run only since its last start."""
        return self.started or self.created


class EngineAction(StrEnum):
    """What an engine event says happened to a container, in healerd's words: the
    adapter maps the engine's own (Docker's `die`, Podman's `died`: DIED)."""

    CREATED = "created"
    STARTED = "started"
    DIED = "died"  # its process ended (exit_code)
    KILLED = "killed"  # a signal was sent to it (signal)
    STOPPED = "stopped"
    DESTROYED = "destroyed"
    PAUSED = "paused"
    UNPAUSED = "unpaused"
    OOM = "oom"  # the kernel's OOM killer hit it
    HEALTH = "health"  # its health status changed
    RENAMED = "renamed"


@dataclass(frozen=True)
class EngineEvent:
    """One engine event about a healerd-labelled container: only ever a hint."""

    service: str
    container_id: str
    action: EngineAction
    signal: int | None = None  # KILLED: the signal's number
    exit_code: int | None = None  # DIED
    name: str = ""  # the container's name as the event gives it


class ActionKind(StrEnum):
    CREATE = "create"
    REMOVE = "remove"
    # Stop and keep: a failed (unhealthy, paused) container before its replacement takes
    # over its anonymous volumes; it stays as history.
    STOP = "stop"
    # Start the same container again (heal in place): it keeps its id, name, hostname,
    # writable layer, anonymous volumes and network endpoints, and a start is the
    # engine's own speed. `Action.container` is the container.
    START = "start"


@dataclass(frozen=True)
class Action:
    """One step towards the desired state; `reason` is what logs and events show."""

    kind: ActionKind
    service: str
    reason: str
    spec: ServiceSpec | None = None
    container: ObservedContainer | None = None
    # For a create that replaces a failed container: the labels its replacement carries;
    # for a start in place: the counts the container carries on (healerd.core.runs).
    restarts: int = 0
    crash_streak: int = 0
    # A create that replaces `container` in a rollout: remove it once the replacement is
    # made (a heal keeps a failed container as history instead).
    retire: bool = False

    def describe(self) -> str:
        target = self.container.name if self.container else self.service
        return f"{self.kind.value} {target}: {self.reason}"
