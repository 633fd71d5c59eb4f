"""An image reference as an engine takes it for a pull: repository, and tag or digest."""

from __future__ import annotations


def split_reference(image: str) -> tuple[str, str | None]:
    """`repo[:tag][@digest]` -> (repo, digest or tag); a port in the host is no tag."""
    if "@" in image:
        repo, digest = image.split("@", 1)
        if ":" in repo.rsplit("/", 1)[-1]:
            repo = repo.rsplit(":", 1)[0]  # repo:tag@digest: the digest decides
        return repo, digest
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = image.rsplit(":", 1)
        return repo, tag
    return image, "latest"


__all__ = ["split_reference"]
