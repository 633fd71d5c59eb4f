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


class RowCache:
    """Parses a list call's rows, reusing the last parse of a row that did not change.

    A container's labels, creation time, mounts and network mode never change; its
    state, status text, name (a rename) and image reference (a moved tag) may: those
    make the key. At 1,000 containers most rows of a pass are as they were in the last
    one, and parsing them was most of what a pass cost above the list call itself.
    Safe across threads: each call builds a new table and swaps it in whole."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[tuple[object, ...], ObservedContainer]] = {}

    def parse(self, rows: list[dict[str, Any]]) -> list[ObservedContainer]:
        last = self._rows
        now: dict[str, tuple[tuple[object, ...], ObservedContainer]] = {}
        out = []
        for raw in rows:
            cid = str(raw["Id"])
            key = (raw.get("State"), raw.get("Status"), raw.get("Names"), raw.get("Image"))
            hit = last.get(cid)
            c = hit[1] if hit is not None and hit[0] == key else observed(raw)
            now[cid] = (key, c)
            out.append(c)
        self._rows = now
        return out


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


__all__ = ["ANONYMOUS", "RowCache", "int_or_none", "observed"]
