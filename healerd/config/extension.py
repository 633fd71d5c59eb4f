"""A service's `x-healerd:` mapping: healerd's own keys inside a Compose file (Compose
ignores `x-` keys, so the file still runs with `docker compose`)."""

from __future__ import annotations

from healerd.config.errors import describe, unknown_key_reason
from healerd.config.hooks import hooks, hooks_schema
from healerd.config.keys import At, Key
from healerd.config.yamlload import LineDict
from healerd.model import Hook
from healerd.vocabulary import AutoUpdate

AUTO_UPDATE_MODES = (AutoUpdate.REGISTRY.value, AutoUpdate.DISABLED.value)
# Podman's label for the same thing (io.containers.autoupdate=registry), accepted as is.
PODMAN_AUTOUPDATE = "io.containers.autoupdate"

EXTENSION_FIELDS = (
    Key(
        "auto_update",
        "registry | disabled",
        "registry: follow the image's tag. Every auto_update_interval (healerd.yaml) healerd "
        "asks the registry for the tag's digest (one manifest request); a new digest is "
        "pulled and rolled out with update_config, and rolled back by itself if a new "
        "container exits or turns unhealthy before the rollout completes (that digest is "
        "then not tried again until the tag moves). The label io.containers.autoupdate="
        "registry (Podman's) does the same. An image pinned by digest never updates.",
        "registry",
        schema={"enum": list(AUTO_UPDATE_MODES)},
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
    mode = value.get("auto_update")
    if mode is None:
        return AutoUpdate.NEVER
    if mode not in AUTO_UPDATE_MODES:
        at.key(value, "auto_update").error(
            "must be registry (follow the tag's digest in its registry) or disabled, "
            f"not {describe(mode)}"
        )
        return AutoUpdate.NEVER
    return AutoUpdate(mode)


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
    """x-healerd's mode, else Podman's label's; NEVER for disabled or neither."""
    label = dict(labels).get(PODMAN_AUTOUPDATE)
    if declared is AutoUpdate.NEVER and label is not None:
        if label not in AUTO_UPDATE_MODES:
            at.error(
                f"{PODMAN_AUTOUPDATE}={label!r}: healerd follows a registry (registry) or "
                "nothing (disabled); Podman's local policy has no registry to follow"
            )
        return AutoUpdate.REGISTRY if label == AutoUpdate.REGISTRY else AutoUpdate.NEVER
    return AutoUpdate.REGISTRY if declared is AutoUpdate.REGISTRY else AutoUpdate.NEVER
