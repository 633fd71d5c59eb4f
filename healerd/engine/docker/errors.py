"""The docker SDK's errors in the engine's words (healerd.engine.api's exceptions): what
the adapter raises, so that nothing past it sees a docker or requests type; and which
of them mean that only a new container gets past a start (CannotRestart)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import docker.errors
import requests.exceptions
import urllib3.exceptions

from healerd.engine.api import EngineError, EngineUnavailable, ImageMissing, NameConflict


def _name_taken(exc: docker.errors.APIError) -> bool:
    """A create refused for its name: Docker answers 409; Podman 4.3's compat API 500,
    "the container name "x" is already in use by ..." (not a port's "address already
    in use", a 500 from a start)."""
    text = str(exc.explanation or "")
    if exc.status_code == 409:
        return "already in use" in text
    return exc.status_code == 500 and "container name" in text and "already in use" in text


@contextmanager
def translated(what: str) -> Iterator[None]:
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageMissing(f"{what}: {exc.explanation or exc}") from exc
    except docker.errors.APIError as exc:
        if _name_taken(exc):
            raise NameConflict(f"{what}: {exc.explanation}") from exc
        raise EngineError(f"{what}: {exc.explanation or exc}") from exc
    except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, ValueError) as exc:
        # Also a response cut short or garbled by an engine that restarts mid-answer (a
        # streamed body, a pull's, is read through urllib3 itself: its errors unwrapped).
        raise EngineUnavailable(f"{what}: engine unreachable ({type(exc).__name__})") from exc
    except docker.errors.DockerException as exc:
        raise EngineUnavailable(f"{what}: {exc}") from exc


# What the engine answers to a start that only a new container can get past: the
# container gone or being removed; its network gone (it names the network by id: one
# made again by name is another); a mount source gone; its image gone.
_NEEDS_NEW = (
    "no such container",
    "marked for removal",
    "network",  # "network 9cb4... not found"
    "bind source path does not exist",
    "no such image",
    "no such volume",
)


def needs_new(cause: BaseException | None) -> bool:
    if not isinstance(cause, docker.errors.APIError):
        return False
    text = str(cause.explanation or cause).lower()
    if cause.status_code == 404:
        return any(word in text for word in _NEEDS_NEW)
    if cause.status_code == 409:
        return "marked for removal" in text
    # An endpoint of its name left in a network by an engine that stopped uncleanly: a
    # start fails on it every time, a new container (another name) does not.
    if "already exists in network" in text:
        return True
    return "invalid mount config" in text or "bind source path does not exist" in text


def removed(cause: BaseException | None) -> bool:
    """A start refused because the container is gone or being removed."""
    text = str(getattr(cause, "explanation", None) or cause or "").lower()
    return "no such container" in text or "marked for removal" in text


__all__ = ["needs_new", "removed", "translated"]
