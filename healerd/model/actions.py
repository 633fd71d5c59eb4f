"""What the planner asks of the executor: one action per step towards the desired state."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from healerd.model.observed import ObservedContainer
from healerd.model.spec import ServiceSpec


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
