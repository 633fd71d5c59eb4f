"""`healerctl bundle create`: the archive written (healerd.daemon.bundlefile's layout).

The images are streamed from the engine's save into a temporary file beside the output
(hashed on the way): a tar member's size must be known before its data, and the
manifest, which holds that hash, comes first. The archive itself is written under a new
name beside the output, mode 0600 (it may hold env files' secrets), synced and renamed
over it: whole or not at all, and a symbolic link at the output is replaced, never
followed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol

from healerd import __version__
from healerd.cli.bundle.collect import Contents
from healerd.daemon.bundlefile import (
    IMAGES,
    MANIFEST,
    NAME_RE,
    BundleError,
    FileEntry,
    ImageEntry,
    Manifest,
    sha256_of,
)
from healerd.engine import ImageArchive, ImageStore, LocalImage


class EngineForCreate(ImageArchive, ImageStore, Protocol):
    """What a bundle's making needs of the engine."""


def _spool(engine: ImageArchive, refs: list[str], directory: Path) -> tuple[IO[bytes], str, int]:
    spool = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 (returned open)
    h, size = hashlib.sha256(), 0
    try:
        for piece in engine.save_images(refs):
            spool.write(piece)
            h.update(piece)
            size += len(piece)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool, h.hexdigest(), size


def _image_entries(engine: ImageStore, contents: Contents) -> list[ImageEntry]:
    """Each image the services name, with its ID, tags and digests as the engine lists
    them; BundleError naming an image that is not in the engine."""
    listed = engine.list_images()
    out = []
    for ref, services in sorted(contents.images.items()):
        if not engine.image_present(ref):
            raise BundleError(
                f"image {ref} (service {', '.join(services)}) is not in the local engine: "
                "pull or build it first"
            )
        local = _find(listed, ref, engine)
        out.append(ImageEntry(ref, local.id if local else "", local.tags if local else (),
                              local.digests if local else (), tuple(services)))  # fmt: skip
    return out


def _find(listed: list[LocalImage], ref: str, engine: ImageStore) -> LocalImage | None:
    full = ref if ":" in ref.rsplit("/", 1)[-1] or "@" in ref else f"{ref}:latest"
    for image in listed:
        if full in image.tags or ref in image.tags or ref in image.digests:
            return image
    return None


def _file_entries(contents: Contents) -> list[FileEntry]:
    out = []
    for path, (source, why) in sorted(contents.files.items()):
        with source.open("rb") as f:
            digest, size = sha256_of(f)
        out.append(FileEntry(path, digest, size, stat.S_IMODE(source.stat().st_mode) & 0o755, why))
    return out


def _add(tar: tarfile.TarFile, name: str, size: int, stream: IO[bytes], mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, mode, int(datetime.now(UTC).timestamp())
    tar.addfile(info, stream)


@contextlib.contextmanager
def _private(path: Path) -> Iterator[IO[bytes]]:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bundle(
    contents: Contents, name: str, output: Path, engine: EngineForCreate, *, gzip: bool = False
) -> Manifest:
    """The bundle of `contents` as `output`; BundleError (or EngineError) on failure,
    and then nothing is written."""
    if not NAME_RE.fullmatch(name):
        raise BundleError(f"bundle name {name!r}: letters, digits, '_', '.' or '-'")
    images = _image_entries(engine, contents)
    files = _file_entries(contents)
    refs = [i.ref for i in images]
    spool, digest, size = _spool(engine, refs, output.parent) if refs else (io.BytesIO(), "", 0)
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    manifest = Manifest(name, created, tuple(files), tuple(images), digest, size,
                        tuple(contents.notes), healerd=__version__,
                        entries=tuple(contents.entries))  # fmt: skip
    with spool, _private(output) as out:
        options: dict[str, Any] = {"compresslevel": 1} if gzip else {}
        with tarfile.open(fileobj=out, mode="w:gz" if gzip else "w", **options) as tar:
            data = manifest.to_json()
            _add(tar, MANIFEST, len(data), io.BytesIO(data), 0o644)
            for entry in files:
                with contents.files[entry.path][0].open("rb") as f:
                    _add(tar, entry.path, entry.size, f, entry.mode)
            if refs:
                _add(tar, IMAGES, size, spool, 0o644)
    return manifest


__all__ = ["EngineForCreate", "write_bundle"]
