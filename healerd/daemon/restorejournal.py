"""The restore journal: a restore of a service's volumes from a snapshot
(healerd.daemon.snapshots) written down before it touches any volume, so that one that
a stop of healerd, a crash or a power cut cut short is finished at the next start,
instead of the service running on a half-restored volume.

No database: one small file per service, `state_dir/snapshots/<service>/restoring.json`,
replaced whole (write_atomic: written, synced, renamed, its directory synced). It names
the snapshot and, for each volume, its mount point, the directory its own entries go
aside to while the snapshot is copied in (`.healerd-restore-<data>-<snapshot>-<random>`
beside the mount point, on the same filesystem; inside it when its parent is another
filesystem), the mount point's owner, mode and times before, and the phase it is in:

- moving (`copying: false`): the mount point holds nothing but the volume's own
  entries; those already moved are in the aside directory (which may not exist yet). A
  rename is atomic, so each entry is in one place or the other, never both.
- copying (`copying: true`): every entry of the volume's own is in the aside directory
  (the moves synced before the journal says so), and the mount point holds nothing but
  copies of the snapshot's files, perhaps half made.

So whatever was cut short, one procedure (`fill`) finishes it: the moves completed, the
copies deleted and made again from scratch, every filesystem synced. Then `state` is
`restored`: what was moved aside may go (`finish`: in the background beside the volume,
at once inside it), and the file goes last. A restore that fails puts every volume back
(`undo`: its copies deleted and that synced before the journal says `moving` again,
then the entries renamed back) and the journal says `failed`, with the reason: the
service stays held, across restarts of healerd too, until `healerctl resume`, which
removes the journal. Nothing here deletes what a volume held before a restore unless
its journal says that restore completed; an aside directory no journal names (a
restore `healerctl resume` gave up on, an older healerd's crash) is only reported.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healerd.core.updatedata import not_restored
from healerd.daemon import volumecopy
from healerd.daemon.atomicfile import write_atomic
from healerd.daemon.volumecopy import (
    DROP,
    ID_RE,
    SERVICE_RE,
    VOLUME_RE,
    Removals,
    SnapshotError,
    fsync_dir,
    real_dir,
    remove_tree,
    unlink_any,
)

log = logging.getLogger("healerd.snapshots")

JOURNAL = "restoring.json"
ASIDE = ".healerd-restore-"
RESTORING, RESTORED, FAILED = "restoring", "restored", "failed"
MAX_JOURNAL = 1 << 16


@dataclass
class Volume:
    """One volume of a restore, and the file work on it."""

    name: str  # the engine's
    mount: Path
    aside: Path  # where its own entries wait while the snapshot is copied in
    owner: tuple[int, int, int, int, int]  # the mount point's uid, gid, mode, atime, mtime
    copying: bool = False

    @property
    def inside(self) -> bool:
        return self.aside.parent == self.mount

    def move_aside(self) -> None:
        """Every entry of the volume's own into the aside directory (also the rest of a
        move cut short), the renames synced before the caller says so."""
        with contextlib.suppress(FileExistsError):  # made before a cut (else a fresh name)
            self.aside.mkdir(mode=0o700)
        real_dir(self.aside, f"volume {self.name}: aside directory")
        for entry in self._entries():
            os.rename(entry, self.aside / entry.name)
        for path in (self.mount, self.aside, self.aside.parent):
            fsync_dir(path)

    def clear(self) -> None:
        """Delete what the mount point holds (copies of the snapshot's files only, in the
        copying phase)."""
        for entry in self._entries():
            unlink_any(entry)

    def put_back(self) -> None:
        """The volume's own entries back where they were (the mount point holds nothing
        else: the moving phase), and the mount point's owner, mode and times."""
        if self.aside.is_dir() and not self.aside.is_symlink():
            for entry in os.scandir(self.aside):
                os.rename(entry.path, self.mount / entry.name)
            self.aside.rmdir()
        uid, gid, mode, atime, mtime = self.owner
        os.chown(self.mount, uid, gid, follow_symlinks=False)
        os.chmod(self.mount, mode & 0o7777)
        os.utime(self.mount, ns=(atime, mtime))
        fsync_dir(self.mount)
        fsync_dir(self.aside.parent)

    def drop(self, removals: Removals) -> None:
        """What was moved aside, deleted: now if it is inside the volume (the container
        must never see it), else renamed to its DROP name and deleted in the background
        (seconds of deletion are no downtime)."""
        if not os.path.lexists(self.aside):
            return
        if self.inside:
            remove_tree(self.aside)
            return
        trash = self.aside.with_name(f"{DROP}{self.mount.name}-{secrets.token_hex(4)}")
        try:
            self.aside.rename(trash)
        except OSError:
            remove_tree(self.aside)
            return
        removals.later(trash)

    def _entries(self) -> list[Path]:
        # Not an aside another restore left inside (its mount point is a filesystem of
        # its own): that is the volume's data of before that restore, kept (leftovers).
        return [Path(e.path) for e in os.scandir(self.mount) if not e.name.startswith(ASIDE)]


@dataclass
class Journal:
    path: Path  # <service>/restoring.json
    service: str
    snapshot: str  # its id
    volumes: list[Volume]
    state: str = RESTORING
    reason: str = ""  # why it failed

    def save(self) -> None:
        doc = {
            "version": 1,
            "service": self.service,
            "snapshot": self.snapshot,
            "state": self.state,
            "reason": self.reason,
            "volumes": [
                {
                    "name": v.name,
                    "mount": str(v.mount),
                    "aside": str(v.aside),
                    "owner": list(v.owner),
                    "copying": v.copying,
                }
                for v in self.volumes
            ],
        }
        write_atomic(self.path, json.dumps(doc, indent=1).encode() + b"\n")

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        fsync_dir(self.path.parent)

    def asides(self) -> list[Path]:
        """The aside directories that exist now: what the volumes held before."""
        return [v.aside for v in self.volumes if os.path.lexists(v.aside)]

    def held(self) -> str:
        """What the service's hold says at healerd's start."""
        if self.state == FAILED:
            return not_restored(self.service, self.reason)
        return (
            f"finishing the restore of its volumes from snapshot {self.snapshot}, "
            "interrupted by a restart of healerd"
        )


def begin(home: Path, service: str, snapshot: str, mounts: Mapping[str, Path]) -> Journal:
    """The journal of a new restore of `snapshot` into `mounts` (engine name -> mount
    point), on disk before any volume is touched."""
    volumes = []
    for name, mount in mounts.items():
        inside = not volumecopy.same_filesystem(mount.parent, mount)
        while True:  # a fresh name: no leftover of an earlier restore is ever in the way
            tag = f"{snapshot}-{secrets.token_hex(3)}"
            aside = (
                mount / f"{ASIDE}{tag}" if inside else mount.parent / f"{ASIDE}{mount.name}-{tag}"
            )
            if not os.path.lexists(aside):
                break
        st = os.lstat(mount)
        owner = (st.st_uid, st.st_gid, st.st_mode, st.st_atime_ns, st.st_mtime_ns)
        volumes.append(Volume(name, mount, aside, owner))
    journal = Journal(home / JOURNAL, service, snapshot, volumes)
    journal.save()
    return journal


def run(
    journal: Journal,
    source: Path,
    sizes: list[int],
    copy: Callable[[Path, Path], None],
    sync: Callable[[Path], None],
    removals: Removals,
    weigh: Callable[[int, Path], None] | None,
) -> None:
    """The restore `journal` records, from where it got to: filled from `source` (each
    volume's directory) unless it is `restored` already, then finished; on any failure
    undone, and the error raised. `weigh(bytes, where)` first (raising when they do not
    fit), per filesystem, with `sizes` the bytes of each volume's copy."""
    if journal.state == RESTORING:
        try:
            if weigh is not None:
                needed: dict[int, tuple[int, Path]] = {}
                for v, size in zip(journal.volumes, sizes, strict=True):
                    dev = os.stat(v.mount).st_dev
                    needed[dev] = (needed.get(dev, (0, v.mount))[0] + size, v.mount)
                for size, where in needed.values():
                    weigh(size, where)
            fill(journal, source, copy, sync)
        except BaseException as exc:
            what = f"restore of snapshot {journal.snapshot}: "
            undo(journal, ("" if isinstance(exc, SnapshotError) else what) + said(exc))
            raise
    finish(journal, removals)


def said(exc: BaseException) -> str:
    """An error in a few words (an OSError's with its file)."""
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
    return str(exc) if isinstance(exc, SnapshotError) else repr(exc)


def fill(
    journal: Journal, source: Path, copy: Callable[[Path, Path], None], sync: Callable[[Path], None]
) -> None:
    """Make each volume hold exactly what `source/<volume>` holds, from wherever the
    journal says the restore got to; every filesystem synced, then `restored`."""
    for v in journal.volumes:
        if not v.copying:
            v.move_aside()
            v.copying = True
            journal.save()
        v.clear()  # what a restore cut short copied: made again from scratch
        copy(source / v.name, v.mount)
    # On disk before the service starts on it and before what it replaced goes: a
    # database trusts what it fsynced once (a power cut must not leave it empty files).
    devices: set[int] = set()
    for v in journal.volumes:
        dev = os.stat(v.mount).st_dev
        if dev not in devices:
            devices.add(dev)
            sync(v.mount)
    journal.state = RESTORED
    journal.save()


def finish(journal: Journal, removals: Removals) -> None:
    """A restore that completed (`restored`): what the volumes held before goes, then the
    journal. One aside that cannot go is left and said (a leftover, never in the way)."""
    for v in journal.volumes:
        removals.sweep(v.mount)  # what a crash left of an earlier drop
        try:
            v.drop(removals)
        except OSError as exc:
            log.warning("%s (what volume %s held before) not removed: %s", v.aside, v.name, exc)
    journal.remove()


def undo(journal: Journal, reason: str) -> bool:
    """Every volume back as it was before the restore, and the journal `failed` with the
    reason. False when a volume could not be put back: the journal then says where it
    got to (the next start finishes the restore; nothing is deleted)."""
    try:
        for v in reversed(journal.volumes):
            if v.copying:
                v.clear()
                fsync_dir(v.mount)
                v.copying = False
                journal.save()
            v.put_back()
        journal.state, journal.reason = FAILED, reason
        journal.save()
    except OSError as exc:
        log.error(
            "%s: volumes not put back after a failed restore (%s): what they held before "
            "is kept in %s",
            journal.service,
            exc,
            ", ".join(map(str, journal.asides())) or "them",
        )
        return False
    return True


def read(home: Path) -> Journal | None:
    """The journal of `home` (a service's directory), None when there is none. One that
    cannot be read says so as a failed one (the service stays held until resume)."""
    path = home / JOURNAL
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return Journal(path, home.name, "", [], FAILED, f"{path} cannot be read: {exc}")
    try:
        with os.fdopen(fd, "rb") as f:
            return _parse(path, home.name, json.loads(f.read(MAX_JOURNAL)))
    except (OSError, ValueError, KeyError, TypeError, SnapshotError) as exc:
        why = f"the journal of a restore, {path}, cannot be read ({exc}): check its volumes"
        return Journal(path, home.name, "", [], FAILED, why)


def unfinished(root: Path) -> list[Journal]:
    """The journals under `root` (state_dir/snapshots), one per service at most: restores
    cut short, or failed and not yet given up by healerctl resume."""
    try:
        homes = sorted(p for p in root.iterdir() if SERVICE_RE.fullmatch(p.name) and p.is_dir())
    except FileNotFoundError:
        return []
    return [j for j in map(read, homes) if j is not None]


def _parse(path: Path, service: str, doc: dict[str, Any]) -> Journal:
    if doc["service"] != service or not SERVICE_RE.fullmatch(service):
        raise SnapshotError(f"it names service {doc['service']!r}")
    if not ID_RE.fullmatch(str(doc["snapshot"])) or doc["state"] not in (
        RESTORING,
        RESTORED,
        FAILED,
    ):
        raise SnapshotError("not a snapshot id or not a state")
    volumes = []
    for v in doc["volumes"]:
        name, mount, aside = str(v["name"]), Path(v["mount"]), Path(v["aside"])
        if not VOLUME_RE.fullmatch(name) or not mount.is_absolute() or ".." in mount.parts:
            raise SnapshotError(f"volume {name[:60]!r} at {str(mount)[:200]!r}")
        beside = aside.parent == mount.parent and aside.name.startswith(f"{ASIDE}{mount.name}-")
        if not (beside or (aside.parent == mount and aside.name.startswith(ASIDE))):
            raise SnapshotError(f"{aside} is no aside directory of {mount}")
        owner = tuple(int(n) for n in v["owner"])
        if len(owner) != 5:
            raise SnapshotError("owner")
        volumes.append(
            Volume(
                name,
                mount,
                aside,
                (owner[0], owner[1], owner[2], owner[3], owner[4]),
                bool(v["copying"]),
            )
        )
    return Journal(
        path, service, str(doc["snapshot"]), volumes, str(doc["state"]), str(doc["reason"])
    )


def leftovers(mount: Path) -> list[Path]:
    """The aside directories beside the volume at `mount` (a restore is about to begin,
    so no journal names them): what the volume held before a restore that nothing
    records completed. Kept, and said, never deleted."""
    prefix = f"{ASIDE}{mount.name}-"
    found: list[Path] = []
    for where, start in ((mount.parent, prefix), (mount, ASIDE)):  # beside, or inside
        with contextlib.suppress(OSError):
            found += [Path(e.path) for e in os.scandir(where) if e.name.startswith(start)]
    for path in found:
        log.warning(
            "%s holds what the volume at %s held before a restore that no journal records "
            "(healerctl resume ended it, or an older healerd crashed): kept; delete it "
            "once you have checked it",
            path,
            mount,
        )
    return found


__all__ = [
    "FAILED",
    "JOURNAL",
    "RESTORED",
    "RESTORING",
    "Journal",
    "Volume",
    "begin",
    "fill",
    "finish",
    "leftovers",
    "read",
    "run",
    "said",
    "undo",
    "unfinished",
]
