"""The file work of volume snapshots (healerd.daemon.snapshots): coreutils' cp -a, the
bytes a tree holds on disk, a filesystem synced, the names that become paths, and trees
deleted in the background (Removals). A restore's own moves are
healerd.daemon.restorejournal's."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("healerd.snapshots")

# The names that become paths under state_dir/snapshots and beside volumes.
SERVICE_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,49}")  # the API's service names
VOLUME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,254}")  # the engine's volume names
ID_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}")


class SnapshotError(Exception):
    """A snapshot could not be taken, restored or read; the message says why."""


CP = ["cp", "-a", "--reflink=auto"]
WORKERS = max(1, min(os.cpu_count() or 1, 4))  # cp -a processes of one copy at most
SPLITS = 32  # directories opened up at most to balance a copy's groups


def cp_a(source: Path, target: Path, workers: int = WORKERS) -> None:
    """coreutils' cp -a of `source`'s contents (and its own attributes) onto `target`,
    in up to `workers` cp -a side by side: one cp is one core's memory copy, one file
    at a time, and a volume of a big file and many small ones, or a database's tables,
    copies in about the time of its biggest group. The groups (Groups) are the tree's
    entries, of about equal bytes each; the directories they open up are made first,
    and given their owners, modes, times and xattrs last, as cp -a gives its own. One
    cp -a of the whole where a file has hard links (cp keeps those only within one run)
    or nothing would go side by side."""
    groups = Groups.of(source, workers)
    if groups is None:
        runs = [subprocess.Popen([*CP, "--", f"{source}/.", str(target)], **_QUIET)]
    else:
        for rel in groups.opened:
            (target / rel).mkdir(mode=0o700)
        runs = [
            subprocess.Popen([*CP, "--parents", "--", *g, str(target)], cwd=source, **_QUIET)
            for g in groups.groups
        ]
    failed = [line for run in runs for line in _errors(run)]
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise SnapshotError(f"copy of {source} to {target} failed: {failed[0]}{more}")
    if groups is not None:
        for rel in [*reversed(groups.opened), "."]:  # the deepest first: times last
            st = os.lstat(source / rel)
            os.chown(target / rel, st.st_uid, st.st_gid, follow_symlinks=False)
            shutil.copystat(source / rel, target / rel, follow_symlinks=False)


_QUIET: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "text": True}


def _errors(run: subprocess.Popen[str]) -> list[str]:
    _, err = run.communicate()
    if run.returncode == 0:
        return []
    return err.strip().splitlines() or [f"exit code {run.returncode}"]


@dataclass
class Groups:
    """A copy's side-by-side groups of paths (relative to its source), and the
    directories opened up to balance them (each before what it holds)."""

    groups: list[list[str]]
    opened: list[str]

    @classmethod
    def of(cls, source: Path, workers: int) -> Groups | None:
        """The entries of `source` in up to `workers` groups of about equal bytes on
        disk (biggest first into the lightest); a directory that holds more than a
        group's share is opened up (its entries instead, SPLITS at most). None: one
        cp -a of the whole."""
        if workers < 2:
            return None
        units = _entries(source, "")
        opened: list[str] = []
        while units and len(opened) < SPLITS:
            size, rel, is_dir = max(units)
            if not is_dir or size * workers <= sum(u[0] for u in units):
                break
            units.remove((size, rel, is_dir))
            opened.append(rel)
            inner = _entries(source, rel)
            units = None if inner is None else units + inner
        if not units:
            return None  # hard links, or nothing to copy
        bins: list[tuple[int, list[str]]] = [(0, []) for _ in range(workers)]
        for size, rel, _ in sorted(units, reverse=True):
            bins.sort(key=lambda b: b[0])
            bins[0] = (bins[0][0] + size, [*bins[0][1], rel])
        groups = [rels for _, rels in bins if rels]
        return cls(groups, opened) if len(groups) > 1 else None


def _entries(source: Path, rel: str) -> list[tuple[int, str, bool]] | None:
    """The entries of `source/rel`: bytes on disk, path relative to `source`, and
    whether a directory; None where a file in them has hard links."""
    out = []
    with os.scandir(source / rel) as entries:
        for entry in entries:
            size, linked = _weigh(entry)
            if linked:
                return None
            out.append((size, os.path.join(rel, entry.name), entry.is_dir(follow_symlinks=False)))
    return out


def _weigh(entry: os.DirEntry[str]) -> tuple[int, bool]:
    """The bytes `entry`'s tree holds on disk, and whether a file in it has hard links."""
    st = entry.stat(follow_symlinks=False)
    if not entry.is_dir(follow_symlinks=False):
        return st.st_blocks * 512, st.st_nlink > 1
    total, stack = st.st_blocks * 512, [entry.path]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for e in entries:
                est = e.stat(follow_symlinks=False)
                total += est.st_blocks * 512
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif est.st_nlink > 1:
                    return total, True
    return total, False


def sync_filesystem(path: Path) -> None:
    """Write the filesystem of `path` to disk (syncfs, coreutils' sync -f)."""
    done = subprocess.run(["sync", "-f", str(path)], capture_output=True, check=False)
    if done.returncode != 0:
        raise SnapshotError(f"sync of {path} failed: {done.stderr.decode(errors='replace')}")


FLUSH_EVERY = 0.2  # seconds between the syncs of a flushed copy


@contextlib.contextmanager
def flushing(
    path: Path, sync: Callable[[Path], None] = sync_filesystem, every: float = FLUSH_EVERY
) -> Iterator[None]:
    """Sync `path`'s filesystem every `every` seconds while the block runs. The disk
    writes a copy's pages while the copy makes the next ones (on two cores: the copy on
    one, the kernel's writeback on the other), so a sync after the copy finds little
    left, and the copy is not throttled at the kernel's dirty limit: a restore synced
    before its service starts costs about a cp -a and a sync side by side, not one
    after the other (BENCHMARKS.md). Only a speed-up: a failed sync here stops it,
    unsaid; the sync after the copy is the one that counts and says why it failed."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every):
            try:
                sync(path)
            except (OSError, SnapshotError):
                return

    t = threading.Thread(target=run, name="healerd-flush", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def flushed(
    copy: Callable[[Path, Path], None], sync: Callable[[Path], None] = sync_filesystem
) -> Callable[[Path, Path], None]:
    """`copy`, its target's filesystem synced while it runs (`flushing`)."""

    def run(source: Path, target: Path) -> None:
        with flushing(target, sync):
            copy(source, target)

    return run


def disk_bytes(root: Path) -> int:
    """The bytes `root`'s tree holds on disk (blocks in use, a hard link counted once,
    symbolic links not followed): what a copy of it needs."""
    total = os.lstat(root).st_blocks * 512
    seen: set[tuple[int, int]] = set()
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                is_dir = entry.is_dir(follow_symlinks=False)
                if st.st_nlink > 1 and not is_dir:
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
                if is_dir:
                    stack.append(entry.path)
    return total


def gib(n: float) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    return f"{n / (1 << 20):.1f} MiB"


def real_dir(path: Path, what: str) -> None:
    """`path` is a directory itself, not a symbolic link to one."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise SnapshotError(f"{what} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise SnapshotError(f"{what} {path} is not a directory")


def remove_tree(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)


DROP = ".healerd-drop-"  # beside a mount point: what a restore replaced, to delete


class Removals:
    """Trees deleted in daemon threads, one each, at a low priority: what a restore
    replaced goes after the restore returns, while the service runs again, instead of
    being downtime. A tree is renamed to its DROP name before it is handed here, so one
    a crash (or a stop of healerd) left half-deleted is known by its name and swept
    (`sweep`) at the volume's next take or restore."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[Path, threading.Thread] = {}

    def later(self, path: Path, *, leftover: bool = False) -> None:
        """Delete `path` in a thread (once: not again while that thread runs);
        `leftover`: an earlier run's (logged)."""
        with self._lock:
            if path in self._threads:
                return
            if leftover:
                log.info("removing %s, left by an earlier run", path)
            t = threading.Thread(
                target=self._remove, args=(path,), name="healerd-snapshot-rm", daemon=True
            )
            self._threads[path] = t
        t.start()

    def _remove(self, path: Path) -> None:
        with contextlib.suppress(OSError):  # this thread only (Linux: nice is per thread)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        try:
            remove_tree(path)
        except OSError as exc:
            log.warning("%s not removed (%s): it is tried again at the next restore", path, exc)
        finally:
            with self._lock:
                self._threads.pop(path, None)

    def sweep(self, mount: Path) -> None:
        """Remove (in the background) what earlier restores of the volume at `mount`
        left to delete."""
        prefix = f"{DROP}{mount.name}-"
        with contextlib.suppress(OSError):
            for entry in os.scandir(mount.parent):
                if entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False):
                    self.later(Path(entry.path), leftover=True)

    def pending(self) -> bool:
        with self._lock:
            return bool(self._threads)

    def wait(self) -> None:
        """Until every removal begun so far has ended."""
        while True:
            with self._lock:
                threads = list(self._threads.values())
            if not threads:
                return
            for t in threads:
                t.join()


REMOVALS = Removals()  # the process's: a store is made per API request


def same_filesystem(a: Path, b: Path) -> bool:
    return os.lstat(a).st_dev == os.lstat(b).st_dev


def unlink_any(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = [
    "DROP",
    "ID_RE",
    "REMOVALS",
    "SERVICE_RE",
    "VOLUME_RE",
    "Removals",
    "SnapshotError",
    "cp_a",
    "disk_bytes",
    "flushed",
    "flushing",
    "fsync_dir",
    "gib",
    "real_dir",
    "remove_tree",
    "same_filesystem",
    "sync_filesystem",
    "unlink_any",
]
