"""The images directory's decisions, pure: which files count as image archives, when a
file is complete enough to read, and what to do with an archive of a given digest
(`ArchiveBook`). healerd.daemon.imagesdir does the I/O (the watcher, the hashing, the
engine's load) and keeps the book in `state_dir`.

An archive is known by the sha256 of its bytes, not by its name: a file renamed is not
loaded again, a file rewritten (another digest) is, and a refused one is tried again only
once its bytes change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

SUFFIXES = (".tar", ".tar.gz", ".tar.zst")
MAX_RECORDS = 1_000  # archives remembered at most (the oldest forgotten first)


def is_archive_name(name: str) -> bool:
    """`*.tar`, `*.tar.gz`, `*.tar.zst`, not a dotfile (a copy tool's temporary name,
    rsync's `.name.XXXXXX`, is complete only once renamed to its own)."""
    return not name.startswith(".") and name.endswith(SUFFIXES) and name not in SUFFIXES


@dataclass(frozen=True)
class FileState:
    """What stat says of a file: the same four values twice, `settle` seconds apart, and
    no writer seen, make it complete (healerd.daemon.imagesdir)."""

    size: int
    mtime_ns: int
    inode: int
    device: int

    @property
    def stamp(self) -> str:
        """The four values as a record keeps them: the same stamp under the same name is
        the same bytes (as buildctx keeps a file's digest), so a restart hashes nothing."""
        return f"{self.size}:{self.mtime_ns}:{self.inode}:{self.device}"


def settled(
    first: FileState | None, seen_at: float, now: FileState, at: float, settle: float
) -> bool:
    """Whether a file unchanged since `first` (seen at `seen_at`) has stayed so for `settle`."""
    return first == now and at - seen_at >= settle


class Verdict(Enum):
    LOAD = "load"
    LOADED = "loaded"  # loaded before (this start or an earlier one): never again
    REFUSED = "refused"  # refused before with these bytes: not tried until they change


@dataclass(frozen=True)
class Archive:
    """One archive's record: its digest, the file it was read from, and what came of it."""

    digest: str  # sha256:... of the file's bytes
    file: str  # its name in images_dir when it was read
    at: float  # when it was loaded or refused (wall clock)
    size: int = 0  # the file's bytes
    images: tuple[str, ...] = ()  # the image IDs it brought (config digests)
    tags: tuple[str, ...] = ()  # the references it tagged
    error: str = ""  # why it was refused ("" when loaded)
    stamp: str = ""  # the file's FileState.stamp when it was read
    # manifest or index digest -> image ID, where the archive carries the manifest's bytes
    manifests: Mapping[str, str] = field(default_factory=dict)

    def view(self) -> dict[str, object]:
        return {
            "stamp": self.stamp,
            "digest": self.digest,
            "file": self.file,
            "at": self.at,
            "size": self.size,
            "images": list(self.images),
            "tags": list(self.tags),
            "error": self.error,
            "manifests": dict(self.manifests),
        }


def archive_of(raw: object) -> Archive | None:
    """A record as the state file kept it; None for anything else."""
    if not isinstance(raw, Mapping):
        return None
    digest, name, at = raw.get("digest"), raw.get("file"), raw.get("at")
    if not (isinstance(digest, str) and digest.startswith("sha256:") and isinstance(name, str)):
        return None

    def strings(key: str) -> tuple[str, ...]:
        found = raw.get(key)
        return tuple(s for s in found if isinstance(s, str)) if isinstance(found, list) else ()

    size, error, stamp = raw.get("size"), raw.get("error"), raw.get("stamp")
    found = raw.get("manifests")
    manifests = found if isinstance(found, Mapping) else {}
    return Archive(
        digest=digest,
        file=name,
        at=float(at) if isinstance(at, (int, float)) else 0.0,
        size=size if isinstance(size, int) else 0,
        images=strings("images"),
        tags=strings("tags"),
        error=error if isinstance(error, str) else "",
        stamp=stamp if isinstance(stamp, str) else "",
        manifests={str(k): str(v) for k, v in manifests.items() if isinstance(v, str)},
    )


@dataclass
class ArchiveBook:
    """Every archive read, by digest: loaded ones and refused ones."""

    records: dict[str, Archive] = field(default_factory=dict)

    @classmethod
    def of(cls, data: object) -> ArchiveBook:
        """The book a state file kept (`{"archives": [...]}`); anything else is empty."""
        raw = data.get("archives") if isinstance(data, Mapping) else None
        found = (archive_of(r) for r in raw) if isinstance(raw, list) else ()
        return cls({a.digest: a for a in found if a is not None})

    def saved(self) -> dict[str, object]:
        kept = sorted(self.records.values(), key=lambda a: a.at)[-MAX_RECORDS:]
        return {"archives": [a.view() for a in kept]}

    def verdict(self, digest: str) -> Verdict:
        record = self.records.get(digest)
        if record is None:
            return Verdict.LOAD
        return Verdict.REFUSED if record.error else Verdict.LOADED

    def note(self, archive: Archive) -> None:
        self.records[archive.digest] = archive

    def known(self, name: str, state: FileState) -> str | None:
        """The digest of the file `name` read before in this very state, None if not."""
        for record in self.records.values():
            if record.file == name and record.stamp and record.stamp == state.stamp:
                return record.digest
        return None

    def renamed(self, digest: str, name: str, state: FileState) -> bool:
        """The same bytes under another name (or touched): the record follows the file.
        True when the record changed (to be saved)."""
        record = self.records.get(digest)
        if record is None or (record.file, record.stamp) == (name, state.stamp):
            return False
        self.records[digest] = replace(record, file=name, stamp=state.stamp)
        return True

    def loaded(self) -> list[Archive]:
        return [a for a in self.records.values() if not a.error]

    def refused(self, present: Iterable[str]) -> list[Archive]:
        """The refused archives whose files (by digest) are still in the directory."""
        names = set(present)
        return [a for a in self.records.values() if a.error and a.digest in names]

    def loaded_ids(self) -> frozenset[str]:
        return frozenset(i for a in self.loaded() for i in a.images)

    def proven_id(self, reference: str) -> str | None:
        """The ID of the loaded image whose manifest (or index) an archive carried under
        the digest `reference` pins (`repo[:tag]@sha256:...`), else None. Docker's own
        image store keeps no digest for a loaded image, so healerd keeps it: the digest
        is of bytes healerd hashed itself, so the repository part need not match (a
        manifest's digest names its content wherever it is stored)."""
        _, at, digest = reference.partition("@")
        if not at or not digest.startswith("sha256:"):
            return None
        for archive in sorted(self.loaded(), key=lambda a: -a.at):
            found = archive.manifests.get(digest)
            if found is not None:
                return found
        return None


def declared_loaded(book: ArchiveBook, declared: Iterable[str]) -> frozenset[str]:
    """The IDs of loaded images whose tags (or carried manifest digests) a declared
    service names: image GC keeps them (as it keeps any image a declared service names;
    said here once more by ID, so that a tag the engine lists in another spelling, or a
    digest the engine does not know, does not lose it)."""
    declared = list(declared)
    wanted = {_normal(r) for r in declared}
    tagged = (
        i for a in book.loaded() if any(_normal(t) in wanted for t in a.tags) for i in a.images
    )
    pinned = (book.proven_id(r) for r in declared)
    return frozenset((*tagged, *(i for i in pinned if i is not None)))


def _normal(reference: str) -> str:
    """A tag reference as the engine lists it: Docker Hub's familiar form, `:latest` added."""
    name = reference
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        name = name.removeprefix(prefix)
    if name.startswith("library/") and name.count("/") == 1:
        name = name.removeprefix("library/")
    slash, colon = name.rfind("/"), name.rfind(":")
    return name if colon > slash or "@" in name else f"{name}:latest"


__all__ = [
    "SUFFIXES",
    "Archive",
    "ArchiveBook",
    "FileState",
    "Verdict",
    "archive_of",
    "declared_loaded",
    "is_archive_name",
    "settled",
]
