"""A row of the engine's container list call as an ObservedContainer: pure parsing,
no engine (the docker SDK stays in docker_engine.py)."""

from __future__ import annotations

import re
from typing import Any

from healerd.model import (
    LABEL_CRASH_STREAK,
    LABEL_REPLACES,
    LABEL_RESTARTS,
    LABEL_SERVICE,
    LABEL_SOURCE_FILE,
    LABEL_SPEC_HASH,
    OWNER_LABEL_PREFIX,
    ContainerState,
    Health,
    ObservedContainer,
)

_HEALTH = re.compile(r"\((healthy|unhealthy|health: starting)\)")
_EXIT = re.compile(r"^Exited \((-?\d+)\)")


def int_or_none(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _int_label(labels: dict[str, str], key: str) -> int:
    try:
        return max(0, int(labels.get(key, "0")))
    except ValueError:
        return 0


def observed(raw: dict[str, Any]) -> ObservedContainer:
    labels = raw.get("Labels") or {}
    names = raw.get("Names") or [""]
    status = str(raw.get("Status", ""))
    # The list call carries health and exit code only inside its Status text; parsing
    # it saves one inspect per container.
    health = _HEALTH.search(status)
    exited = _EXIT.match(status)
    return ObservedContainer(
        id=str(raw["Id"]),
        name=str(names[0]).lstrip("/"),
        service=str(labels.get(LABEL_SERVICE, "")),
        spec_hash=str(labels.get(LABEL_SPEC_HASH, "")),
        state=ContainerState.parse(str(raw.get("State", ""))),
        created=float(raw.get("Created", 0)),
        status=status,
        image=str(raw.get("Image", "")),
        health=Health.parse(health.group(1).replace("health: ", "") if health else None),
        exit_code=int(exited.group(1)) if exited else None,
        restarts=_int_label(labels, LABEL_RESTARTS),
        crash_streak=_int_label(labels, LABEL_CRASH_STREAK),
        source_file=str(labels.get(LABEL_SOURCE_FILE, "")),
        replaces=str(labels.get(LABEL_REPLACES, "")),
        anon_volumes=_anonymous_volumes(raw.get("Mounts") or []),
        network_of=_network_of(raw),
        owner_labels=tuple(
            sorted((str(k), str(v)) for k, v in labels.items() if k.startswith(OWNER_LABEL_PREFIX))
        ),
    )


def _network_of(raw: dict[str, Any]) -> str:
    """The container whose network namespace a listed container joined, else ""."""
    mode = str((raw.get("HostConfig") or {}).get("NetworkMode") or "")
    return mode.removeprefix("container:") if mode.startswith("container:") else ""


# The engine names an anonymous volume with 64 hex digits.
ANONYMOUS = re.compile(r"[0-9a-f]{64}")


def _anonymous_volumes(mounts: list[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """(volume, mount point) of each anonymous volume the list call shows mounted."""
    return tuple(
        (str(m["Name"]), str(m.get("Destination", "")))
        for m in mounts
        if m.get("Type") == "volume" and ANONYMOUS.fullmatch(str(m.get("Name", "")))
    )


__all__ = ["ANONYMOUS", "int_or_none", "observed"]
