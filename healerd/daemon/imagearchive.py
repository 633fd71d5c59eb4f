"""One image archive (what `docker save` writes, plain, gzip or zstd) read and loaded.

`inspect_archive` reads the file once, in pieces: the sha256 of its bytes (how the
images directory knows it), and, through the decompressor, the tar itself, whose
`manifest.json` names each image's config (its ID) and layers; a corrupt archive (a
truncated copy, a bad gzip or zstd frame, no manifest, a layer missing, a config whose
bytes are not its name) is `CorruptArchive` with the reason, before the engine sees a
byte of it. `load_archive` then streams the decompressed tar to the engine's load API
(healerd.engine's `load_image`): never a whole archive in memory.

zstd through the `zstandard` package (Debian's python3-zstandard): the standard library
has no zstd before Python 3.14.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Self, cast

import zstandard

from healerd.engine import ImageStore

CHUNK = 1 << 20
MAX_MANIFEST = 4 << 20  # bytes of manifest.json, or of an image config, read at most


class CorruptArchive(Exception):
    """The archive cannot be loaded: the message says why, for the operator."""


@dataclass(frozen=True)
class ArchiveFacts:
    digest: str  # sha256:... of the file's bytes
    size: int
    images: tuple[str, ...]  # image IDs (sha256 of each config)
    tags: tuple[str, ...]  # the references manifest.json gives them
    # Manifest (or index) digests whose bytes the archive carries -> the image ID they
    # lead to: an OCI layout's blobs (docker save of Docker 25+, skopeo, crane). Shown;
    # a pin is still the engine's to resolve (docs/user-guide.md, Images from a directory).
    manifests: tuple[tuple[str, str], ...] = ()


class _Hashing(io.RawIOBase):
    """The file's bytes as read, hashed on the way."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self.sha = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._raw.read(len(buffer))
        self.sha.update(data)
        self.size += len(data)
        buffer[: len(data)] = data
        return len(data)

    def drain(self) -> None:
        while self.read(CHUNK):
            pass


_EOF_HEADER: type[Exception] = getattr(tarfile, "EOFHeaderError")  # noqa: B009 (not typed)


class _Ending(tarfile.TarInfo):
    """tarfile ends a stream quietly at a missing or cut header; a whole archive ends with
    the zero block that marks its end, and this notes whether it came."""

    @classmethod
    def fromtarfile(cls, tar: tarfile.TarFile) -> Self:
        try:
            return super().fromtarfile(tar)
        except _EOF_HEADER:
            setattr(tar, "healerd_ended", True)  # noqa: B010 (tarfile's own object)
            raise


def _decompressed(path: Path, raw: io.BufferedIOBase) -> io.BufferedIOBase:
    name = path.name
    if name.endswith(".tar.gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if name.endswith(".tar.zst"):
        reader = zstandard.ZstdDecompressor().stream_reader(
            cast(IO[bytes], raw), read_across_frames=True
        )
        return io.BufferedReader(reader, CHUNK)
    return raw


@contextmanager
def _reasons(path: Path) -> Iterator[None]:
    """The decompressors' and tarfile's errors as one CorruptArchive with the reason."""
    try:
        yield
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error, zstandard.ZstdError) as exc:
        why = str(exc) or type(exc).__name__
        raise CorruptArchive(f"{path.name}: not a whole image archive: {why}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptArchive(f"{path.name}: unreadable manifest.json: {exc}") from None


def inspect_archive(path: Path) -> ArchiveFacts:
    """Read the whole file once: its digest, and the images its manifest names, checked
    against the tar's members. Raises CorruptArchive (or OSError)."""
    with path.open("rb") as fh:
        raw = _Hashing(fh)
        buffered = io.BufferedReader(raw, CHUNK)
        manifest: list[Any] | None = None
        members: set[str] = set()
        configs: dict[str, str] = {}  # member name -> sha256 of its bytes
        docs: dict[str, Any] = {}  # sha256 -> a manifest or index blob named by it
        with _reasons(path):
            stream = _decompressed(path, buffered)
            with tarfile.open(fileobj=stream, mode="r|", tarinfo=_Ending) as tar:
                for member in tar:
                    members.add(member.name.removeprefix("./"))
                    if not member.isfile() or member.size > MAX_MANIFEST:
                        continue
                    name = member.name.removeprefix("./")
                    if name == "manifest.json" or name.endswith(".json") or "blobs/" in name:
                        data = _read(tar, member)
                        configs[name] = hashlib.sha256(data).hexdigest()
                        if name == "manifest.json":
                            manifest = json.loads(data)
                        elif _named_by_digest(name, configs[name]) and data[:1] == b"{":
                            _keep_manifest(docs, configs[name], data)
                if not getattr(tar, "healerd_ended", False):
                    raise CorruptArchive(f"{path.name}: cut short (no end-of-archive block)")
            for rest in (stream, buffered):  # a compressed stream's end checks its CRC
                while rest.read(CHUNK):
                    pass
            raw.drain()
        images, tags = _images(path, manifest, members, configs)
        led = _manifests(docs, set(images))
        return ArchiveFacts(f"sha256:{raw.sha.hexdigest()}", raw.size, images, tags, led)


def _named_by_digest(name: str, hexdigest: str) -> bool:
    return name.startswith("blobs/sha256/") and name.rsplit("/", 1)[-1] == hexdigest


def _keep_manifest(docs: dict[str, Any], hexdigest: str, data: bytes) -> None:
    """A blob that is an image manifest (config) or an index (manifests), by digest."""
    try:
        doc = json.loads(data)
    except ValueError:
        return
    if isinstance(doc, dict) and ("config" in doc or "manifests" in doc):
        docs[f"sha256:{hexdigest}"] = doc


def _manifests(docs: dict[str, Any], images: set[str]) -> tuple[tuple[str, str], ...]:
    """Each manifest or index digest -> the loaded image its config (or a child's) is.
    An index whose children lead to more than one loaded image (several platforms) is
    left out: which one a pin of it means is the platform's choice, not healerd's."""
    found: dict[str, str] = {}
    for digest, doc in docs.items():
        config = doc.get("config")
        if isinstance(config, dict) and config.get("digest") in images:
            found[digest] = str(config["digest"])
    for digest, doc in docs.items():
        children = doc.get("manifests")
        led = {
            found[str(c.get("digest"))]
            for c in (children if isinstance(children, list) else ())
            if isinstance(c, dict) and str(c.get("digest")) in found
        }
        if len(led) == 1:
            found.setdefault(digest, led.pop())
    return tuple(sorted(found.items()))


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    fh = tar.extractfile(member)
    return fh.read() if fh is not None else b""


def _images(
    path: Path, manifest: object, members: set[str], configs: dict[str, str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """manifest.json's images: each config present and named by its own sha256, each
    layer present; their IDs and tags."""
    if not isinstance(manifest, list) or not manifest:
        raise CorruptArchive(f"{path.name}: no manifest.json (is it what docker save writes?)")
    images: list[str] = []
    tags: list[str] = []
    for entry in manifest:
        config = entry.get("Config") if isinstance(entry, dict) else None
        layers = entry.get("Layers") if isinstance(entry, dict) else None
        if not isinstance(config, str) or not isinstance(layers, list):
            raise CorruptArchive(f"{path.name}: manifest.json names no config or layers")
        missing = [str(x) for x in (config, *layers) if str(x).removeprefix("./") not in members]
        if missing:
            raise CorruptArchive(f"{path.name}: {missing[0]} is missing from the archive")
        hexdigest = config.removesuffix(".json").rsplit("/", 1)[-1]
        if configs.get(config.removeprefix("./")) != hexdigest:
            raise CorruptArchive(f"{path.name}: {config} does not match its digest")
        images.append(f"sha256:{hexdigest}")
        tags.extend(t for t in entry.get("RepoTags") or () if isinstance(t, str))
    return tuple(dict.fromkeys(images)), tuple(dict.fromkeys(tags))


def _chunks(stream: io.BufferedIOBase) -> Iterator[bytes]:
    while data := stream.read(CHUNK):
        yield data


class ArchiveChanged(Exception):
    """The bytes loaded are not those of the digest expected (the file was replaced)."""


def load_archive(engine: ImageStore, path: Path, digest: str | None = None) -> list[str]:
    """Load one archive file (plain, .gz or .zst) into the engine, streamed; the image
    references and IDs the engine says it brought. Raises CorruptArchive when the file
    cannot be decompressed, healerd.engine's ImageLoadFailed when the engine refuses
    it, EngineUnavailable, OSError; with `digest` (inspect_archive's), ArchiveChanged
    when the bytes sent were other ones. (The images directory calls it after
    `inspect_archive`; `healerctl bundle load` may call it alone.)"""
    with path.open("rb") as fh, _reasons(path):
        raw = _Hashing(fh)
        buffered = io.BufferedReader(raw, CHUNK)
        stream = _decompressed(path, buffered)
        said = engine.load_image(_chunks(stream))
        for rest in (stream, buffered):
            while rest.read(CHUNK):
                pass
    if digest is not None and f"sha256:{raw.sha.hexdigest()}" != digest:
        raise ArchiveChanged(f"{path.name} changed while it was loaded")
    return said


__all__ = ["ArchiveChanged", "ArchiveFacts", "CorruptArchive", "inspect_archive", "load_archive"]
