"""Who may write the config, and the one way healerd reads a config file.

Whoever can write a service file, an env file or healerd.yaml can run any container as
root through Docker, so, as sshd's StrictModes does, healerd refuses such a file when
anyone but root or the user healerd runs as owns it, or when group or others may write
it, and the same for every directory above it up to `/` (whoever can write a directory
can swap the file in it). A sticky world-writable directory such as /tmp counts as
writable: anyone may create names in it, and a name not there yet is anyone's.

`read_trusted` is the one function that reads config files (service files, healerd.yaml,
env files, auth.json, which others must not read either), at load and again when an
env file is read for a new container, so that what was checked is what is read;
checking a path and then opening it by name would let the file be swapped in between:

- the path is walked from `/` one component at a time (healerd.config.pathwalk): every
  directory is opened with O_NOFOLLOW below the one before and checked through its
  descriptor (fstat), so no component can change between the check and the open; a
  symbolic link in a directory component is followed only after the directory that
  holds it passed (whoever can write that directory can re-point the link), and its
  target is walked and checked the same way (issue 29: `realpath` and a check of the
  result missed the directories holding links);
- the file is opened with O_NOFOLLOW and O_NONBLOCK below the last directory's
  descriptor, then checked through its descriptor and read from it;
- a symbolic link as the last component is refused, except where the caller allows it
  (service files in conf.d): then it is followed as above;
- anything but a regular file (a FIFO, a device, a socket, a directory) is refused, and
  a FIFO never blocks the reader;
- at most `limit` bytes are read; a larger file is refused.

The same walk judges what healerd hands on rather than reads: a secret's or config's
file (`read_trusted_resolved` gives the engine the path without links), a bind source
and the project directory (`trusted_location`, `trusted_directory`: the directories
that lead to them) and a credential helper it runs (`trusted_executable`).

`strict_modes: false` in healerd.yaml skips the owner and mode checks and follows
symbolic links (development only); non-regular files and the size limit are still
refused. healerd.yaml itself is always read strictly: it is what sets strict_modes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from healerd.config.pathwalk import Walk, WalkRefused

_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
STRICT_ESCAPE = " or set strict_modes: false in healerd.yaml (development only)"
_RISK = "anyone who can write it could run containers as root"
_DIR_RISK = (
    "anyone who can write a directory above the file could swap it and run containers as root"
)


class FileRefused(Exception):
    """A config file refused before anything in it was read. The message names the file
    and what is wrong with it, never its contents."""


def trusted_owners() -> frozenset[int]:
    return frozenset({0, os.geteuid()})


def _weakness(path: Path, mode: int, uid: int) -> tuple[str, str] | None:
    """Why an inode with `mode` and owner `uid` is not trusted, and the fix; or None."""
    writable = []
    if mode & stat.S_IWGRP:
        writable.append("group")
    if mode & stat.S_IWOTH:
        writable.append("others")
    details = f"mode {stat.S_IMODE(mode):04o}, owner uid {uid}"
    if writable:
        return f"is writable by {' and '.join(writable)} ({details})", f"chmod go-w {path}"
    if uid not in trusted_owners():
        return f"is owned by uid {uid}, not root or healerd's own user ({details})", (
            f"chown root {path}"
        )
    return None


def mode_problem(
    path: Path, mode: int, uid: int, what: str = "file", escape: str = STRICT_ESCAPE
) -> str | None:
    """The check of a file's own mode and owner bits (also used by tests)."""
    weak = _weakness(path, mode, uid)
    if weak is None:
        return None
    why, fix = weak
    return f"refused: {what} {path} {why}; {_RISK}. Fix it ({fix}){escape}"


def trust_problem(path: Path, what: str = "file") -> str | None:
    """Why `path` itself (followed through symlinks) must not be trusted, or None; its
    directories are not looked at (read_trusted checks every one).

    A path that cannot be examined is not judged here: reading it reports that better.
    """
    try:
        st = path.stat()
    except OSError:
        return None
    return mode_problem(path, st.st_mode, st.st_uid, what)


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _size_text(size: int) -> str:
    return f"{size // 2**20} MiB" if size % 2**20 == 0 else f"{size} bytes"


class _DirCheck:
    """The check of every directory a walk enters; `shown` (what is being opened) may
    grow while the walk goes on (a link followed)."""

    def __init__(self, shown: str, escape: str, risk: str = _DIR_RISK) -> None:
        self.shown, self.escape, self.risk = shown, escape, risk

    def __call__(self, fd: int, directory: Path) -> None:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            raise FileRefused(
                f"refused: {self.shown}: {directory} changed while it was being checked"
            )
        weak = _weakness(directory, st.st_mode, st.st_uid)
        if weak is None:
            return
        why, fix = weak
        if stat.S_IMODE(st.st_mode) & stat.S_ISVTX and st.st_mode & stat.S_IWOTH:
            # /tmp and the like: the sticky bit keeps others from renaming the file, but
            # they can create any name not taken yet (the file itself while it is away).
            why += ", sticky but anyone can create names in it"
            fix = "keep the file in directories that only root can write"
        else:
            fix = f"fix the directory ({fix}) or keep the file elsewhere"
        raise FileRefused(
            f"refused: {self.shown}: its directory {directory} {why}; {self.risk}. "
            f"Fix it: {fix}{self.escape}"
        )


@contextlib.contextmanager
def _walked(path: Path, check: _DirCheck) -> Iterator[Walk]:
    """A walk of `path` (healerd.config.pathwalk) whose every directory passes `check`."""
    try:
        with Walk(path, check) as walk:
            yield walk
    except WalkRefused as exc:
        raise FileRefused(f"refused: {check.shown}: {exc}") from None


def _open_strict(
    path: Path, shown: str, follow_symlink: bool, escape: str
) -> tuple[int, Path, str]:
    """The open file, the path it was found at (without links) and how to name it."""
    check = _DirCheck(shown, escape)
    with _walked(path, check) as walk:
        name = walk.to_parent()
        while name is not None:
            try:
                fd = _open_file(name, _FILE_FLAGS | os.O_NOFOLLOW, check.shown, walk.fd)
                return fd, walk.here / name, check.shown
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
            if not follow_symlink:
                where = "only service files in conf.d may be links, to trusted files"
                raise FileRefused(
                    f"refused: {check.shown} is a symbolic link, which healerd does not "
                    f"follow here ({where}): name the file itself"
                )
            if not walk.follow(name):
                raise FileRefused(f"refused: {check.shown} changed while it was being checked")
            if check.shown == shown:
                check.shown = f"{shown} (a symbolic link to {walk.links[-1][1]})"
            name = walk.to_parent()
    raise FileRefused(f"refused: {shown} is a directory, not a regular file")


def _open_file(name: str | Path, flags: int, shown: str, dir_fd: int | None = None) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # what opening a socket gives
            raise
        raise FileRefused(f"refused: {shown} is a socket or a device, not a regular file") from None


def _secret_exposed(path: Path, shown: str, mode: int, escape: str) -> FileRefused | None:
    """A file of secrets (registry passwords) that group or others may read."""
    readable = [
        who for bit, who in ((stat.S_IRGRP, "group"), (stat.S_IROTH, "others")) if mode & bit
    ]
    if not readable:
        return None
    return FileRefused(
        f"refused: {shown} is readable by {' and '.join(readable)} (mode "
        f"{stat.S_IMODE(mode):04o}); it holds secrets that only root may read. Fix it "
        f"(chmod 600 {path}){escape}"
    )


def _read_fd(
    fd: int, path: Path, shown: str, limit: int, strict: bool, escape: str, private: bool
) -> bytes:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"refused: {shown} is {_kind(st.st_mode)}, not a regular file")
    if strict and (weak := _weakness(path, st.st_mode, st.st_uid)):
        why, fix = weak
        raise FileRefused(f"refused: {shown} {why}; {_RISK}. Fix it ({fix}){escape}")
    if strict and private and (exposed := _secret_exposed(path, shown, st.st_mode, escape)):
        raise exposed
    too_large = FileRefused(
        f"refused: {shown} is larger than {_size_text(limit)}, the most healerd reads of it"
    )
    if st.st_size > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise too_large
    return b"".join(chunks)


def read_trusted(
    path: Path,
    what: str,
    *,
    strict: bool,
    limit: int,
    follow_symlink: bool = False,
    escape: str = STRICT_ESCAPE,
    private: bool = False,
) -> bytes:
    """The contents of the config file `path` (`what` names its kind in messages, such as
    "env file"), read as the module docstring says.

    Raises FileRefused (untrusted, not a regular file, too large) or OSError (missing,
    unreadable). `escape` ends the advice of a trust refusal. `private` (a file of
    secrets, auth.json): with strict checks, also refused when group or others may read
    it.
    """
    return read_trusted_resolved(
        path,
        what,
        strict=strict,
        limit=limit,
        follow_symlink=follow_symlink,
        escape=escape,
        private=private,
    )[0]


def read_trusted_resolved(
    path: Path,
    what: str,
    *,
    strict: bool,
    limit: int,
    follow_symlink: bool = False,
    escape: str = STRICT_ESCAPE,
    private: bool = False,
) -> tuple[bytes, Path]:
    """As read_trusted, and the path the file was read at: absolute, without symbolic
    links, every directory of it trusted (under `strict`), so that handing this path to
    another reader (the engine, which resolves a bind source again) cannot lead it
    elsewhere through a link that someone untrusted can change."""
    shown = f"{what} {path}"
    if strict:
        fd, resolved, shown = _open_strict(path, shown, follow_symlink, escape)
    else:
        resolved = Path(os.path.realpath(path))
        fd = _open_file(resolved, _FILE_FLAGS, shown)
    try:
        return _read_fd(fd, path, shown, limit, strict, escape, private), resolved
    finally:
        os.close(fd)


def trusted_executable(path: Path, what: str, escape: str = STRICT_ESCAPE) -> Path:
    """The program `path` leads to (absolute, without links) after the checks of a
    config file on it and on every directory on the way, links followed as for a service
    file in conf.d: healerd runs it as root, so whoever could change it could run anything
    as root. Raises FileRefused or OSError (missing)."""
    shown = f"{what} {path}"
    check = _DirCheck(
        shown,
        escape,
        "anyone who can write a directory above it could swap the program, which healerd "
        "runs as root",
    )
    with _walked(path, check) as walk:
        name = walk.to_parent()
        while name is not None and walk.follow(name):
            name = walk.to_parent()
        if name is None:
            raise FileRefused(f"refused: {shown} is a directory, not a program")
        fd = os.open(name, os.O_CLOEXEC | os.O_NOFOLLOW | getattr(os, "O_PATH", 0), dir_fd=walk.fd)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        resolved = walk.here / name
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"refused: {shown} is {_kind(st.st_mode)}, not a program")
    if weak := _weakness(resolved, st.st_mode, st.st_uid):
        why, fix = weak
        where = "" if resolved == path else f" (at {resolved})"
        raise FileRefused(
            f"refused: {shown}{where} {why}; anyone who can write it could run anything "
            f"as root through healerd. Fix it ({fix}){escape}"
        )
    return resolved


def trusted_location(path: Path, what: str, escape: str = STRICT_ESCAPE) -> None:
    """Refuses (FileRefused) a path whose directories are not all trusted: every one from
    `/` to the one that holds it, links on the way followed and the directories that
    hold them checked, and, when `path` itself is a link, those of its target. `path`
    itself is not judged: a bind source is the container's data, often owned by the
    container's user. A part that does not exist yet is judged by the directories that
    do: only someone who may write those could create it."""
    check = _DirCheck(
        f"{what} {path}",
        escape,
        "anyone who can write a directory above it could swap it for a link to any host "
        "path, which the engine would mount into the container",
    )
    try:
        with _walked(path, check) as walk:
            name = walk.to_parent()
            while name is not None and walk.follow(name):
                name = walk.to_parent()
    except FileNotFoundError:
        return


def trusted_directory(path: Path, what: str, escape: str = STRICT_ESCAPE) -> None:
    """Refuses (FileRefused) a directory that, or a directory above which (links
    followed), someone untrusted could write: the project directory, where env files and
    bind sources are found. Raises OSError when it cannot be walked (missing)."""
    check = _DirCheck(
        f"{what} {path}",
        escape,
        "anyone who can write it or a directory above it could swap the files and bind "
        "sources found in it and run containers as root",
    )
    with _walked(path, check) as walk:
        walk.to_parent(into_last=True)
