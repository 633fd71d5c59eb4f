"""Who may write the config: sshd's StrictModes for healerd.

Whoever can write a service file can run any container as root through Docker, so a
file, conf.d, or the config directory that is writable by group or others, or that is
owned by anyone but root or the user healerd runs as, is refused. `strict_modes: false`
in healerd.yaml turns the check off; that is meant for development only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def trusted_owners() -> frozenset[int]:
    return frozenset({0, os.geteuid()})


def trust_problem(path: Path, what: str = "file") -> str | None:
    """Why `path` (followed through symlinks) must not be trusted, or None.

    A path that cannot be examined is not judged here: reading it reports that better.
    """
    try:
        st = path.stat()
    except OSError:
        return None
    return mode_problem(path, st.st_mode, st.st_uid, what)


def mode_problem(path: Path, mode: int, uid: int, what: str = "file") -> str | None:
    """The check on already-known mode and owner bits (also used by tests)."""
    writable = []
    if mode & stat.S_IWGRP:
        writable.append("group")
    if mode & stat.S_IWOTH:
        writable.append("others")
    owner_ok = uid in trusted_owners()
    if not writable and owner_ok:
        return None
    details = f"mode {stat.S_IMODE(mode):04o}, owner uid {uid}"
    if writable:
        why = f"is writable by {' and '.join(writable)}"
        fix = f"chmod go-w {path}"
    else:
        why = f"is owned by uid {uid}, not root or healerd's own user"
        fix = f"chown root {path}"
    return (
        f"refused: {what} {path} {why} ({details}); anyone who can write it could run "
        f"containers as root. Fix it ({fix}) or set strict_modes: false in healerd.yaml "
        "(development only)"
    )
