"""The file work of volume snapshots (healerd.daemon.snapshots): coreutils' cp -a, the
bytes a tree holds on disk, a filesystem synced, and a volume's entries moved aside
while a restore copies in (put back if it fails)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import subprocess
from pathlib import Path

log = logging.getLogger("healerd.snapshots")


class SnapshotError(Exception):
    """A snapshot could not be taken, restored or read; the message says why."""


def cp_a(source: Path, target: Path) -> None:
    """coreutils' cp -a of `source`'s contents (and its own attributes) onto `target`."""
    args = ["cp", "-a", "--reflink=auto", "--", f"{source}/.", str(target)]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        raise SnapshotError(f"copy of {source} to {target} failed: {lines[0]}{more}")


def sync_filesystem(path: Path) -> None:
    """Write the filesystem of `path` to disk (syncfs, coreutils' sync -f)."""
    done = subprocess.run(["sync", "-f", str(path)], capture_output=True, check=False)
    if done.returncode != 0:
        raise SnapshotError(f"sync of {path} failed: {done.stderr.decode(errors='replace')}")


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


class Aside:
    """A volume's entries moved out of the way of a restore, to be put back or dropped.
    They go beside the mount point (same filesystem: renames), else inside it."""

    def __init__(self, mount: Path, snap_id: str) -> None:
        self.mount = mount
        beside = mount.parent / f".healerd-restore-{mount.name}-{snap_id}"
        same_fs = os.lstat(mount.parent).st_dev == os.lstat(mount).st_dev
        self.dir = beside if same_fs else mount / f".healerd-restore-{snap_id}"
        self.stat = os.lstat(mount)
        self.moved = False

    def move(self) -> None:
        self.dir.mkdir(mode=0o700)
        self.moved = True
        for entry in os.scandir(self.mount):
            if entry.path != str(self.dir):
                os.rename(entry.path, self.dir / entry.name)

    def put_back(self) -> None:
        """The volume as it was before `move` (what a failed restore ends with)."""
        if not self.moved:
            return
        try:
            self._put_back()
        except OSError as exc:
            log.error(
                "volume at %s: what it held before the restore is in %s (%s)",
                self.mount, self.dir, exc,
            )  # fmt: skip

    def _put_back(self) -> None:
        for entry in os.scandir(self.mount):
            if entry.path != str(self.dir):
                unlink_any(Path(entry.path))
        for entry in os.scandir(self.dir):
            os.rename(entry.path, self.mount / entry.name)
        self.dir.rmdir()
        os.chown(self.mount, self.stat.st_uid, self.stat.st_gid, follow_symlinks=False)
        os.chmod(self.mount, self.stat.st_mode & 0o7777)
        os.utime(self.mount, ns=(self.stat.st_atime_ns, self.stat.st_mtime_ns))

    def drop(self) -> None:
        remove_tree(self.dir)


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
    "Aside",
    "SnapshotError",
    "cp_a",
    "disk_bytes",
    "fsync_dir",
    "gib",
    "real_dir",
    "remove_tree",
    "sync_filesystem",
]
