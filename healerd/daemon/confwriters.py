"""Config files being written: a change holds a file until its writer is done with it
(closes it, renames onto it, deletes it), or until `WRITE_BOUND` seconds after its
first change, when it is applied as it stands. healerd.daemon.confwatch feeds it
inotify events (or its polls); reloads read `writing()` to keep such files' last state.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

from healerd.daemon.inotify import (
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_MODIFY,
    IN_MOVED_FROM,
    IN_MOVED_TO,
)

WRITE_BOUND = 5.0  # a file open for writing longer than this is applied as it stands
_DONE = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE


def _being_created(path: Path) -> bool:
    """A new regular file of one link: its writer has it open (a hard link or a symlink
    arrives complete, and no close will follow)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


class Writers:
    """Config files being written, each with when its first change was seen, and those
    past the bound (applied as they stand until their writer is done).

    The watcher's thread changes it; reloads read `writing()` from another thread.
    """

    def __init__(
        self, bound: float = WRITE_BOUND, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.bound = bound
        self._clock = clock
        self._since: dict[Path, float] = {}
        self._late: set[Path] = set()
        self._lock = threading.Lock()

    def on_event(self, path: Path, mask: int) -> bool:
        """One inotify event on a config file: True when a reload should follow (the file
        is complete, gone, or its mode changed), False while it is being written."""
        if mask & IN_MODIFY or (mask & IN_CREATE and _being_created(path)):
            return not self.begin(path)
        if mask & _DONE:
            self.end(path)
        return True

    def begin(self, path: Path) -> bool:
        """A change: True when it holds the file, False past the bound."""
        with self._lock:
            if path in self._late:
                return False
            self._since.setdefault(path, self._clock())
            return True

    def end(self, path: Path) -> None:
        """The writer is done (or the file gone): the next change holds it again."""
        with self._lock:
            self._since.pop(path, None)
            self._late.discard(path)

    def end_under(self, directory: Path) -> None:
        """The directory went away: so did the files being written in it."""
        with self._lock:
            for path in [p for p in self._since if p.parent == directory]:
                del self._since[path]
            self._late = {p for p in self._late if p.parent != directory}

    def expire(self) -> list[Path]:
        """Files that have just passed the bound: no longer held, applied as they stand."""
        now = self._clock()
        with self._lock:
            late = [p for p, since in self._since.items() if now >= since + self.bound]
            for path in late:
                del self._since[path]
            self._late.update(late)
        return sorted(late)

    def late(self) -> frozenset[Path]:
        """Files past the bound whose writer is not done yet."""
        with self._lock:
            return frozenset(self._late)

    def next_expiry(self) -> float | None:
        with self._lock:
            return min(self._since.values(), default=None) if self._since else None

    def writing(self) -> frozenset[Path]:
        """Files being written now: changed, not yet complete, within the bound."""
        now = self._clock()
        with self._lock:
            return frozenset(p for p, since in self._since.items() if now < since + self.bound)
