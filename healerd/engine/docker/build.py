"""Builds through the engine's classic build API (POST /build), which Docker and Podman
both serve: the context sent as `docker build` sends it (.dockerignore applied by the
SDK's own port of Docker's matcher), an inline Dockerfile added to it, the progress read
as it streams, and the builder's last lines kept for the reason of a failure."""

from __future__ import annotations

import collections
import logging
import os
from typing import IO, Any

import docker.api.build
import docker.utils
import requests.exceptions
import urllib3.exceptions

from healerd.engine.api import EngineError, EngineUnavailable, ImageBuildFailed, ImageMissing
from healerd.engine.docker.client import DockerClient
from healerd.model import LABEL_CONTEXT_HASH, BuildSpec

_log = logging.getLogger("healerd.engine")

# A build step may say nothing for a long while (a RUN that compiles): the wait for the
# builder's next word is bounded by this, not by engine_timeout.
BUILD_SILENCE = 1800.0
LAST_LINES = 12  # of the builder's output, in the reason of a failure
MAX_REASON = 2000  # characters
INLINE_NAME = ".healerd-dockerfile-inline"


def _ignored(root: str) -> list[str]:
    """The .dockerignore patterns, read as the SDK's own build(path=...) reads them."""
    path = os.path.join(root, ".dockerignore")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line.strip() for line in f.read().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def context_tar(build: BuildSpec) -> tuple[IO[bytes], str]:
    """The context as a tar file, and the Dockerfile's name in it: an inline one, or
    one outside the context, is added to the archive (as the SDK does for the latter)."""
    if build.dockerfile_inline is not None:
        dockerfile: tuple[str | None, str | None] = (INLINE_NAME, build.dockerfile_inline)
    else:
        dockerfile = docker.api.build.process_dockerfile(build.dockerfile, build.context)
    tar = docker.utils.tar(build.context, exclude=_ignored(build.context), dockerfile=dockerfile)
    return tar, str(dockerfile[0])


def _options(build: BuildSpec) -> dict[str, Any]:
    return {
        "buildargs": dict(build.args),
        "target": build.target,
        "labels": {**dict(build.labels), LABEL_CONTEXT_HASH: build.context_hash},
        "cache_from": list(build.cache_from) or None,
        "network_mode": build.network,
        "shmsize": build.shm_size,
        "extra_hosts": list(build.extra_hosts) or None,
    }


def _reason(tag: str, error: str, lines: collections.deque[str]) -> str:
    tail = "\n".join(lines)
    text = f"build {tag}: {error.strip()}" + (f"\n{tail}" if tail else "")
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


class DockerBuild:
    """ImageStore's builds and image labels."""

    _client: DockerClient

    def image_labels(self, image: str) -> dict[str, str] | None:
        try:
            with self._client.call(f"inspect image {image}"):
                found = self._client.api.inspect_image(image)
        except ImageMissing:
            return None
        except EngineError as exc:
            if getattr(exc.__cause__, "status_code", None) == 404:
                return None
            raise
        labels = (found.get("Config") or {}).get("Labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    def build_image(self, build: BuildSpec, tag: str, *, no_cache: bool = False) -> None:
        lines: collections.deque[str] = collections.deque(maxlen=LAST_LINES)
        try:
            context, dockerfile = context_tar(build)
        except OSError as exc:
            raise ImageBuildFailed(f"build {tag}: cannot read the context: {exc}") from exc
        try:
            with context, self._client.call(f"build {tag}"):
                stream = self._client.api.build(
                    fileobj=context, custom_context=True, tag=tag, dockerfile=dockerfile,
                    rm=True, forcerm=True, pull=False, nocache=no_cache, decode=True,
                    timeout=max(BUILD_SILENCE, self._client.timeout), use_config_proxy=False,
                    **_options(build),
                )  # fmt: skip
                for message in stream:
                    if message.get("error"):
                        raise ImageBuildFailed(_reason(tag, str(message["error"]), lines))
                    text = str(message.get("stream") or "").rstrip()
                    lines.extend(t for t in text.splitlines() if t.strip())
        except EngineUnavailable as exc:
            if isinstance(
                exc.__cause__,
                (requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError),
            ):
                why = f"the builder said nothing for {BUILD_SILENCE:g}s"
                raise ImageBuildFailed(_reason(tag, why, lines)) from exc
            raise
        except ImageBuildFailed:
            raise
        except EngineError as exc:  # refused before it began: a bad target, option
            why = str(exc).removeprefix(f"build {tag}: ")
            raise ImageBuildFailed(_reason(tag, why, lines)) from exc
        _log.info("built %s from %s", tag, build.context)


__all__ = ["DockerBuild", "context_tar"]
