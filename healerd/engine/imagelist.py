"""The engine's image list as LocalImage values (no docker import: plain JSON)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from healerd.engine import LocalImage

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
