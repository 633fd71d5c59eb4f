"""The states a service can be in, and what the rest of the code asks of each.

One closed set: the loop decides them, status, metrics, the API and healerctl read
them. A property here, not a list of names in each reader, keeps them in step.
"""

from __future__ import annotations

from enum import StrEnum

from healerd.vocabulary import EventKind, NoticeKind


class ServiceState(StrEnum):
    PENDING = "Pending"  # declared, not reconciled yet
    CONVERGED = "Converged"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"  # an action failed; retried with backoff
    CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"
    WAITING_FOR_RESOURCES = "WaitingForResources"
    WAITING = "Waiting"  # for a dependency (depends_on) to be running or healthy
    ROLLOUT_HALTED = "RolloutHalted"
    ENGINE_UNREACHABLE = "EngineUnreachable"
    HELD = "Held"  # orphans kept while a broken file may still declare them
    PAUSED = "Paused"
    CONFIG_ERROR = "ConfigError"  # runs the last good spec of a file that is broken now
    # A run-once service (restart "no" or on-failure) whose every replica exited for good.
    COMPLETED = "Completed"  # all with code 0
    FAILED = "Failed"  # one or more with another code (on-failure: no restart left)

    @property
    def claims_room(self) -> bool:
        """Whether its missing containers claim host room ahead of lower priorities: a
        service that will not create now must not hold others back."""
        return self not in _NOT_CLAIMING

    @property
    def is_backoff(self) -> bool:
        """Waiting out a crash-loop or pull backoff (a metric and an alert)."""
        return self in (ServiceState.CRASH_LOOP_BACK_OFF, ServiceState.IMAGE_PULL_BACK_OFF)

    @property
    def notice(self) -> NoticeKind | None:
        """What a notification calls entering this state (None: nothing to tell)."""
        return _NOTICES.get(self)

    @property
    def is_well(self) -> bool:
        """Running as declared (or done as declared): a crash loop or failure is over."""
        return self in (ServiceState.CONVERGED, ServiceState.COMPLETED)

    @property
    def event(self) -> EventKind | None:
        """The event kind recorded when a service enters this state (None: none)."""
        return _EVENTS.get(self)


_NOT_CLAIMING = frozenset(
    {
        ServiceState.CRASH_LOOP_BACK_OFF,
        ServiceState.IMAGE_PULL_BACK_OFF,
        ServiceState.ERR_IMAGE_NEVER_PULL,
        ServiceState.PAUSED,
        ServiceState.HELD,
        ServiceState.ROLLOUT_HALTED,
        ServiceState.DEGRADED,
        ServiceState.WAITING,
        ServiceState.COMPLETED,
        ServiceState.FAILED,
    }
)
_NOTICES = {
    ServiceState.CRASH_LOOP_BACK_OFF: NoticeKind.CRASH_LOOP,
    ServiceState.FAILED: NoticeKind.FAILED,
    ServiceState.DEGRADED: NoticeKind.FAILED,
    ServiceState.IMAGE_PULL_BACK_OFF: NoticeKind.FAILED,
    ServiceState.ERR_IMAGE_NEVER_PULL: NoticeKind.FAILED,
    ServiceState.ROLLOUT_HALTED: NoticeKind.FAILED,
    ServiceState.WAITING_FOR_RESOURCES: NoticeKind.PRESSURE,
}
_EVENTS = {
    ServiceState.CRASH_LOOP_BACK_OFF: EventKind.BACKOFF,
    ServiceState.WAITING_FOR_RESOURCES: EventKind.WAITING_FOR_RESOURCES,
    ServiceState.WAITING: EventKind.WAITING,
    ServiceState.ROLLOUT_HALTED: EventKind.ROLLOUT_HALTED,
    ServiceState.DEGRADED: EventKind.DEGRADED,
    ServiceState.IMAGE_PULL_BACK_OFF: EventKind.IMAGE_PULL_BACKOFF,
    ServiceState.ERR_IMAGE_NEVER_PULL: EventKind.ERR_IMAGE_NEVER_PULL,
    ServiceState.COMPLETED: EventKind.COMPLETED,
    ServiceState.FAILED: EventKind.FAILED,
}

__all__ = ["ServiceState"]
