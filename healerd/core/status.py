"""What the daemon reports about services and containers: one place the API reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from healerd.core.lifecycle import ServiceState
from healerd.core.pressure import Pressure
from healerd.host import HostSample, SelfSample
from healerd.model import NodeLimits


@dataclass
class ServiceStatus:
    name: str
    desired: int = 0
    running: int = 0
    available: int = 0
    up_to_date: int = 0
    restarts: int = 0
    state: ServiceState = ServiceState.PENDING
    reason: str = ""
    since: float = 0.0  # wall clock of the last change of state
    paused: bool = False
    source_file: str = ""
    next_retry: float | None = None  # wall clock, when a backoff ends


def converged_counts(desired: int, running: int, up_to_date: int, available: int) -> bool:
    """The one rule of convergence, on a service's counts: what runs is what is
    declared, every replica up to date and available. `decide` (healerd.core.outcome)
    says Converged by it; `is_converged` reads a status by it."""
    return running == desired and up_to_date == desired and available >= desired


def is_converged(st: ServiceStatus) -> bool:
    """Whether a status says converged (status --check, wait, metrics, the API, the
    summary line): Converged by `converged_counts`, or a run-once service that did its
    job (Completed: what was declared); never while paused."""
    if st.paused:
        return False
    if st.state is ServiceState.COMPLETED:
        return True
    return st.state is ServiceState.CONVERGED and converged_counts(
        st.desired, st.running, st.up_to_date, st.available
    )


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


@dataclass(frozen=True)
class NodeReport:
    """The host as healerd sees it, and healerd's own footprint (status and metrics)."""

    sample: HostSample
    pressure: Pressure
    limits: NodeLimits
    me: SelfSample
    # Services whose creates wait for room, with the reason.
    waiting: dict[str, str] = field(default_factory=dict)
    engine_calls: int = 0
    engine_calls_throttled: int = 0
    engine_throttled_seconds: float = 0.0
    # Why healerd.yaml was not reloaded: the settings in force stay until it is fixed.
    settings_errors: tuple[str, ...] = ()
    # Why auth.json was not applied at the last reload (file and reason, no secret).
    credentials_error: str = ""
