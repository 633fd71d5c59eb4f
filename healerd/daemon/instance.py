"""One healerd per engine: two would both act on the same containers.

The lock is an flock on a file named after the engine's address, so the kernel drops
it when the process dies (even by SIGKILL) and a restarted healerd never finds a stale
lock; two daemons for two different engines do not block each other. Once the engine
answers, a second lock on its identity (`docker info`'s ID and data root) catches a
second healerd that reaches the same engine by another address (a proxy, tcp://,
another socket).
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
    # One engine, one name: unix:///var/run/docker.sock and unix:///run/docker.sock are
    # the same socket.
    if docker_host.startswith("unix://"):
        docker_host = "unix://" + os.path.realpath(docker_host.removeprefix("unix://"))
    digest = hashlib.sha256(docker_host.encode()).hexdigest()[:12]
    return lock_dir / f"engine-{digest}.lock"


def id_lock_path(engine_id: str, lock_dir: Path = LOCK_DIR) -> Path:
    digest = hashlib.sha256(engine_id.encode()).hexdigest()[:12]
    return lock_dir / f"engine-id-{digest}.lock"


def acquire(docker_host: str, lock_dir: Path = LOCK_DIR) -> int:
    """Take the engine's lock and return its file descriptor (keep it open)."""
    return _acquire(lock_path(docker_host, lock_dir), docker_host)


def acquire_id(engine_id: str, lock_dir: Path = LOCK_DIR) -> int:
    """Take the lock on the engine's ID; raises AlreadyRunning like acquire."""
    return _acquire(id_lock_path(engine_id, lock_dir), f"the engine {engine_id}")


def _acquire(path: Path, what: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise AlreadyRunning(
            f"another healerd (pid {holder}) already manages {what} "
            f"(lock {path}); refusing to start a second one"
        ) from None
    try:
        same = os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        same = False
    if not same:
        # The file was deleted (and maybe recreated) between open and flock: a lock on a
        # file nobody can find protects nothing. Try again on the file that is there now.
        os.close(fd)
        return _acquire(path, what)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd
