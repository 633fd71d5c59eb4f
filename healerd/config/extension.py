"""A service's `x-healerd:` mapping: healerd's own keys inside a Compose file (Compose
ignores `x-` keys, so the file still runs with `docker compose`)."""

from __future__ import annotations

from healerd.config.errors import describe, unknown_key_reason
from healerd.config.hooks import hooks, hooks_schema
from healerd.config.keys import At, Key
from healerd.config.snapshotkeys import SNAPSHOT_FIELDS
from healerd.config.updatekeys import AUTO_UPDATE_MODES, WINDOW_EXAMPLE, mode
from healerd.config.yamlload import LineDict
from healerd.model import Hook
from healerd.vocabulary import AutoUpdate

# Podman's label for the same thing (io.containers.autoupdate=registry), accepted as is.
PODMAN_AUTOUPDATE = "io.containers.autoupdate"

EXTENSION_FIELDS = (
    Key(
        "auto_update",
        "registry | notify | disabled",
        "registry: follow the image's tag. Every auto_update_interval (healerd.yaml) healerd "
        "asks the registry for the tag's digest (one manifest request); a new digest is "
        "pulled and rolled out with update_config (when update_window, update_delay, "
        "update_lock and pre_update allow), and rolled back by itself if a new container "
        "exits or turns unhealthy before the rollout completes (that digest is then not "
        "tried again until the tag moves). notify: the same check, but a new digest is only "
        "told of (status, events, metrics, notifications) until `healerctl update` rolls "
        "it out. The label io.containers.autoupdate=registry (Podman's) does the same as "
        "registry. An image pinned by digest never updates. Absent: healerd.yaml's "
        "`updates:` default (disabled unless it says otherwise).",
        "registry",
        schema={"enum": list(AUTO_UPDATE_MODES)},
    ),
    Key(
        "update_window",
        "window or list of windows",
        "When an update may start, in local time: `[DAYS ]HH:MM-HH:MM`, days as Mon, Tue, "
        "... Sun, lists (Sat,Sun) and ranges (Mon-Fri); a span may cross midnight "
        "(22:00-04:00). A new digest found outside every window waits for the next one; a "
        "rollback never waits. Absent: healerd.yaml's `updates:` default (any time).",
        WINDOW_EXAMPLE,
        schema={},
    ),
    Key(
        "update_delay",
        "duration <= 168h",
        "A new digest is taken only once the registry has shown it unchanged this long "
        "(a bad push fixed meanwhile is never run). Counted from when healerd first saw "
        "it; the count survives a restart (state_dir).",
        "24h",
        schema={},
    ),
    Key(
        "update_lock",
        "absolute path in the container",
        "A hold the application owns (balena's lock file): while this file exists in a "
        "running container of the service, an update waits; `healerctl status` names the "
        "container and since when (the file's time). A container that stops holds nothing.",
        "/run/lock/app.update",
        schema={"type": "string"},
    ),
    Key(
        "notify",
        "boolean",
        "false: no notification tells of this service (healerd.yaml's notifications), "
        "whatever it goes through; its status, events and metrics are as ever.",
        "false",
        default=True,
        schema={"type": "boolean"},
    ),
    *SNAPSHOT_FIELDS,
    Key(
        "pre_update",
        "list of hooks",
        "Commands run, as post_start's are (the same keys: command, user, privileged, "
        "working_dir, environment), in the service's oldest running container before "
        "an image update rolls out: one that exits non-zero or passes its time (5m for "
        "all) postpones the update to the next check, and the reason (its exit code and "
        "last lines of output) is reported. Changing them replaces no container.",
        "[{command: [/usr/local/bin/backup, --quick]}]",
        default=(),
        schema=hooks_schema(),
    ),
)


def x_healerd(value: object, at: At) -> AutoUpdate:
    """The mode `auto_update` names (NEVER when absent)."""
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping such as {{auto_update: registry}}, not {describe(value)}")
        return AutoUpdate.NEVER
    names = [k.name for k in EXTENSION_FIELDS]
    for key in value:
        if key not in names:
            at.key(value, key).error(unknown_key_reason(key, names))
    return mode(value.get("auto_update"), at.key(value, "auto_update"))


def notify(value: object, at: At) -> bool:
    """x-healerd's `notify` (true when absent; a mapping that is not one was reported)."""
    if not isinstance(value, LineDict) or "notify" not in value:
        return True
    flag = value["notify"]
    if not isinstance(flag, bool):
        at.key(value, "notify").error(f"must be true or false, not {describe(flag)}")
        return True
    return flag


def pre_update(value: object, at: At) -> tuple[Hook, ...]:
    """x-healerd's `pre_update` (none when absent; a mapping that is not one was
    reported)."""
    if not isinstance(value, LineDict) or value.get("pre_update") is None:
        return ()
    return hooks(value["pre_update"], at.key(value, "pre_update"))


def auto_update(declared: AutoUpdate, labels: tuple[tuple[str, str], ...], at: At) -> AutoUpdate:
    """x-healerd's mode, else Podman's label's (registry or disabled); NEVER for neither."""
    label = dict(labels).get(PODMAN_AUTOUPDATE)
    if declared is AutoUpdate.NEVER and label is not None:
        if label not in (AutoUpdate.REGISTRY, AutoUpdate.DISABLED):
            at.error(
                f"{PODMAN_AUTOUPDATE}={label!r}: healerd follows a registry (registry) or "
                "nothing (disabled); Podman's local policy has no registry to follow"
            )
            return AutoUpdate.NEVER
        return AutoUpdate(label)
    return declared
