"""`GET /v1/images` (`healerctl images`): the images healerd knows, as one list: those a
declared service names (and which), those an auto-update pin names, those loaded from
`images_dir` (from which archive, when), those healerd pulled; each with its size. An
image healerd knows nothing of is not listed (it is someone else's). The refused
archives still in the directory follow, with their reasons."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from healerd.core.imagechoice import names
from healerd.core.imagefiles import Archive, ArchiveBook
from healerd.engine import LocalImage


@dataclass(frozen=True)
class Known:
    """What healerd knows, apart from the engine's list."""

    declared: Mapping[str, str]  # service -> the image it names (pinned where it follows)
    pinned: Mapping[str, str]  # service -> its auto-update pin's reference
    book: ArchiveBook
    pulled_refs: frozenset[str]  # pulled or built
    pulled_ids: frozenset[str]
    built_refs: frozenset[str] = frozenset()


def _names(image: LocalImage, ref: str, book: ArchiveBook) -> bool:
    """`ref` names `image` for the engine, or by a digest an archive proved for it."""
    return names(image, ref) or ("@" in ref and book.proven_id(ref) == image.id)


def _row(image: LocalImage, known: Known, by_id: Mapping[str, Archive]) -> dict[str, Any] | None:
    book = known.book
    services = sorted(s for s, ref in known.declared.items() if _names(image, ref, book))
    pinned = sorted(s for s, ref in known.pinned.items() if _names(image, ref, book))
    archive = by_id.get(image.id)
    pulled = image.id in known.pulled_ids or any(names(image, r) for r in known.pulled_refs)
    if not (services or pinned or archive or pulled):
        return None
    built = any(names(image, r) for r in known.built_refs)
    loaded = None
    if archive is not None:
        carried = sorted(m for m, i in archive.manifests.items() if i == image.id)
        loaded = {
            "file": archive.file,
            "at": archive.at,
            "digest": archive.digest,
            "manifests": carried,  # manifest digests the archive proves for this image
        }
    return {
        "id": image.id,
        "tags": list(image.tags),
        "digests": list(image.digests),
        "size": image.size,
        "created": image.created,
        "services": services,
        "pinned": pinned,
        "loaded": loaded,
        "pulled": pulled and not built,
        "built": built,
    }


def _missing(
    images: list[LocalImage], declared: Mapping[str, str], book: ArchiveBook
) -> list[dict[str, Any]]:
    """Declared images the engine does not have: each reference with its services."""
    absent: dict[str, list[str]] = {}
    for service, ref in sorted(declared.items()):
        if not any(_names(i, ref, book) for i in images):
            absent.setdefault(ref, []).append(service)
    return [{"reference": ref, "services": s} for ref, s in sorted(absent.items())]


def images_payload(
    images: Iterable[LocalImage], known: Known, refused: Iterable[Archive], images_dir: str
) -> dict[str, Any]:
    """The payload: known images (largest first), then the refused archives."""
    by_id = {i: a for a in known.book.loaded() for i in a.images}
    images = list(images)
    rows = [r for r in (_row(i, known, by_id) for i in images) if r is not None]
    rows.sort(key=lambda r: (-int(r["size"]), str(r["id"])))
    return {
        "images": rows,
        "missing": _missing(images, known.declared, known.book),
        "images_dir": images_dir,
        "refused": [
            {"file": a.file, "digest": a.digest, "at": a.at, "size": a.size, "error": a.error}
            for a in sorted(refused, key=lambda a: a.file)
        ],
    }


__all__ = ["Known", "images_payload"]
