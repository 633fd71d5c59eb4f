"""Volumes as a database leaves them, and a tree's every attribute a restore must bring
back (tests of volume snapshots and of the restore journal)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def tree(root: Path) -> dict[str, tuple[str, int, int, int, bytes | str | None]]:
    """Everything of a tree a restore must bring back: kind, mode, owner, group, and a
    file's bytes or a link's target."""
    out: dict[str, tuple[str, int, int, int, bytes | str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in ["", *dirnames, *filenames]:
            path = Path(dirpath, name)
            st = os.lstat(path)
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, st.st_uid, st.st_gid, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, None)
            else:
                data = path.read_bytes()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, data)
    return out


def volume(path: Path) -> Path:
    """A volume's data as a database might leave it: modes, owners, a link, a subdir."""
    path.mkdir(parents=True)
    (path / "base").mkdir(mode=0o700)
    (path / "base" / "1").write_bytes(b"row 1\n" * 1000)
    (path / "PG_VERSION").write_text("16\n")
    (path / "conf").write_text("listen '*'\n")
    os.chmod(path / "conf", 0o640)
    (path / "current").symlink_to("base/1")
    os.link(path / "PG_VERSION", path / "hardlink")
    if os.geteuid() == 0:
        for p in (path, path / "base", path / "base" / "1", path / "conf"):
            os.chown(p, 999, 999)
    os.chmod(path, 0o750)
    return path
