"""Volume snapshots that roll back with the image (x-healerd: {snapshot: [VOLUME]}): a
service's named volumes copied host-side before a new digest starts, and copied back
when that update is rolled back.

Layout, under `state_dir/snapshots` (every directory 0700, root's):

    <service>/<id>/manifest.json      what the snapshot is (Snapshot), written last
    <service>/<id>/volumes/<volume>/  the volume's files as they were (cp -a)

No database: the directories are the record, and a restarted healerd lists them again.
A snapshot is made in `<service>/.tmp-<id>` and renamed to `<id>` only once every
volume is copied and its manifest written, so no partial one is ever listed. It is
synced to disk in a thread after (off the update's downtime: the new digest does not
wait for the disk); until then its manifest names the boot it was taken in, and a
snapshot that was not on disk when the host went down (another boot id) is never used,
and goes at the service's next prune (the record: healerd.daemon.snapshotrecord).
One is removed by renaming it to `.gone-<id>` first, then deleted in a thread (a prune
runs while an update holds the service stopped). The leftovers of a crash (`.tmp-*`,
`.gone-*`) go, in the background too, at the service's next take or prune.

Copies are coreutils' `cp -a --reflink=auto` (owners, modes, times, hard links, ACLs
and xattrs kept; a clone where the filesystem can; several side by side: cp_a). The
bytes a copy needs (the blocks in use, a du) are held against the free space of where
it goes (`disk_usage`), with MARGIN to spare: short of it, nothing is copied (NoRoom).
A restore moves a volume's entries aside (renames, on the same filesystem), copies the
snapshot in, syncs, and only then deletes what it moved aside (in the background beside
the volume, while the service starts again: a deletion of a GiB is seconds of downtime a
plain copy does not pay); a restore that fails puts them back, so no volume is left
empty or half-restored. Each step is written down first in the service's restore
journal (healerd.daemon.restorejournal): one a crash or a power cut cut short is
finished at healerd's next start (healerd.daemon.restorestart) before the service may
run again. What a crash left to delete is removed at that volume's next take or
restore; a copy that finds too little room waits for those removals before it gives up.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from healerd.daemon import restorejournal
from healerd.daemon.atomicfile import write_atomic
from healerd.daemon.restorejournal import FAILED, Journal
from healerd.daemon.snapshotrecord import (
    MANIFEST,
    Snapshot,
    Unsynced,
    current_boot,
    manifest,
    read,
)
from healerd.daemon.volumecopy import (
    ID_RE,
    REMOVALS,
    SERVICE_RE,
    VOLUME_RE,
    Removals,
    SnapshotError,
    cp_a,
    disk_bytes,
    flushed,
    fsync_dir,
    gib,
    real_dir,
    remove_tree,
    sync_filesystem,
)

log = logging.getLogger("healerd.snapshots")

DIRECTORY = "snapshots"
MARGIN = 64 << 20  # what a copy leaves free at least (bytes)

# copy(source directory, existing target directory): the source's entries and its own
# owner, mode and times onto the target.
Copier = Callable[[Path, Path], None]
DiskUsage = Callable[[str], Any]  # shutil.disk_usage: .free in bytes


class NoRoom(SnapshotError):
    """Not enough free space for the copy: nothing was copied."""


def check_service(name: str) -> str:
    if not SERVICE_RE.fullmatch(name):
        raise SnapshotError(f"not a service name: {name[:60]!r}")
    return name


def _mountpoints(volumes: Mapping[str, str]) -> dict[str, Path]:
    out = {}
    for name, mountpoint in volumes.items():
        if not VOLUME_RE.fullmatch(name):
            raise SnapshotError(f"not a volume name: {name[:60]!r}")
        path = Path(mountpoint)
        if not path.is_absolute() or ".." in path.parts:
            raise SnapshotError(
                f"volume {name}: mount point {mountpoint!r} is not an absolute path"
            )
        real_dir(path, f"volume {name}: mount point")
        out[name] = path
    return out


_LOCKS: dict[tuple[Path, str], threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _lock(root: Path, service: str) -> threading.Lock:
    """One take, restore or prune of a service at a time (in this process)."""
    with _LOCKS_LOCK:
        return _LOCKS.setdefault((root, service), threading.Lock())


class SnapshotStore:
    """The snapshots under `root` (state_dir/snapshots). Every method reads the
    directories again: nothing is kept in memory, so any number of stores may look at
    one root (the API makes one per request)."""

    def __init__(
        self,
        root: Path,
        *,
        copy: Copier = cp_a,
        disk_usage: DiskUsage = shutil.disk_usage,
        sync: Callable[[Path], None] = sync_filesystem,
        clock: Callable[[], float] = time.time,
        removals: Removals = REMOVALS,
        boot_id: Callable[[], str] = current_boot,
    ) -> None:
        self.root = root
        self._boot_id = boot_id
        self.settling: threading.Thread | None = None  # the last take's sync (tests)
        self._copy = copy
        self._disk_usage = disk_usage
        self._sync = sync
        self._clock = clock
        self._removals = removals
        self._told: set[tuple[str, str, str]] = set()  # unreadable snapshots warned of

    @classmethod
    def at(cls, state_dir: Path) -> SnapshotStore:
        return cls(state_dir / DIRECTORY)

    # -- taking ---------------------------------------------------------------------

    def take(
        self, service: str, volumes: Mapping[str, str], *, from_digest: str, to_digest: str
    ) -> Snapshot:
        """Copy each volume (engine name -> its mount point on this host) into a new
        snapshot of `service`. NoRoom, with the sizes, when the copy does not fit;
        SnapshotError when a copy fails (nothing is left of it then)."""
        check_service(service)
        mounts = _mountpoints(volumes)
        if not mounts:
            raise SnapshotError(f"snapshot of {service}: no volume to copy")
        with _lock(self.root, service), _as_snapshot_error(f"snapshot of {service}"):
            home = self._service_dir(service)
            self._sweep(home)
            for path in mounts.values():
                self._removals.sweep(path)
            sizes = {name: disk_bytes(path) for name, path in mounts.items()}
            self._room(sum(sizes.values()), home, f"snapshot of {', '.join(mounts)}")
            now = self._clock()
            snap_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
            snap_id += f"-{secrets.token_hex(3)}"
            tmp = home / f".tmp-{snap_id}"
            snapshot = Snapshot(
                service,
                snap_id,
                now,
                from_digest,
                to_digest,
                tuple(sizes.items()),
                home / snap_id,
                self._boot_id(),
            )
            try:
                self._fill(tmp, mounts, snapshot)
                tmp.rename(snapshot.path)
            except BaseException:
                remove_tree(tmp)
                raise
        self.settling = threading.Thread(
            target=self._settle, args=(snapshot,), name="healerd-snapshot-sync", daemon=True
        )
        self.settling.start()
        log.info(
            "snapshot %s of %s taken: %s (%s)",
            snap_id,
            service,
            ", ".join(mounts),
            gib(snapshot.size),
        )
        return snapshot

    def _fill(self, tmp: Path, mounts: Mapping[str, Path], snapshot: Snapshot) -> None:
        """The copy, and its manifest marked unsynced: usable at once on this boot (what
        it reads is in the page cache), synced off the update's downtime (_settle)."""
        tmp.mkdir(mode=0o700)
        (tmp / "volumes").mkdir(mode=0o700)
        for name, path in mounts.items():
            target = tmp / "volumes" / name
            target.mkdir(mode=0o700)
            self._copy(path, target)
        fd = os.open(tmp / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(manifest(snapshot))

    def _settle(self, snapshot: Snapshot) -> None:
        """In a thread: the snapshot's filesystem synced, then its manifest rewritten
        as synced (atomically, on disk). A power cut before that leaves the mark of the
        boot it was taken in, and it is never used (_read)."""
        try:
            self._sync(snapshot.path)
            with _lock(self.root, snapshot.service):
                if snapshot.path.is_dir():
                    synced = dataclasses.replace(snapshot, unsynced_boot="")
                    write_atomic(snapshot.path / MANIFEST, manifest(synced))
                    fsync_dir(snapshot.path.parent)
        except (OSError, SnapshotError) as exc:
            log.warning(
                "snapshot %s not synced to disk (a power cut would lose it): %s", snapshot.id, exc
            )

    def _room(self, needed: int, where: Path, what: str) -> None:
        free = int(self._disk_usage(str(where)).free)
        if needed + MARGIN > free and self._removals.pending():
            self._removals.wait()  # what earlier restores replaced: its room comes back
            free = int(self._disk_usage(str(where)).free)
        if needed + MARGIN > free:
            raise NoRoom(
                f"{what} needs {gib(needed)} (and {gib(MARGIN)} to spare), "
                f"{gib(free)} free on {where}"
            )

    # -- restoring --------------------------------------------------------------------

    def restore(self, snapshot: Snapshot, volumes: Mapping[str, str]) -> None:
        """Make each of the snapshot's volumes (engine name -> mount point; the service
        stopped) hold exactly what the snapshot holds. On any failure every volume
        keeps what it held before, and SnapshotError says why (the journal too: the
        service stays held across a restart until healerctl resume)."""
        mounts = _mountpoints(volumes)
        missing = [name for name, _ in snapshot.volumes if name not in mounts]
        if missing:
            raise SnapshotError(
                f"restore of snapshot {snapshot.id}: no mount point for {', '.join(missing)}"
            )
        what = f"restore of snapshot {snapshot.id} of {snapshot.service}"
        with _lock(self.root, snapshot.service), _as_snapshot_error(what):
            real_dir(snapshot.path / "volumes", f"snapshot {snapshot.id}:")
            home = self._service_dir(snapshot.service)
            earlier = restorejournal.read(home)
            if earlier is not None and earlier.state != FAILED:
                raise SnapshotError(f"{what}: that of {earlier.snapshot} is not finished yet")
            for path in mounts.values():
                self._removals.sweep(path)
                restorejournal.leftovers(path)  # said, kept
            ours = {name: mounts[name] for name, _ in snapshot.volumes}
            journal = restorejournal.begin(home, snapshot.service, snapshot.id, ours)
            self.replay(journal, snapshot, what, room=True)
        names = ", ".join(n for n, _ in snapshot.volumes)
        log.info("snapshot %s of %s restored: %s", snapshot.id, snapshot.service, names)

    def replay(self, journal: Journal, snapshot: Snapshot | None, what: str, room: bool) -> None:
        """The restore `journal` records, from where it got to (the service's lock held;
        `snapshot` None once it is restored); undone on failure. `room`: weighed first
        (a restore cut short passed it, and deletes its half copies before copying)."""
        sizes = dict(snapshot.volumes) if snapshot is not None else {}
        source = snapshot.path / "volumes" if snapshot is not None else self.root
        weigh = (lambda size, where: self._room(size, where, what)) if room else None
        restorejournal.run(
            journal,
            source,
            [sizes.get(v.name, 0) for v in journal.volumes],
            flushed(self._copy, self._sync),
            self._sync,
            self._removals,
            weigh,
        )

    def get(self, service: str, snap_id: str) -> Snapshot:
        """One snapshot by its id (SnapshotError, or OSError, when it cannot be used)."""
        return read(self.root / check_service(service) / snap_id, service, self._boot_id())

    def lock(self, service: str) -> threading.Lock:
        """Held by each take, restore and prune of `service` (in this process)."""
        return _lock(self.root, check_service(service))

    # -- reading and pruning ------------------------------------------------------------

    def list(self, service: str | None = None) -> list[Snapshot]:
        """The snapshots (of `service`), newest first; one that cannot be read is
        logged and left out."""
        services: builtins.list[str] = []
        if service is not None:
            services = [check_service(service)]
        else:
            try:
                services = sorted(
                    p.name for p in self.root.iterdir() if SERVICE_RE.fullmatch(p.name)
                )
            except FileNotFoundError:
                return []
        return _newest([s for name in services for s in self._of(name)[0]])

    def before(self, service: str, to_digest: str) -> Snapshot | None:
        """The newest snapshot taken before `service`'s update to `to_digest`."""
        return next((s for s in self.list(service) if s.to_digest == to_digest), None)

    def prune(self, service: str, keep: int) -> builtins.list[str]:
        """Remove all but the newest `keep` snapshots of `service`, and those a power cut
        caught before they were on disk (never used); their ids."""
        with _lock(self.root, check_service(service)):
            pending = restorejournal.read(self.root / service)  # its snapshot stays
            needed = pending.snapshot if pending is not None else ""
            found, lost_all = self._of(service)
            gone = [s.path for s in _newest(found)[max(keep, 0) :] if s.id != needed]
            lost = [p for p in lost_all if p.name != needed]
            for path in gone + lost:
                trash = path.with_name(f".gone-{path.name}")
                path.rename(trash)  # no longer listed: deleted in the background
                self._removals.later(trash)
                why = "not on disk when the host went down" if path in lost else f"keep {keep}"
                log.info("snapshot %s of %s removed (%s)", path.name, service, why)
            if (self.root / service).is_dir():
                self._sweep(self.root / service)
        return [p.name for p in gone + lost]

    def _of(self, service: str) -> tuple[builtins.list[Snapshot], builtins.list[Path]]:
        """The snapshots of `service` that can be used, and those a power cut caught
        before they were synced (never used; the next prune removes them). One that
        cannot be read is logged and left out."""
        home = self.root / service
        try:
            names = [p.name for p in home.iterdir() if ID_RE.fullmatch(p.name)]
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        out, lost = [], []
        for name in names:
            try:
                out.append(read(home / name, service, self._boot_id()))
            except (OSError, ValueError, KeyError, TypeError, SnapshotError) as exc:
                told = (service, name, str(exc))  # once (each healerctl snapshots lists)
                level = logging.DEBUG if told in self._told else logging.WARNING
                self._told.add(told)
                log.log(level, "snapshot %s of %s not listed: %s", name, service, exc)
                if isinstance(exc, Unsynced):
                    lost.append(home / name)
        return out, lost

    def _service_dir(self, service: str) -> Path:
        for path in (self.root, self.root / service):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            real_dir(path, "snapshot directory")
            if os.lstat(path).st_mode & 0o077:
                os.chmod(path, 0o700)
        return self.root / service

    def _sweep(self, home: Path) -> None:
        """What a crash left (half-taken and half-removed snapshots), deleted in the
        background (a prune's own `.gone-*` may be in it still: not twice)."""
        for p in home.iterdir():
            if p.name.startswith((".tmp-", ".gone-")):
                self._removals.later(p, leftover=p.name.startswith(".tmp-"))


def _newest(snapshots: list[Snapshot]) -> list[Snapshot]:
    return sorted(snapshots, key=lambda s: (s.created, s.id), reverse=True)


@contextlib.contextmanager
def _as_snapshot_error(what: str) -> Iterator[None]:
    """An OSError of the file work, in SnapshotError's words."""
    try:
        yield
    except OSError as exc:
        raise SnapshotError(f"{what}: {restorejournal.said(exc)}") from exc


__all__ = [
    "MANIFEST",
    "NoRoom",
    "Snapshot",
    "SnapshotError",
    "SnapshotStore",
    "check_service",
    "cp_a",
    "disk_bytes",
]
