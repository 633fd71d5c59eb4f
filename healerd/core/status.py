"""What the daemon reports about services and containers: one place the API reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from healerd.core.pressure import Pressure
from healerd.core.state import ServiceState
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


def is_converged(st: ServiceStatus) -> bool:
    """The one definition of "converged" (status --check, wait, metrics, the API): what
    runs is what is declared, every container up to date and available, not paused."""
    if st.state == ServiceState.COMPLETED:
        return not st.paused  # a run-once service that did its job is what was declared
    return (
        st.state == ServiceState.CONVERGED
        and not st.paused
        and st.running == st.desired
        and st.up_to_date == st.desired
        and st.available >= st.desired
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
