"""What the engine reports: a container as one list call shows it, and an engine event
in healerd's words (the adapter maps the engine's own).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Health(StrEnum):
    """The engine's health states (a container without a healthcheck has none)."""

    STARTING = "starting"
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


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
