"""A bundle's archive (healerctl bundle): what it holds and how its manifest is checked.

A bundle is one plain tar, so that it can be checked member by member before anything
of it is used, and written and read at the disk's speed (docker save's layers are not
compressed; `--gzip` trades time for size, and a `.tar.gz` is read as well). Members:

- `manifest.json` first: the format version, the bundle's name, when it was made, every
  file with its sha256, size and mode, and the images (the archive's sha256, and each
  image's reference, ID, tags, repository digests and the services that name it);
- `config/...`: the service files and project directories, laid out as conf.d holds
  them, installed as `conf.d/<name>.bundle`;
- `images.tar`: every image, as one `docker save` (layers shared once).

Nothing else may be in it: an unlisted member, a link, a device, a path leaving the
archive or a checksum that differs refuses the whole bundle.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import IO, Any

FORMAT = 1
MANIFEST = "manifest.json"
CONFIG = "config"
IMAGES = "images.tar"
MANIFEST_LIMIT = 8 << 20
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
PIECE = 1 << 20


class BundleError(Exception):
    """The bundle cannot be made or used; the message says which file and why."""


@dataclass(frozen=True)
class FileEntry:
    path: str  # in the archive: config/...
    sha256: str
    size: int
    mode: int  # permission bits
    why: str = ""  # what read it: "service file", "env file (secret values)", ...


@dataclass(frozen=True)
class ImageEntry:
    ref: str  # as a service names it
    id: str
    tags: tuple[str, ...] = ()
    digests: tuple[str, ...] = ()
    services: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    name: str
    created: str
    files: tuple[FileEntry, ...]
    images: tuple[ImageEntry, ...]
    images_sha256: str = ""
    images_size: int = 0
    notes: tuple[str, ...] = ()
    format: int = FORMAT
    healerd: str = ""
    entries: tuple[str, ...] = field(default=())  # conf.d's names in the bundle

    def to_json(self) -> bytes:
        return (json.dumps(asdict(self), indent=2, sort_keys=True) + "\n").encode()


def sha256_of(stream: IO[bytes]) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    while piece := stream.read(PIECE):
        h.update(piece)
        size += len(piece)
    return h.hexdigest(), size


def _safe_path(path: object) -> str:
    """A member's path: relative, under config/, no `..`, no empty or odd part."""
    if not isinstance(path, str) or not path.startswith(f"{CONFIG}/"):
        raise BundleError(f"manifest: file path {path!r} is not under {CONFIG}/")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\0" in path or "\\" in path:
        raise BundleError(f"manifest: file path {path!r} is not a plain relative path")
    return path


def _file(raw: Any) -> FileEntry:
    if not isinstance(raw, dict):
        raise BundleError("manifest: a file entry is not a mapping")
    try:
        entry = FileEntry(_safe_path(raw["path"]), str(raw["sha256"]), int(raw["size"]),
                          int(raw["mode"]) & 0o755, str(raw.get("why", "")))  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise BundleError(f"manifest: file entry {raw.get('path')!r}: {exc}") from None
    return entry


def _image(raw: Any) -> ImageEntry:
    if not isinstance(raw, dict) or not isinstance(raw.get("ref"), str):
        raise BundleError("manifest: an image entry has no ref")
    listed = {k: tuple(str(v) for v in raw.get(k) or ()) for k in ("tags", "digests", "services")}
    return ImageEntry(raw["ref"], str(raw.get("id", "")), **listed)


def parse_manifest(data: bytes) -> Manifest:
    """The manifest, checked: its format, the bundle's name, every path."""
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise BundleError(f"manifest: not JSON: {exc}") from None
    if isinstance(raw, list):
        raise BundleError(
            f"not a bundle: its {MANIFEST} is docker save's (an image archive: docker load it)"
        )
    if not isinstance(raw, dict):
        raise BundleError("manifest: not a JSON object")
    if raw.get("format") != FORMAT:
        raise BundleError(f"manifest: format {raw.get('format')!r}; this healerd reads {FORMAT}")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise BundleError(f"manifest: bundle name {name!r} is not a plain name")
    files = tuple(_file(f) for f in raw.get("files") or ())
    if len({f.path for f in files}) != len(files):
        raise BundleError("manifest: a file is listed twice")
    return Manifest(
        name=name,
        created=str(raw.get("created", "")),
        files=files,
        images=tuple(_image(i) for i in raw.get("images") or ()),
        images_sha256=str(raw.get("images_sha256", "")),
        images_size=int(raw.get("images_size") or 0),
        notes=tuple(str(n) for n in raw.get("notes") or ()),
        healerd=str(raw.get("healerd", "")),
        entries=tuple(str(e) for e in raw.get("entries") or ()),
    )


def read_manifest(tar: tarfile.TarFile) -> Manifest:
    try:
        member = tar.getmember(MANIFEST)
    except KeyError:
        raise BundleError(f"not a bundle: no {MANIFEST}") from None
    stream = tar.extractfile(member)
    if stream is None or member.size > MANIFEST_LIMIT:
        raise BundleError(f"{MANIFEST} is not a regular file of at most 8 MiB")
    return parse_manifest(stream.read())


def members(tar: tarfile.TarFile, manifest: Manifest) -> Iterator[tuple[tarfile.TarInfo, str]]:
    """Every member with the sha256 the manifest gives it; BundleError for a member that
    is not a regular file or not listed, or a listed file that is missing."""
    wanted = {f.path: f.sha256 for f in manifest.files}
    if manifest.images:
        wanted[IMAGES] = manifest.images_sha256
    seen: set[str] = set()
    for member in tar.getmembers():
        if member.isdir() and (member.name == CONFIG or member.name.startswith(f"{CONFIG}/")):
            continue
        if member.name == MANIFEST:
            continue
        if not member.isfile():
            raise BundleError(f"{member.name}: not a regular file (links are not bundled)")
        if member.name not in wanted or member.name in seen:
            raise BundleError(f"{member.name}: not listed in the manifest (or twice)")
        seen.add(member.name)
        yield member, wanted[member.name]
    missing = sorted(set(wanted) - seen)
    if missing:
        raise BundleError(f"{missing[0]}: listed in the manifest but not in the archive")


def verify(tar: tarfile.TarFile, manifest: Manifest) -> None:
    """Every member's sha256 against the manifest, read whole before anything is used."""
    for member, expected in members(tar, manifest):
        stream = tar.extractfile(member)
        assert stream is not None  # a regular file
        digest, _ = sha256_of(stream)
        if digest != expected:
            raise BundleError(
                f"{member.name}: sha256 {digest[:16]}... but the manifest says "
                f"{expected[:16]}...: the bundle was changed or damaged"
            )


def is_bundle(path: str) -> bool:
    """Whether the archive at `path` is a bundle rather than an image archive (both hold
    a manifest.json: docker save's is a list, a bundle's an object with its format): for
    the images directory, which takes both."""
    try:
        with open_bundle(path) as tar:
            member = tar.getmember(MANIFEST)
            stream = tar.extractfile(member) if member.size <= MANIFEST_LIMIT else None
            raw = json.loads(stream.read()) if stream is not None else None
    except (BundleError, KeyError, ValueError, tarfile.TarError, OSError, EOFError):
        return False
    return isinstance(raw, dict) and "format" in raw


def open_bundle(path: str) -> tarfile.TarFile:
    """The archive (plain, or compressed as tarfile reads it); BundleError when it is not
    a tar at all."""
    try:
        return tarfile.open(path, "r:*")
    except tarfile.TarError:
        raise BundleError(f"{path}: not a tar archive (plain, gzip, bzip2 or xz)") from None
    except OSError as exc:
        raise BundleError(f"{path}: cannot be read: {exc.strerror or exc}") from None


__all__ = [
    "CONFIG",
    "FORMAT",
    "IMAGES",
    "MANIFEST",
    "NAME_RE",
    "PIECE",
    "BundleError",
    "FileEntry",
    "ImageEntry",
    "Manifest",
    "is_bundle",
    "members",
    "open_bundle",
    "parse_manifest",
    "read_manifest",
    "sha256_of",
    "verify",
]
