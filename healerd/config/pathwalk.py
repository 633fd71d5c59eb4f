"""A path walked from `/` one component at a time, as sshd's `secure_filename` walks one.

Each directory is opened with O_PATH|O_NOFOLLOW below the descriptor of the one before
it and handed to a check through its own descriptor before the walk goes on. A symbolic
link met on the way is read (the directory that holds it has just been checked, so only
someone trusted could have put it there or can change it) and its target is walked in
its place; `..` goes back to the directory walked before. So every directory the path
passes through is checked, those that hold a link included, and none can be swapped
between its check and its use. `realpath` followed by a check of the result would miss
exactly the directories that hold the links (issue 29).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

# O_PATH opens a directory without needing read permission on it (Linux).
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW | getattr(os, "O_PATH", 0)
MAX_LINKS = 40  # symbolic links followed in one walk at most (Linux's MAXSYMLINKS)


class WalkRefused(Exception):
    """The path cannot be walked: a component is not a directory, or too many links."""


class Walk:
    """One walk; a context manager that closes the descriptors it holds.

    `check(fd, directory)` is called for every directory entered, `/` first; it raises to
    refuse. `links` lists the links followed, (where, its text), in order.
    """

    def __init__(self, path: Path, check: Callable[[int, Path], None]) -> None:
        self._check = check
        self._pending: list[str] = []  # names still to walk, the next one last
        self._push(os.path.abspath(path))
        self._fds: list[int] = []
        self._names: list[str] = []
        self.links: list[tuple[Path, str]] = []

    def __enter__(self) -> Walk:
        self._fds.append(os.open("/", _DIR_FLAGS))
        try:
            self._check(self.fd, Path("/"))
        except BaseException:
            self._close_to(0)
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close_to(0)

    @property
    def fd(self) -> int:
        """The descriptor of the directory walked to last (checked)."""
        return self._fds[-1]

    @property
    def here(self) -> Path:
        """That directory's path, without links."""
        return Path("/", *self._names)

    def to_parent(self, *, into_last: bool = False) -> str | None:
        """Walks to the directory that holds the path's last name and returns that name;
        None when the path ends in a directory, which is then the one walked to. With
        `into_last`, the last name is walked into (and checked) as a directory too."""
        while (name := self._next()) is not None:
            if not self._pending and not into_last:
                return name
            if not self._descend(name) and not self.follow(name):
                raise WalkRefused(f"{self.here / name} is not a directory")
        return None

    def follow(self, name: str) -> bool:
        """When `name`, in the directory walked to, is a symbolic link: go on with its
        target in its place (True); False when it is not a link."""
        try:
            target = os.readlink(name, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                return False
            raise
        self.links.append((self.here / name, target))
        if len(self.links) > MAX_LINKS:
            raise WalkRefused(f"more than {MAX_LINKS} symbolic links on the way")
        if target.startswith("/"):
            self._close_to(1)
        self._push(target)
        return True

    def _push(self, text: str) -> None:
        self._pending.extend(reversed([p for p in text.split("/") if p not in ("", ".")]))

    def _next(self) -> str | None:
        while self._pending:
            name = self._pending.pop()
            if name != "..":
                return name
            self._close_to(max(len(self._fds) - 1, 1))  # `..` of `/` is `/`
        return None

    def _descend(self, name: str) -> bool:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                return False  # a link (or not a directory): see follow
            raise
        self._fds.append(fd)
        self._names.append(name)
        self._check(fd, self.here)
        return True

    def _close_to(self, depth: int) -> None:
        """Keep the first `depth` descriptors (1: `/` only), close the rest."""
        while len(self._fds) > depth:
            os.close(self._fds.pop())
            del self._names[max(len(self._fds) - 1, 0) :]
