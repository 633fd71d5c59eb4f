"""Images saved as `docker save` does (ImageArchive; the load is DockerImages.load_image,
the images directory's), for bundles carried to hosts with no registry. It streams: an
archive of gigabytes never sits in memory, and engine_timeout bounds each wait for the
engine's next piece, not the whole transfer."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from healerd.engine.docker.client import DockerClient

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


__all__ = ["DockerArchive"]
