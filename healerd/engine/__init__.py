"""What the core needs from a container engine, without naming docker.

`healerd.engine.docker_engine` is the one module that imports the docker SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from healerd.model import EngineEvent, ObservedContainer, ServiceSpec


class EngineError(Exception):
    """The engine answered with an error; the pass backs off and retries."""


class EngineUnavailable(EngineError):
    """The engine could not be reached at all (socket missing, refused, timed out)."""


class NameConflict(EngineError):
    """The container name is taken; the caller picks another name."""


class ImageMissing(EngineError):
    """The image is not present locally."""


class ImagePullFailed(EngineError):
    """The registry could not deliver the image."""


class Engine(Protocol):
    def version(self) -> str:
        """The engine's version string; raises EngineUnavailable when unreachable."""
        ...

    def identity(self) -> str:
        """Who the engine is, the same at any address: `docker info`'s ID and data root
        ("" if unknown)."""
        ...

    def data_root(self) -> str | None:
        """Where the engine keeps images and containers (for disk figures)."""
        ...

    def list_managed(self) -> list[ObservedContainer]:
        """Every healerd-labelled container, running or not, in one list call."""
        ...

    def create_and_start(self, spec: ServiceSpec, name: str, labels: Mapping[str, str]) -> str:
        """Create and start one container of `spec` named `name`, with healerd's `labels`
        added to the spec's own; returns its id."""
        ...

    def image_present(self, image: str) -> bool:
        """Whether the image is in the engine's local store."""
        ...

    def image_size_hint(self, image: str) -> int | None:
        """The size of the largest local image of the same repository (any tag), as a
        guess of what a pull of `image` takes on disk; None if there is none."""
        ...

    def pull(self, image: str) -> None:
        """Pull the image; raises ImagePullFailed (or EngineUnavailable)."""
        ...

    def remove(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        """Stop (gracefully, if running) and remove; a container already gone is success.
        `stop_timeout` None keeps the container's own stop timeout."""
        ...

    def watch(
        self, on_event: Callable[[EngineEvent], None], on_connected: Callable[[], None]
    ) -> None:
        """Block reading the event stream, calling `on_connected` once the stream is
        subscribed and `on_event` for each event of a healerd-labelled container;
        returns or raises when the stream ends."""
        ...

    def stop_watch(self) -> None:
        """Make a running `watch` return soon (called from another thread)."""
        ...
