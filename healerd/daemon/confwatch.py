"""Hot reload: notice changes in CONFIG_DIR/conf.d within a second and ask for a reload.

inotify (through inotify_simple) watches conf.d and the config directory itself, so that
conf.d being deleted, recreated or renamed is noticed too. A burst of events (an editor's
save, `cp` of a large file, a package install) is debounced: the callback runs once
`QUIET` seconds pass without a new event, and at most `MAX_DELAY` seconds after the first
one. A half-written file is then simply an invalid file: the reload keeps its last good
state, and the next write (another event) retries it.

Only names that count as service files trigger a reload (see healerd.config.desired's
is_config_name: `*.yaml`/`*.yml`, no dotfiles, no editor or package-manager leftovers
such as `*~`, `*.swp`, `*.dpkg-new`, `*.rpmsave`, `*.bak`). A change to healerd.yaml
reloads too: its node keys apply at once, the daemon logs which others wait for a
restart. Without inotify (no kernel support, or the
watch limit reached) the watcher polls every second instead.

SIGHUP and the periodic resync still reload as before; this only makes it prompt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from healerd.config import is_config_name

log = logging.getLogger("healerd.confwatch")

QUIET = 0.2
MAX_DELAY = 0.8
POLL_INTERVAL = 1.0
RETRY_INTERVAL = 1.0  # how often to try to watch a directory that does not exist
SETTINGS_FILE = "healerd.yaml"
CONF_D = "conf.d"

try:
    import inotify_simple  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - the dependency is declared
    inotify_simple = None

# The kernel's values (linux/inotify.h), so that nothing else depends on the library.
IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000

_DIR_EVENTS = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)

_Snapshot = dict[str, tuple[int, ...]]


class ConfigWatcher:
    """Calls `callback` (from its own thread) soon after conf.d changes.

    `callback` must be quick and thread-safe: the daemon passes request_reload, which only
    sets a flag. `use_inotify=False` forces polling (tests, or systems without inotify).
    """

    def __init__(
        self,
        config_dir: Path,
        callback: Callable[[], None],
        *,
        quiet: float = QUIET,
        max_delay: float = MAX_DELAY,
        poll_interval: float = POLL_INTERVAL,
        use_inotify: bool = True,
    ) -> None:
        self.config_dir = config_dir
        self.conf_d = config_dir / CONF_D
        self._callback = callback
        self._quiet = quiet
        self._max_delay = max_delay
        self._poll_interval = poll_interval
        self._use_inotify = use_inotify and inotify_simple is not None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self.mode = "stopped"
        # Debounce state: when the first pending event arrived and the latest one did.
        self._first: float | None = None
        self._last = 0.0

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        inotify = self._open_inotify() if self._use_inotify else None
        self.mode = "inotify" if inotify is not None else "polling"
        target = self._run_inotify if inotify is not None else self._run_polling
        self._thread = threading.Thread(
            target=self._guard, args=(target, inotify), name="healerd-confwatch", daemon=True
        )
        self._thread.start()
        log.info("watching %s for changes (%s)", self.conf_d, self.mode)

    def stop(self, timeout: float = 2.0) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.mode = "stopped"

    def _guard(self, target: Callable[[Any], None], inotify: Any) -> None:
        """A watcher bug must not go unnoticed, nor end hot reload for good: fall back."""
        try:
            target(inotify)
        except Exception:
            if self._stopping.is_set():
                return
            log.exception("config watcher failed; polling %s every second instead", self.conf_d)
            self.mode = "polling"
            self._run_polling(None)
        finally:
            if inotify is not None:
                with contextlib.suppress(OSError):
                    inotify.close()

    # -- debounce -----------------------------------------------------------------

    def _note(self, now: float) -> None:
        if self._first is None:
            self._first = now
        self._last = now

    def _due_in(self, now: float) -> float | None:
        """Seconds until the pending callback is due (<= 0: now), None when none is pending."""
        if self._first is None:
            return None
        return min(self._last + self._quiet, self._first + self._max_delay) - now

    def _fire(self) -> None:
        self._first = None
        try:
            self._callback()
        except Exception:
            log.exception("config reload callback failed")

    # -- inotify --------------------------------------------------------------------

    def _open_inotify(self) -> Any:
        try:
            return inotify_simple.INotify()
        except OSError as exc:
            log.warning("inotify is not available (%s): polling for config changes", exc)
            return None

    def _run_inotify(self, inotify: Any) -> None:
        watches: dict[int, Path] = {}
        next_retry = 0.0
        poller = select.poll()
        poller.register(inotify.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stopping.is_set():
            now = time.monotonic()
            missing = self._missing(watches)
            if missing and now >= next_retry:
                if self._add_watches(inotify, watches):
                    self._note(now)  # files may have appeared before the watch did
                next_retry = now + RETRY_INTERVAL
                missing = self._missing(watches)
            due = self._due_in(now)
            if due is not None and due <= 0:
                self._fire()
                continue
            waits = [d for d in (due, next_retry - now if missing else None) if d is not None]
            timeout_ms = None if not waits else max(1, int(min(waits) * 1000) + 1)
            if not poller.poll(timeout_ms) or self._stopping.is_set():
                continue
            for event in inotify.read(timeout=0):
                self._handle(inotify, watches, event)

    def _missing(self, watches: dict[int, Path]) -> bool:
        return not {self.config_dir, self.conf_d} <= set(watches.values())

    def _add_watches(
        self, inotify: Any, watches: dict[int, Path], *, again: Path | None = None
    ) -> bool:
        """Watches the config dir and conf.d where missing (and `again` in any case, for a
        directory replaced under the same name); True when a watch was added."""
        added = False
        for path in (self.config_dir, self.conf_d):
            if path in watches.values() and path != again:
                continue
            try:
                wd = inotify.add_watch(str(path), _DIR_EVENTS)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:  # ENOSPC: the watch limit; EACCES
                log.warning("cannot watch %s (%s); relying on resync", path, exc)
                continue
            watches[wd] = path
            added = True
        return added

    def _handle(self, inotify: Any, watches: dict[int, Path], event: Any) -> None:
        now = time.monotonic()
        mask, name = int(event.mask), str(event.name)
        if mask & IN_Q_OVERFLOW:
            self._note(now)  # events were lost: reload to be sure
            return
        path = watches.get(int(event.wd))
        if path is None:
            return
        if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
            # The directory went away (or was renamed): forget it, re-add it when it is back.
            if mask & IN_IGNORED or mask & IN_MOVE_SELF:
                watches.pop(int(event.wd), None)
                if mask & IN_MOVE_SELF:
                    with contextlib.suppress(OSError):
                        inotify.rm_watch(int(event.wd))
            self._note(now)
            return
        if path == self.conf_d:
            if not name or is_config_name(name):  # no name: conf.d itself (chmod, chown)
                self._note(now)
        elif name == CONF_D:
            if mask & (IN_CREATE | IN_MOVED_TO):
                self._add_watches(inotify, watches, again=self.conf_d)
            self._note(now)
        elif name == SETTINGS_FILE and mask & (IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE):
            self._note(now)
        elif not name:
            self._note(now)  # the config directory's own mode or owner changed

    # -- polling --------------------------------------------------------------------

    def _snapshot(self) -> _Snapshot:
        snap: _Snapshot = {}
        for key, path in ((".", self.config_dir), (CONF_D, self.conf_d)):
            with contextlib.suppress(OSError):
                st = path.stat()
                snap[key] = (st.st_ino, st.st_mode, st.st_uid)
        with contextlib.suppress(OSError):
            st = (self.config_dir / SETTINGS_FILE).stat()
            snap[SETTINGS_FILE] = (st.st_ino, st.st_mtime_ns, st.st_size)
        try:
            names = [n for n in os.listdir(self.conf_d) if is_config_name(n)]
        except OSError:
            names = []
        for name in names:
            with contextlib.suppress(OSError):
                st = (self.conf_d / name).stat()
                snap[f"{CONF_D}/{name}"] = (
                    st.st_ino,
                    st.st_mtime_ns,
                    st.st_size,
                    st.st_mode,
                    st.st_uid,
                )
        return snap

    def _run_polling(self, _inotify: Any) -> None:
        before = self._snapshot()
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        while not self._stopping.is_set():
            poller.poll(int(self._poll_interval * 1000))
            if self._stopping.is_set():
                return
            after = self._snapshot()
            if after != before:
                self._fire()
                before = after
