"""A row of the engine's container list call as an ObservedContainer: pure parsing of
Docker's JSON, no engine call."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Iterator
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


_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def rows_of(text: str) -> Iterator[dict[str, Any]]:
    """The list call's JSON array, a row at a time: each row is parsed and dropped
    before the next is decoded, so that a list of 1,000 rows never stands as 1,000
    decoded rows at once. (Those objects were most of what a list cost in memory, and
    the allocator kept much of it afterwards.)"""
    i = _ws(text, 0)
    if text[i : i + 1] != "[":
        raise ValueError("the engine's container list is not a JSON array")
    i = _ws(text, i + 1)
    if text[i : i + 1] == "]":
        return
    decode = _DECODER.raw_decode
    while True:
        row, i = decode(text, i)
        yield row
        sep = text[i : i + 1]
        if sep != ",":  # the engine's own JSON is compact: no whitespace to skip
            i = _ws(text, i)
            sep = text[i : i + 1]
            if sep == "]":
                return
            if sep != ",":
                raise ValueError(f"the engine's container list: ',' or ']' expected at {i}")
        i += 1
        if text[i : i + 1] != "{":
            i = _ws(text, i)


def _ws(text: str, i: int) -> int:
    found = _WS.match(text, i)
    assert found is not None  # [ \t\n\r]* matches everywhere
    return found.end()


# Podman's own states, as its Docker-compatible list passes them through (Podman 4.3:
# a killed container is `stopped` for a moment before it is `exited`), in Docker's words.
_PODMAN_STATES = {
    "stopped": ContainerState.EXITED,
    "stopping": ContainerState.RUNNING,  # its process still runs: the `died` event follows
    "configured": ContainerState.CREATED,
    "initialized": ContainerState.CREATED,
}


def _state(value: str) -> ContainerState:
    word = value.lower()
    try:
        return ContainerState(word)
    except ValueError:
        return _PODMAN_STATES.get(word, ContainerState.DEAD)


def _changing(raw: dict[str, Any]) -> tuple[ContainerState, str, str, str]:
    """What of a listed container can change while it exists: state, status text, name
    (a rename), image reference (a moved tag)."""
    names = raw.get("Names") or [""]
    return (
        _state(str(raw.get("State", ""))),
        str(raw.get("Status", "")),
        str(names[0]).lstrip("/"),
        str(raw.get("Image", "")),
    )


def _from_status(status: str) -> dict[str, Any]:
    # The list call carries health and exit code only inside its Status text; parsing
    # it saves one inspect per container.
    health = _HEALTH.search(status)
    exited = _EXIT.match(status)
    return {
        "status": status,
        "health": Health(health.group(1).removeprefix("health: ")) if health else None,
        "exit_code": int(exited.group(1)) if exited else None,
    }


def observed(raw: dict[str, Any]) -> ObservedContainer:
    labels = raw.get("Labels") or {}
    state, status, name, image = _changing(raw)
    return ObservedContainer(
        id=str(raw["Id"]),
        name=name,
        service=str(labels.get(LABEL_SERVICE, "")),
        spec_hash=str(labels.get(LABEL_SPEC_HASH, "")),
        state=state,
        created=float(raw.get("Created", 0)),
        image=image,
        **_from_status(status),
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
    """Parses a list call's rows, reusing what it made of a container last time.

    A container's labels, creation time, mounts and network mode never change; only
    what `_changing` names may. At 1,000 containers most rows of a pass are as they
    were in the last one, and parsing them was most of what a pass cost above the list
    call itself. A row that did not change gives back the very object of the last list,
    and one that did keeps all but its changed fields: so that almost nothing made while
    decoding a list of 1,000 rows outlives it. (Every survivor pins the allocator's
    arena it sits in: keeping each list's id strings and key tuples held megabytes that
    the list had used once.) Safe across threads: each call builds a new table and
    swaps it in whole."""

    def __init__(self) -> None:
        self._rows: dict[str, ObservedContainer] = {}

    def parse(
        self, rows: Iterable[dict[str, Any]], service: str | None = None
    ) -> list[ObservedContainer]:
        """`service`: the rows are that service's only; the other services' stay."""
        last = self._rows
        now: dict[str, ObservedContainer] = {}
        if service is not None:
            now = {i: c for i, c in last.items() if c.service != service}
        out = []
        for raw in rows:
            old = last.get(str(raw["Id"]))
            c = observed(raw) if old is None else _current(old, raw)
            now[c.id] = c
            out.append(c)
        self._rows = now
        return out


def _current(old: ObservedContainer, raw: dict[str, Any]) -> ObservedContainer:
    state, status, name, image = _changing(raw)
    if (state, status, name, image) == (old.state, old.status, old.name, old.image):
        return old
    return dataclasses.replace(
        old,
        state=state,
        name=old.name if name == old.name else name,
        image=old.image if image == old.image else image,
        **(_from_status(status) if status != old.status else {}),
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


__all__ = [
    "ANONYMOUS",
    "RowCache",
    "int_or_none",
    "observed",
    "rows_of",
]
