"""The engine's local image store and its registry checks (ImageStore, Registry)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import docker.auth
import docker.errors
import requests.exceptions
import urllib3.exceptions

from healerd.engine.api import (
    EngineError,
    EngineUnavailable,
    ImageLoadFailed,
    ImageMissing,
    ImagePullFailed,
    LocalImage,
)
from healerd.engine.docker import manifest
from healerd.engine.docker.client import DockerClient
from healerd.engine.docker.logs import CHUNK, Readable
from healerd.engine.docker.podman import PODMAN
from healerd.engine.docker.pullauth import registry_auth
from healerd.engine.reference import split_reference
from healerd.model import RegistryAuth

_log = logging.getLogger("healerd.engine")

# How API 1.41 lists an image without a tag or a digest.
_NO_REFERENCE = ("<none>:<none>", "<none>@<none>")


def local_image(raw: dict[str, Any]) -> LocalImage:
    """One entry of GET /images/json."""
    tags = tuple(str(t) for t in raw.get("RepoTags") or () if t not in _NO_REFERENCE)
    digests = tuple(str(d) for d in raw.get("RepoDigests") or () if d not in _NO_REFERENCE)
    return LocalImage(
        id=str(raw["Id"]),
        tags=tags,
        digests=digests,
        created=float(raw.get("Created") or 0),
        size=int(raw.get("Size") or 0),
    )


def local_images(raw: Iterable[Any]) -> list[LocalImage]:
    return [local_image(i) for i in raw if isinstance(i, dict) and i.get("Id")]


def progress(raw: Readable) -> Iterator[dict[str, Any]]:
    """A pull's progress messages (one JSON object a line) as they are read, in pieces of
    at most CHUNK bytes: each read waits for the engine's next word, up to the timeout."""
    rest = b""
    while True:
        data = raw.read(CHUNK)
        lines = (rest + data).split(b"\n")
        rest = lines.pop() if data else b""
        for line in lines:
            if line.strip():
                message = json.loads(line)
                if isinstance(message, dict):
                    yield message
        if not data:
            return


_LOADED = ("Loaded image ID: ", "Loaded image: ")


def loaded_names(said: Iterable[dict[str, Any]]) -> list[str]:
    """What a load's messages say it loaded: `Loaded image: REF` (a tagged image) and
    `Loaded image ID: sha256:...` (an untagged one), in order, once each."""
    found: list[str] = []
    for message in said:
        for line in str(message.get("stream") or "").splitlines():
            for prefix in _LOADED:
                name = line.strip().removeprefix(prefix) if line.strip().startswith(prefix) else ""
                if name and name not in found:
                    found.append(name)
    return found


class DockerImages:
    """ImageStore and Registry."""

    _client: DockerClient

    def image_present(self, image: str) -> bool:
        try:
            with self._client.call(f"inspect image {image}"):
                self._client.api.inspect_image(image)
        except ImageMissing:
            return False
        except EngineError as exc:
            if isinstance(exc.__cause__, docker.errors.NotFound):
                return False
            raise
        return True

    def image_size_hint(self, image: str) -> int | None:
        repo, _ = split_reference(image)
        with self._client.call(f"list images {repo}"):
            found = self._client.api.images(name=repo)
        sizes = [int(i.get("Size") or 0) for i in found if isinstance(i, dict)]
        return max(sizes) if sizes and max(sizes) > 0 else None

    def pull(self, image: str, auth: RegistryAuth | None = None) -> None:
        """Never with the SDK's own credentials (~/.docker/config.json): only `auth`.

        The engine streams progress while it pulls. engine_timeout bounds the wait for
        its next word, not the whole pull (the SDK's own pull() waits for ever, and a
        registry that accepts and then says nothing held a worker as long as the engine
        waited): a slow pull that moves is never cut; a silent one is ImagePullFailed,
        so that a service whose image is on disk heals from it. An engine that goes away
        mid-pull is EngineUnavailable."""
        repo, tag = split_reference(image)
        header = docker.auth.encode_header(registry_auth(image, auth))
        try:
            with self._client.call(f"pull {image}"):
                response = self._client.post(
                    "/images/create",
                    params={"fromImage": repo, "tag": tag or "latest"},
                    headers={"X-Registry-Auth": header},
                    stream=True,
                )
                with response:
                    # A failure after the pull began comes in the stream, not as a status.
                    failed = [p["error"] for p in progress(response.raw) if p.get("error")]
        except EngineUnavailable as exc:
            if isinstance(
                exc.__cause__,
                (requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError),
            ):
                raise ImagePullFailed(
                    f"pull {image}: no progress for {self._client.timeout:g}s (engine_timeout): "
                    "the registry does not answer or the transfer stalled"
                ) from exc
            raise
        except EngineError as exc:
            raise ImagePullFailed(str(exc)) from exc
        if failed:
            raise ImagePullFailed(f"pull {image}: {failed[-1]}")

    def load_image(self, chunks: Iterable[bytes]) -> list[str]:
        """POST /images/load with the archive as a chunked body: sent as `chunks` come,
        never read whole (archives may be gigabytes). engine_timeout bounds each wait for
        the engine's next word, as in `pull`. Its error, in the stream or as a status, is
        ImageLoadFailed; the references and IDs it says it loaded are returned."""
        try:
            with self._client.call("load image archive"):
                response = self._client.post(
                    "/images/load", params={"quiet": "0"}, data=iter(chunks), stream=True
                )
                with response:
                    said = list(progress(response.raw))
        except EngineUnavailable:
            raise
        except EngineError as exc:
            raise ImageLoadFailed(str(exc)) from exc
        failed = [str(p["error"]) for p in said if p.get("error")]
        if failed:
            raise ImageLoadFailed(failed[-1])
        return loaded_names(said)

    def registry_digest(self, image: str, auth: RegistryAuth | None = None) -> str:
        """GET /distribution/NAME/json: the engine asks the registry for the manifest's
        descriptor (a HEAD or GET of one manifest), with `auth` only: {} is anonymous, as
        in `pull` (the SDK's own call would look for a docker config file instead).
        Podman has no such endpoint: there healerd asks the registry itself (manifest.py)."""
        credentials = registry_auth(image, auth)
        header = docker.auth.encode_header(credentials)
        try:
            with self._client.call(f"check {image}"):
                if self._client.engine_kind == PODMAN:
                    return manifest.registry_digest(image, credentials, self._client.timeout)
                response = self._client.get(
                    "/distribution/{0}/json", image, headers={"X-Registry-Auth": header}
                )
                found = response.json()
        except EngineUnavailable:
            raise
        except EngineError as exc:
            raise ImagePullFailed(str(exc)) from exc
        digest = (found.get("Descriptor") or {}).get("digest")
        if not isinstance(digest, str) or not digest.startswith("sha256:"):
            raise ImagePullFailed(f"check {image}: the registry gave no digest")
        return digest

    def local_digests(self, image: str) -> tuple[str, ...]:
        with self._client.call(f"inspect image {image}"):
            found = self._client.api.inspect_image(image)
        return tuple(str(d) for d in found.get("RepoDigests") or ())

    def list_images(self) -> list[LocalImage]:
        with self._client.call("list images"):
            return local_images(self._client.api.images())

    def images_in_use(self) -> set[str]:
        return {str(c["ImageID"]) for c in self._client.container_rows() if c.get("ImageID")}

    def remove_image(self, image_id: str) -> bool:
        try:
            with self._client.call(f"remove image {image_id[:19]}"):
                self._client.api.remove_image(image_id, force=False, noprune=False)
        except EngineError as exc:
            # 409: a container uses it (perhaps one made a moment ago) or several
            # repositories name it. Never forced.
            cause = exc.__cause__
            if isinstance(cause, docker.errors.APIError) and cause.status_code in (404, 409):
                _log.info("image %s kept: %s", image_id[:19], cause.explanation or cause)
                return False
            raise
        return True


__all__ = ["DockerImages", "loaded_names", "local_image", "local_images", "progress"]
