"""The parts a service spec and a Compose project are made of: ports, mounts, health
checks, networks and volumes to create, dependencies, rollout and restart pacing.

Plain frozen data, no I/O: the config builds them, the planner and the adapter read them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from healerd.vocabulary import Condition, VolumeKind


class PullPolicy(StrEnum):
    ALWAYS = "always"  # once per spec; a registry away falls back to the local image
    MISSING = "missing"
    NEVER = "never"
    # A service with `build:`: built when its image is missing or was built from another
    # context (healerd.core.images); never pulled. The default of a service that builds.
    BUILD = "build"


class UpdateOrder(StrEnum):
    START_FIRST = "start-first"
    STOP_FIRST = "stop-first"


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
    ipam_options: tuple[tuple[str, str], ...] = ()  # the IPAM driver's own options


@dataclass(frozen=True)
class IpamPool:
    """One address pool of a network's `ipam.config` (Compose's subnet, ip_range,
    gateway, and aux_addresses: host name -> an address the engine must not give)."""

    subnet: str
    ip_range: str = ""
    gateway: str = ""
    aux_addresses: tuple[tuple[str, str], ...] = ()


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


# How long the hooks of one post_start or pre_update run may take, all together; a
# pre_stop's take at most the service's stop_grace_period, and at least PRE_STOP_FLOOR.
HOOK_TIMEOUT = 300.0
PRE_STOP_FLOOR = 1.0


@dataclass(frozen=True)
class Hook:
    """One lifecycle hook (Compose's `post_start` and `pre_stop`, x-healerd's
    `pre_update`): `command` run in a running container of the service through the
    engine (an exec), as `user` (None: the container's), `privileged`, in `working_dir`
    (None: the container's), with `environment` added to the container's own."""

    command: tuple[str, ...]
    user: str | None = None
    privileged: bool = False
    working_dir: str | None = None
    environment: tuple[tuple[str, str], ...] = ()


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
