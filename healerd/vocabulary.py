"""The closed sets of words healerd reads and says, each as one enum.

What a service file may say (a dependency's condition, `restart`, `auto_update`, a
mount's type) is parsed into these once, by healerd.config, so that no other code
compares strings; what healerd says it did (`/v1/events`, `healerctl events`) is an
`EventKind`, in one naming style. The lowest layer: the model and everything above it
may use them.
"""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    """What an event of `/v1/events` says healerd did or saw (kebab-case, all of them)."""

    # What a pass did to a container (healerd.core.report).
    CREATED = "created"
    RESTARTED = "restarted"  # started again in place
    STOPPED = "stopped"
    REMOVED = "removed"
    GONE = "gone"  # removed by someone else
    # An action failed; also a run-once service that failed for good (state Failed).
    FAILED = "failed"
    # Images (healerd.core.images, healerd.core.updates, healerd.core.imagegc).
    PULLED = "pulled"
    PULL_FAILED = "pull-failed"
    IMAGE_UPDATE = "image-update"  # a followed tag moved: rolling out
    IMAGE_UPDATED = "image-updated"  # every replica runs the new digest
    IMAGE_ROLLBACK = "image-rollback"
    IMAGE_DOWNGRADE_HELD = "image-downgrade-held"
    IMAGE_REMOVED = "image-removed"
    VOLUME_PRUNED = "volume-pruned"
    ROLLOUT_STARTED = "rollout-started"
    ROLLOUT_COMPLETE = "rollout-complete"
    # The operator, the config, the engine, the host.
    PAUSED = "paused"
    RESUMED = "resumed"
    CONFIG_ERROR = "config-error"
    ENGINE_LOST = "engine-lost"
    ENGINE_BACK = "engine-back"
    PRESSURE = "pressure"
    PRESSURE_ENDED = "pressure-ended"
    UNVERIFIED = "unverified"  # healerd's labels on a container it cannot prove it made
    # A service entered a state (healerd.core.state.ServiceState.event).
    BACKOFF = "backoff"  # CrashLoopBackOff
    WAITING_FOR_RESOURCES = "waiting-for-resources"
    WAITING = "waiting"  # for a dependency
    ROLLOUT_HALTED = "rollout-halted"
    DEGRADED = "degraded"
    IMAGE_PULL_BACKOFF = "image-pull-backoff"
    ERR_IMAGE_NEVER_PULL = "err-image-never-pull"
    COMPLETED = "completed"


__all__ = ["EventKind"]
