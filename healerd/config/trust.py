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

- every directory is opened from `/` down, one component at a time with O_NOFOLLOW, and
  checked through its descriptor (fstat), so no component can change between the check
  and the open;
- the file is opened with O_NOFOLLOW and O_NONBLOCK below the last directory's
  descriptor, then checked through its descriptor and read from it;
- a symbolic link as the last component is refused, except where the caller allows it
  (service files in conf.d): then its target, resolved, must be trusted in every
  component, and is opened the same way;
- anything but a regular file (a FIFO, a device, a socket, a directory) is refused, and
  a FIFO never blocks the reader;
- at most `limit` bytes are read; a larger file is refused.

`strict_modes: false` in healerd.yaml skips the owner and mode checks and follows
symbolic links (development only); non-regular files and the size limit are still
refused. healerd.yaml itself is always read strictly: it is what sets strict_modes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# O_PATH opens a directory without needing read permission on it (Linux).
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_PATH", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
STRICT_ESCAPE = " or set strict_modes: false in healerd.yaml (development only)"
_RISK = "anyone who can write it could run containers as root"


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


def _check_dir(fd: int, directory: Path, shown: str, escape: str) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise FileRefused(f"refused: {shown}: {directory} changed while it was being checked")
    weak = _weakness(directory, st.st_mode, st.st_uid)
    if weak is None:
        return
    why, fix = weak
    if stat.S_IMODE(st.st_mode) & stat.S_ISVTX and st.st_mode & stat.S_IWOTH:
        # /tmp and the like: the sticky bit keeps others from renaming the file, but they
        # can create any name not taken yet (the file itself while it is away).
        why += ", sticky but anyone can create names in it"
        fix = "keep the file in directories that only root can write"
    else:
        fix = f"fix the directory ({fix}) or keep the file elsewhere"
    raise FileRefused(
        f"refused: {shown}: its directory {directory} {why}; anyone who can write a "
        f"directory above the file could swap it and run containers as root. Fix it: "
        f"{fix}{escape}"
    )


def _open_dirs(directory: Path, shown: str, escape: str) -> int:
    """A descriptor of `directory` (absolute, without symlinks) after checking every
    component from `/` down through its own descriptor."""
    fd = os.open("/", _DIR_FLAGS)
    current = Path("/")
    try:
        _check_dir(fd, current, shown, escape)
        for part in directory.parts[1:]:
            current = current / part
            try:
                next_fd = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise FileRefused(
                        f"refused: {shown}: {current} changed while it was being checked, "
                        "or is not a directory"
                    ) from None
                raise
            os.close(fd)
            fd = next_fd
            _check_dir(fd, current, shown, escape)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_strict(path: Path, shown: str, follow_symlink: bool, escape: str) -> int:
    target = Path(os.path.abspath(path))
    if follow_symlink and os.path.islink(target):
        # The link's own directories must pass too (whoever can write them can change
        # the link), then every directory of what it leads to.
        os.close(_open_dirs(Path(os.path.realpath(target.parent)), shown, escape))
        target = Path(os.path.realpath(target))
        shown = f"{shown} (a symbolic link to {target})"
    parent = Path(os.path.realpath(target.parent))
    dir_fd = _open_dirs(parent, shown, escape)
    try:
        return _open_file(target.name, _FILE_FLAGS | os.O_NOFOLLOW, shown, dir_fd)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        where = "only service files in conf.d may be links, to trusted files"
        raise FileRefused(
            f"refused: {shown} is a symbolic link, which healerd does not follow here "
            f"({where}): name the file itself"
        ) from None
    finally:
        os.close(dir_fd)


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
    shown = f"{what} {path}"
    if strict:
        fd = _open_strict(path, shown, follow_symlink, escape)
    else:
        fd = _open_file(path, _FILE_FLAGS, shown)
    try:
        return _read_fd(fd, path, shown, limit, strict, escape, private)
    finally:
        os.close(fd)
