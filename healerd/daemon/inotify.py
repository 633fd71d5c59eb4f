"""Linux inotify through ctypes: the few calls the config watcher needs, standard library only.

Debian packages no inotify binding for Python, and healerd's Debian package depends on
Debian's own modules only, so the binding is here: `inotify_init1`, `inotify_add_watch`
and `inotify_rm_watch` from the C library, and events read with os.read and parsed from
`struct inotify_event` (linux/inotify.h):

    struct inotify_event {
        int      wd;      /* watch descriptor */
        uint32_t mask;    /* what happened */
        uint32_t cookie;  /* ties an IN_MOVED_FROM to its IN_MOVED_TO */
        uint32_t len;     /* size of name, NUL padding included */
        char     name[];  /* file name inside a watched directory, NUL-terminated */
    };

Failures raise OSError with the C library's errno: ENOSYS on a kernel (or a C library)
without inotify, EMFILE when the per-user instance limit is reached, ENOSPC from
add_watch when the watch limit is.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

# The kernel's values (linux/inotify.h).
IN_ACCESS = 0x1
IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_CLOSE_NOWRITE = 0x10
IN_OPEN = 0x20
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

HEADER = struct.Struct("iIII")  # wd, mask, cookie, len: native sizes and alignment
NAME_MAX = 255
# A read must have room for at least one event with the longest name (else EINVAL).
READ_SIZE = 64 * 1024


@dataclass(frozen=True)
class Event:
    """One event; `name` is empty for an event on the watched directory itself."""

    wd: int
    mask: int
    cookie: int
    name: str


def parse_events(data: bytes) -> list[Event]:
    """The events in one read's bytes (whole events only, as the kernel returns them)."""
    events = []
    offset = 0
    while offset + HEADER.size <= len(data):
        wd, mask, cookie, length = HEADER.unpack_from(data, offset)
        offset += HEADER.size
        raw = data[offset : offset + length].split(b"\0", 1)[0]
        offset += length
        events.append(Event(wd, mask, cookie, os.fsdecode(raw)))
    return events


@dataclass(frozen=True)
class _Calls:
    init1: ctypes._NamedFuncPointer
    add_watch: ctypes._NamedFuncPointer
    rm_watch: ctypes._NamedFuncPointer


_calls: _Calls | None = None


def _libc_calls() -> _Calls:
    """The C library's inotify functions; OSError(ENOSYS) when it has none."""
    global _calls
    if _calls is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            calls = _Calls(libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch)
        except (OSError, AttributeError) as exc:
            raise OSError(errno.ENOSYS, f"no inotify in the C library: {exc}") from None
        calls.init1.argtypes = [ctypes.c_int]
        calls.init1.restype = ctypes.c_int
        calls.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        calls.add_watch.restype = ctypes.c_int
        calls.rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        calls.rm_watch.restype = ctypes.c_int
        _calls = calls
    return _calls


def _error(what: str, path: str | None = None) -> OSError:
    code = ctypes.get_errno()
    if path is None:
        return OSError(code, f"{what}: {os.strerror(code)}")
    return OSError(code, os.strerror(code), path)


class Inotify:
    """One inotify instance (a file descriptor, non-blocking and close-on-exec).

    Wait for it with select/poll on fileno(), then read(). Usable as a context manager.
    """

    def __init__(self) -> None:
        self._calls = _libc_calls()
        fd = int(self._calls.init1(IN_NONBLOCK | IN_CLOEXEC))
        if fd < 0:
            raise _error("inotify_init1")
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def add_watch(self, path: str | Path, mask: int) -> int:
        """Watches `path` (or changes its watch's mask); returns the watch descriptor.
        A missing path raises FileNotFoundError, as open() would."""
        wd = int(self._calls.add_watch(self._fd, os.fsencode(path), mask))
        if wd < 0:
            raise _error("inotify_add_watch", str(path))
        return wd

    def rm_watch(self, wd: int) -> None:
        """Ends a watch; the kernel then queues IN_IGNORED for it."""
        if int(self._calls.rm_watch(self._fd, wd)) < 0:
            raise _error("inotify_rm_watch")

    def read(self) -> list[Event]:
        """The events queued now; [] when there are none (never blocks)."""
        try:
            data = os.read(self._fd, READ_SIZE)
        except BlockingIOError:
            return []
        return parse_events(data)

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __enter__(self) -> Inotify:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.close()
