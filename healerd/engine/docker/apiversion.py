"""Which Docker API version healerd speaks with an engine (issue 31): the engine's own
(its /version's ApiVersion) up to the newest the installed docker SDK knows, never
below the engine's MinAPIVersion (Docker 29.0-29.2 refused every client below 1.44),
and no engine below FLOOR, the lowest whose API healerd needs.

Fields that need a newer API than the one in use are refused at create time
(`needs`), as the service's action error: the config cannot know the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import docker.constants

from healerd.engine.api import EngineError

# The oldest API healerd needs: Debian 12's docker.io 20.10.
FLOOR = "1.41"
# Docker's release of each API version, for the messages (as the Engine API docs list
# them); an API version not here is named by itself.
_DOCKER = {
    "1.38": "18.06",
    "1.39": "18.09",
    "1.40": "19.03",
    "1.41": "20.10",
    "1.42": "23.0",
    "1.43": "24.0",
    "1.44": "25.0",
    "1.45": "26.0",
    "1.46": "27.0",
    "1.47": "27.2",
    "1.48": "28.0",
}


class EngineTooOld(EngineError):
    """The engine speaks an API below FLOOR: healerd does not act on it."""


def parsed(version: str) -> tuple[int, ...]:
    """ "1.44" -> (1, 44); anything else is an EngineError (an engine's answer)."""
    try:
        return tuple(int(part) for part in version.split("."))
    except (AttributeError, ValueError):
        raise EngineError(f"the engine's API version {version!r} is not a version") from None


def docker_of(api: str) -> str:
    """ "1.44" -> "Docker 25.0"; an API version unknown here -> "API 1.52"."""
    release = _DOCKER.get(api)
    return f"Docker {release}" if release else f"API {api}"


def sdk_newest() -> str:
    """The newest API version the installed docker SDK knows (5.0.3: 1.41; 7.1: 1.44)."""
    return str(docker.constants.DEFAULT_DOCKER_API_VERSION)


def negotiate(engine: str, engine_min: str | None, sdk: str) -> str:
    """The version to speak: min(`engine`, `sdk`), raised to `engine_min` (an engine that
    refuses older clients is spoken to at its own floor, which the SDK's low-level calls
    healerd makes still serve); EngineTooOld below FLOOR."""
    if parsed(engine) < parsed(FLOOR):
        raise EngineTooOld(
            f"the engine speaks Docker API {engine} ({docker_of(engine)}); healerd needs "
            f"{FLOOR} ({docker_of(FLOOR)}) or newer"
        )
    chosen = min(engine, sdk, key=parsed)
    if engine_min and parsed(chosen) < parsed(engine_min):
        chosen = engine_min
    return chosen


def engine_kind(answer: Mapping[str, Any]) -> str:
    """ "podman" for an engine whose /version names a Podman component (Podman 4.3 and
    later answer with one named "Podman Engine" on the Docker-compatible socket), else
    "docker": what differs between them is kept in the adapter (events.py, images.py)."""
    for component in answer.get("Components") or ():
        if isinstance(component, Mapping) and "podman" in str(component.get("Name", "")).lower():
            return "podman"
    return "docker"


def needs(current: str, needed: str, what: str) -> None:
    """Refuses `what` (a field as written) when the API in use is below `needed`."""
    if parsed(current) < parsed(needed):
        raise EngineError(
            f"{what} needs {docker_of(needed)} (API {needed}); healerd speaks API {current} "
            "with this engine (the lower of the engine's and the docker SDK's newest)"
        )


__all__ = [
    "FLOOR",
    "EngineTooOld",
    "docker_of",
    "engine_kind",
    "needs",
    "negotiate",
    "parsed",
    "sdk_newest",
]
