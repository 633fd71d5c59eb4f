"""The host key: made once at first start, kept root-only in the state directory.

It signs healerd's containers (healerd.core.signing). It is not a database: losing it
costs nothing but the proof for containers made after it; a new key trusts every
container older than itself, as the first one did. The file also says until when
signatures without the image reference (an older healerd's, v1) count: the time this
version first read the key (written into the file then), or the key's birth.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import stat
from pathlib import Path

from healerd.config.trust import FileRefused, read_trusted
from healerd.core.signing import HostKey

log = logging.getLogger("healerd")

KEY_FILE = "host.key"
_SIZE = 32  # bytes of secret: an HMAC-SHA256 key
# A key born further than this ahead of the clock was made while one of them was wrong.
CLOCK_SLACK = 300.0


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
            return _checked(path, _read(path, strict), now)
        except FileNotFoundError:
            _create(path, now)
    return _checked(path, _read(path, strict), now)


def _checked(path: Path, key: HostKey, now: float) -> HostKey:
    """The key as this version uses it: a key file of an older healerd gets its
    `v1_until` (now) written into it; a birth in the future is said (trust on first
    use trusts every unsigned container made before it)."""
    if key.born > now + CLOCK_SLACK:
        log.warning(
            "host key %s was made %.0fs after what this host's clock says is now: until "
            "then, containers without a signature are taken as older than the key "
            "(trusted). If the clock was wrong when the key was made, stop healerd, "
            "remove the key and start it again once the clock is right",
            path,
            key.born - now,
        )
    if key.v1_until >= 0:
        return key
    upgraded = dataclasses.replace(key, v1_until=now)
    try:
        _write(path, upgraded, replace=True)
        log.info("host key %s: containers made from now on are signed with their image", path)
    except OSError as exc:
        log.warning("host key %s not updated (%s): older signatures count until now", path, exc)
    return upgraded


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
        v1_until = float(data.get("v1_until", -1.0))  # absent: an older healerd's file
        key = HostKey(bytes.fromhex(data["key"]), float(data["born"]), v1_until)
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
    """A new key, linked into place: a key another start made first wins."""
    if _write(path, HostKey(secrets.token_bytes(_SIZE), now, v1_until=now), replace=False):
        log.info("made a new host key %s: containers made before now are trusted as they are", path)


def _write(path: Path, key: HostKey, *, replace: bool) -> bool:
    """Written in full under a temporary name, then linked (or, `replace`, renamed)
    into place: never a half key. False when another start's key was there first."""
    fields = {"key": key.secret.hex(), "born": key.born, "v1_until": key.v1_until}
    data = json.dumps(fields).encode() + b"\n"
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    placed = True
    try:
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except FileExistsError:
        placed = False
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return placed
