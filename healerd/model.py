"""Plain data shared by every layer: desired specs, observed containers, actions.

Nothing here does I/O, so the planner and the tests can build these freely.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum

LABEL_SERVICE = "io.healerd.service"
LABEL_SPEC_HASH = "io.healerd.spec-hash"

# How many hex digits of the spec hash the label carries, and how many the name shows.
SPEC_HASH_LEN = 16
NAME_HASH_LEN = 5


@dataclass(frozen=True)
class PortSpec:
    """One published port; host_port None means the engine picks one."""

    container_port: int
    protocol: str = "tcp"
    host_ip: str = ""
    host_port: int | None = None


@dataclass(frozen=True)
class VolumeSpec:
    """A bind mount or named volume in Compose short syntax terms."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class ServiceSpec:
    """What the user declared for one service, normalised so equal specs hash equal."""

    name: str
    image: str
    replicas: int = 1
    command: tuple[str, ...] | None = None
    entrypoint: tuple[str, ...] | None = None
    environment: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    user: str | None = None
    working_dir: str | None = None
    volumes: tuple[VolumeSpec, ...] = ()
    ports: tuple[PortSpec, ...] = ()
    networks: tuple[str, ...] = ()
    mem_limit: int | None = None
    cpus: float | None = None
    stop_grace_period: float = 10.0
    source_file: str = field(default="", compare=False)

    @property
    def spec_hash(self) -> str:
        """Hash of everything that shapes a container; replicas and origin are left out
        so that scaling or moving a service to another file never replaces containers."""
        data = asdict(self)
        for key in ("name", "replicas", "source_file"):
            data.pop(key)
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:SPEC_HASH_LEN]

    @property
    def has_fixed_host_port(self) -> bool:
        return any(p.host_port is not None for p in self.ports)


class ContainerState(StrEnum):
    """Docker's container states; only RUNNING counts towards the desired replicas."""

    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    RESTARTING = "restarting"
    REMOVING = "removing"
    EXITED = "exited"
    DEAD = "dead"

    @classmethod
    def parse(cls, value: str) -> ContainerState:
        try:
            return cls(value.lower())
        except ValueError:
            return cls.DEAD


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

    @property
    def running(self) -> bool:
        return self.state is ContainerState.RUNNING


@dataclass(frozen=True)
class EngineEvent:
    """One engine event about a healerd-labelled container: only ever a hint."""

    service: str
    container_id: str
    action: str


class ActionKind(StrEnum):
    CREATE = "create"
    REMOVE = "remove"


@dataclass(frozen=True)
class Action:
    """One step towards the desired state; `reason` is what logs and events show."""

    kind: ActionKind
    service: str
    reason: str
    spec: ServiceSpec | None = None
    container: ObservedContainer | None = None

    def describe(self) -> str:
        target = self.container.name if self.container else self.service
        return f"{self.kind.value} {target}: {self.reason}"
