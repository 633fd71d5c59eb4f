"""The host key: made once at first start, kept root-only in the state directory.

It signs healerd's containers (healerd.core.ownership). It is not a database: losing it
costs nothing but the proof for containers made after it; a new key trusts every
container older than itself, as the first one did.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import stat
from pathlib import Path

from healerd.config.trust import FileRefused, read_trusted
from healerd.core.ownership import HostKey

log = logging.getLogger("healerd")

KEY_FILE = "host.key"
_SIZE = 32  # bytes of secret: an HMAC-SHA256 key


class HostKeyError(Exception):
    """The key cannot be read or made; the message says which file and why."""


def load_or_create(state_dir: Path, now: float, *, strict: bool = True) -> HostKey:
    """The key in `state_dir`, made there (with the directory, mode 0700) when missing."""
    path = state_dir / KEY_FILE
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise HostKeyError(f"state directory {state_dir}: {exc.strerror or exc}") from exc
    for _ in range(2):
        try:
            return _read(path, strict)
        except FileNotFoundError:
            _create(path, now)
    return _read(path, strict)


def _read(path: Path, strict: bool) -> HostKey:
    try:
        raw = read_trusted(path, "host key", strict=strict, limit=4096, escape="")
    except FileRefused as exc:
        raise HostKeyError(str(exc)) from exc
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise HostKeyError(f"host key {path}: {exc.strerror or exc}") from exc
    if strict and stat.S_IMODE(path.stat().st_mode) & 0o077:
        raise HostKeyError(
            f"refused: host key {path} may be read by others than its owner: whoever reads it "
            f"can make containers healerd takes for its own. Fix it (chmod 600 {path})"
        )
    try:
        data = json.loads(raw)
        key = HostKey(bytes.fromhex(data["key"]), float(data["born"]))
        if len(key.secret) < _SIZE:
            raise ValueError("key too short")
    except (ValueError, KeyError, TypeError) as exc:
        # Written by root and broken (a crash, a disk error): a new key is safe, since it
        # trusts every container made before it; keep the old file for a look.
        aside = path.with_name(f"{KEY_FILE}.broken")
        log.warning("host key %s unreadable (%s); moved to %s, making a new one", path, exc, aside)
        os.replace(path, aside)
        raise FileNotFoundError(path) from exc
    return key


def _create(path: Path, now: float) -> None:
    """Written in full under a temporary name, then linked into place: never a half key,
    and a key another start made first wins."""
    data = json.dumps({"key": secrets.token_hex(_SIZE), "born": now}).encode() + b"\n"
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
        log.info("made a new host key %s: containers made before now are trusted as they are", path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
