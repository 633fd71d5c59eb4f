"""What the daemon reports about services and containers: one place the API reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServiceStatus:
    name: str
    desired: int = 0
    running: int = 0
    available: int = 0
    up_to_date: int = 0
    restarts: int = 0
    # Converged, Progressing, Degraded, CrashLoopBackOff, ImagePullBackOff, RolloutHalted,
    # EngineUnreachable, Held, Paused, Pending.
    state: str = "Pending"
    reason: str = ""
    since: float = 0.0  # wall clock of the last change of state
    paused: bool = False
    source_file: str = ""
    next_retry: float | None = None  # wall clock, when a backoff ends


@dataclass(frozen=True)
class ContainerStatus:
    id: str
    name: str
    service: str
    state: str  # running, exited, ...
    status: str  # the engine's words: "Up 3 minutes (healthy)"
    health: str | None
    restarts: int
    exit_code: int | None
    created: float  # wall clock
    image: str
    up_to_date: bool
