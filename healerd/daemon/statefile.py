"""A JSON document in `state_dir` (healerd.core.persist's store for the daemon).

Written as the host key is: a temporary file in the same directory (0600, O_EXCL,
O_NOFOLLOW), written in full and fsynced, renamed over the old one, and the directory
fsynced, so that a crash or power loss leaves the old document or the new one, never
half of one. Read through the trusted open (healerd.config.trust): a file that others
could have written is not believed. A document that cannot be read or parsed is
logged and taken as none: what it held is a convenience, never needed for safety.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from healerd.config.trust import FileRefused, read_trusted

log = logging.getLogger("healerd")

MAX_SIZE = 1 << 20  # what the stores keep is bounded far below this


class StateFile:
    def __init__(self, path: Path, what: str, *, strict: bool = True) -> None:
        """`what` names the document in messages ("auto-update memory")."""
        self.path = path
        self.what = what
        self.strict = strict
        self._lock = threading.Lock()  # one temporary file at a time

    def load(self) -> Any:
        try:
            raw = read_trusted(self.path, self.what, strict=self.strict, limit=MAX_SIZE, escape="")
        except FileNotFoundError:
            return None
        except (FileRefused, OSError) as exc:
            log.warning("%s not used: %s", self.what, exc)
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            log.warning("%s %s not used: not JSON (%s)", self.what, self.path, exc)
            return None

    def save(self, data: Any) -> None:
        text = json.dumps(data, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            self._write(text)

    def _write(self, text: bytes) -> None:
        directory = self.path.parent
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = directory / f".{self.path.name}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600)
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


__all__ = ["StateFile"]
