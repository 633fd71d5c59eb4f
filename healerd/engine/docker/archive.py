"""Images saved and loaded as `docker save` and `docker load` do (ImageArchive), for
bundles carried to hosts with no registry. Both stream: an archive of gigabytes never
sits in memory, and engine_timeout bounds each wait for the engine's next piece, not the
whole transfer."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from healerd.engine.api import EngineError
from healerd.engine.docker.client import DockerClient
from healerd.engine.docker.images import progress

PIECE = 1 << 20


class DockerArchive:
    """ImageArchive."""

    _client: DockerClient

    def save_images(self, refs: Sequence[str]) -> Iterator[bytes]:
        for ref in refs:  # the engine's own save names a missing image vaguely
            with self._client.call(f"inspect image {ref}"):
                self._client.api.inspect_image(ref)
        with self._client.call(f"save {len(refs)} image(s)"):
            response = self._client.get("/images/get", params={"names": list(refs)}, stream=True)
            with response:
                yield from response.iter_content(PIECE)

    def load_image(self, chunks: Iterable[bytes]) -> list[str]:
        loaded: list[str] = []
        with self._client.call("load images"):
            response = self._client.post(
                "/images/load", params={"quiet": "0"}, data=iter(chunks), stream=True
            )
            with response:
                for message in progress(response.raw):
                    if message.get("error"):
                        raise EngineError(f"load images: {message['error']}")
                    text = str(message.get("stream") or "")
                    for prefix in ("Loaded image: ", "Loaded image ID: "):
                        if text.startswith(prefix):
                            loaded.append(text[len(prefix) :].strip())
        return loaded


__all__ = ["DockerArchive"]
