"""The closed sets of words healerd reads and says, each as one enum.

What a service file may say (a dependency's condition, `restart`, `auto_update`, a
mount's type) is parsed into these once, by healerd.config, so that no other code
compares strings; what healerd says it did (`/v1/events`, `healerctl events`) is an
`EventKind`, in one naming style. The lowest layer: the model and everything above it
may use them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class EventKind(StrEnum):
    """What an event of `/v1/events` says healerd did or saw (kebab-case, all of them)."""

    # What a pass did to a container (healerd.core.report).
    CREATED = "created"
    RESTARTED = "restarted"  # started again in place
    STOPPED = "stopped"
    REMOVED = "removed"
    GONE = "gone"  # removed by someone else
    # A lifecycle hook (post_start, pre_stop, pre_update) failed or passed its time
    # (healerd.core.hooks).
    HOOK_FAILED = "hook-failed"
    # An action failed; also a run-once service that failed for good (state Failed).
    FAILED = "failed"
    # Images (healerd.core.images, healerd.core.updates, healerd.core.imagegc).
    PULLED = "pulled"
    PULL_FAILED = "pull-failed"
    BUILT = "built"  # a service's build: (healerd.core.builds)
    BUILD_FAILED = "build-failed"
    IMAGE_UPDATE = "image-update"  # a followed tag moved: rolling out
    IMAGE_UPDATED = "image-updated"  # every replica runs the new digest
    IMAGE_ROLLBACK = "image-rollback"
    IMAGE_DOWNGRADE_HELD = "image-downgrade-held"
    IMAGE_UPDATE_AVAILABLE = "image-update-available"  # auto_update: notify, or --check
    IMAGE_UPDATE_HELD = "image-update-held"  # a window, a delay, a lock or pre_update
    IMAGE_PINNED = "image-pinned"  # healerctl pin / unpin
    UPDATE_REQUESTED = "update-requested"  # healerctl update (now, or --check)
    IMAGE_UNPINNED = "image-unpinned"
    IMAGE_REMOVED = "image-removed"
    IMAGE_LOADED = "image-loaded"  # an archive of images_dir loaded
    IMAGE_LOAD_REFUSED = "image-load-refused"  # ... or refused, with the reason
    VOLUME_PRUNED = "volume-pruned"
    ROLLOUT_STARTED = "rollout-started"
    ROLLOUT_COMPLETE = "rollout-complete"
    # The operator, the config, the engine, the host.
    PAUSED = "paused"
    RESUMED = "resumed"
    CONFIG_ERROR = "config-error"
    CONFIG_FIXED = "config-fixed"  # a file refused before reads cleanly again, or is gone
    ENGINE_LOST = "engine-lost"
    ENGINE_BACK = "engine-back"
    PRESSURE = "pressure"
    PRESSURE_ENDED = "pressure-ended"
    UNVERIFIED = "unverified"  # healerd's labels on a container it cannot prove it made
    # A service entered a state (healerd.core.lifecycle.ServiceState.event).
    BACKOFF = "backoff"  # CrashLoopBackOff
    WAITING_FOR_RESOURCES = "waiting-for-resources"
    WAITING = "waiting"  # for a dependency
    ROLLOUT_HALTED = "rollout-halted"
    DEGRADED = "degraded"
    IMAGE_PULL_BACKOFF = "image-pull-backoff"
    ERR_IMAGE_NEVER_PULL = "err-image-never-pull"
    COMPLETED = "completed"


class NoticeKind(StrEnum):
    """What a notification tells of (healerd.yaml's `notifications[].events`): each is a
    condition that is told once when it begins, or a thing that happened once."""

    CRASH_LOOP = "crash-loop"  # a service waits out its crash-loop backoff
    FAILED = "failed"  # Failed, Degraded, an image it cannot pull, a halted rollout
    RECOVERED = "recovered"  # one of the two above ended: Converged (or Completed) again
    UPDATE = "update"  # an image update applied, or found and held
    ROLLBACK = "rollback"  # an image update rolled back
    CONFIG_ERROR = "config-error"  # a config file refused, or fixed
    ENGINE = "engine"  # the engine went away, or came back
    PRESSURE = "pressure"  # host pressure began or ended, or holds a service back
    HEALERD = "healerd"  # healerd started after an unclean stop
    HEAL = "heal"  # a plain heal (started in place, replaced): not sent by default


# What a target is sent when its `events` are not given: all but the plain heals.
DEFAULT_NOTICES = frozenset(NoticeKind) - {NoticeKind.HEAL}


class Condition(StrEnum):
    """Compose's depends_on condition: what a dependency must be before its dependents
    are created (healerd.core.readiness.dependency_unmet)."""

    STARTED = "service_started"
    HEALTHY = "service_healthy"
    COMPLETED_SUCCESSFULLY = "service_completed_successfully"


class AutoUpdate(StrEnum):
    """`x-healerd: {auto_update: ...}`. NEVER: the file says nothing (healerd.yaml's
    `updates:` default applies); DISABLED: it says no (and turns Podman's label off)."""

    NEVER = ""
    REGISTRY = "registry"  # follow the tag's digest in its registry (healerd.core.updates)
    NOTIFY = "notify"  # look for a new digest and tell of it; pull and roll nothing
    DISABLED = "disabled"


class VolumeKind(StrEnum):
    """A mount's type: SHORT is Compose's short syntax (a bind or a named volume, sent
    as a bind string); the others are the long syntax's `type`."""

    SHORT = ""
    BIND = "bind"
    VOLUME = "volume"
    TMPFS = "tmpfs"


class RestartMode(StrEnum):
    ALWAYS = "always"
    UNLESS_STOPPED = "unless-stopped"
    NO = "no"
    ON_FAILURE = "on-failure"


_RESTART_RE = re.compile(r"(no|always|unless-stopped|on-failure)(?::([1-9][0-9]{0,5}))?")


@dataclass(frozen=True)
class Restart:
    """Compose's `restart`, parsed: its mode and on-failure's N (`max_retries`)."""

    mode: RestartMode
    max_retries: int | None = None  # on-failure:N; None: no limit

    @classmethod
    def parse(cls, text: str) -> Restart:
        """`always`, `unless-stopped`, `no`, `on-failure` or `on-failure:N` (N >= 1);
        ValueError otherwise."""
        m = _RESTART_RE.fullmatch(text)
        if m is None or (m.group(2) is not None and m.group(1) != RestartMode.ON_FAILURE):
            raise ValueError(f"{text!r} is not always, unless-stopped, on-failure[:N] or no")
        limit = m.group(2)
        return cls(RestartMode(m.group(1)), int(limit) if limit is not None else None)

    @property
    def run_once(self) -> bool:
        """Its containers may finish: "no", or on-failure (healerd.core.jobs)."""
        return self.mode in (RestartMode.NO, RestartMode.ON_FAILURE)

    def __str__(self) -> str:
        """As a Compose file writes it."""
        return self.mode if self.max_retries is None else f"{self.mode}:{self.max_retries}"


__all__ = [
    "DEFAULT_NOTICES",
    "AutoUpdate",
    "Condition",
    "EventKind",
    "NoticeKind",
    "Restart",
    "RestartMode",
    "VolumeKind",
]
