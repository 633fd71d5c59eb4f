"""A directory made to hold what another holds, in place (a git source's `live`).

In place rather than swapped: a container's bind mount of a directory under `live` holds
that directory's inode, so a swapped-in copy would never reach it, and a removed one
would leave it an empty, deleted directory. Each file that differs is written beside
its name and renamed over it (a reader sees the old file or the new, never half of
one); directories are kept; what the source no longer has is removed, deepest first.
Modes follow the source's (a checkout is read-only: files 0444).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path


def _same(a: Path, b: Path) -> bool:
    try:
        sa, sb = a.lstat(), b.lstat()
    except OSError:
        return False
    if sa.st_size != sb.st_size or (sa.st_mode & 0o7777) != (sb.st_mode & 0o7777):
        return False
    return a.read_bytes() == b.read_bytes()


def _copy_file(src: Path, dest: Path) -> None:
    if dest.is_dir() and not dest.is_symlink():
        _remove(dest)
    elif _same(src, dest):
        return
    tmp = dest.with_name(f".{dest.name}.sync")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    shutil.copyfile(src, tmp, follow_symlinks=False)
    os.chmod(tmp, src.lstat().st_mode & 0o7777)
    os.replace(tmp, dest)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for here, dirs, _ in os.walk(path):
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(Path(here) / name, 0o700)
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def sync_tree(source: Path, dest: Path) -> None:
    """`dest` holds exactly `source`'s directories and regular files afterwards."""
    if dest.exists() and (dest.is_symlink() or not dest.is_dir()):
        _remove(dest)  # a `live` link of an older layout
    dest.mkdir(mode=0o755, exist_ok=True)
    wanted: set[Path] = set()
    for here, dirs, files in os.walk(source):
        rel = Path(here).relative_to(source)
        for name in dirs:
            target = dest / rel / name
            wanted.add(rel / name)
            if target.exists() and (target.is_symlink() or not target.is_dir()):
                _remove(target)
            os.makedirs(target, mode=0o755, exist_ok=True)
            os.chmod(target, 0o755)
        for name in files:
            if (Path(here) / name).is_file() and not (Path(here) / name).is_symlink():
                wanted.add(rel / name)
                _copy_file(Path(here) / name, dest / rel / name)
    for here, dirs, files in os.walk(dest, topdown=False):
        rel = Path(here).relative_to(dest)
        for name in [*files, *dirs]:
            if rel / name not in wanted:
                _remove(Path(here) / name)
