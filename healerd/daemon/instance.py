"""One healerd per engine: two would both act on the same containers.

The lock is an flock on a file named after the engine's address, so the kernel drops
it when the process dies (even by SIGKILL) and a restarted healerd never finds a stale
lock; two daemons for two different engines do not block each other.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

LOCK_DIR = Path("/run/healerd")


class AlreadyRunning(Exception):
    """Another healerd holds the lock for this engine."""


def lock_path(docker_host: str, lock_dir: Path = LOCK_DIR) -> Path:
    digest = hashlib.sha256(docker_host.encode()).hexdigest()[:12]
    return lock_dir / f"engine-{digest}.lock"


def acquire(docker_host: str, lock_dir: Path = LOCK_DIR) -> int:
    """Take the engine's lock and return its file descriptor (keep it open)."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_path(docker_host, lock_dir)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise AlreadyRunning(
            f"another healerd (pid {holder}) already manages {docker_host} "
            f"(lock {path}); refusing to start a second one"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd
