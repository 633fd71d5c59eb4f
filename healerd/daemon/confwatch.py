"""Hot reload: apply a config file soon after its writer is done with it, never before.

inotify (healerd.daemon.inotify, through ctypes) watches conf.d and the config directory
itself, so that conf.d being deleted, recreated or renamed is noticed too. A file is
complete, and a reload is asked for, when

- its writer closes it (`IN_CLOSE_WRITE`: `cat > f`, cp, scp, tee, an editor writing in
  place), or
- a file is renamed onto its name (`IN_MOVED_TO`: editors, sed -i, rsync, config tools
  that write a temporary file and rename it), or it is deleted or renamed away, or its
  mode or owner changes.

`IN_MODIFY` (and the creation of a new regular file) only starts "being written": no
reload is asked for, and every other reload (SIGHUP, the periodic resync, `healerctl
reload`) keeps that file's last state (`writing()`, used by the daemon's reload). A file
still open for writing `WRITE_BOUND` seconds after its first change is applied as it
stands then, with a warning naming it (a writer that never closes, or a close lost in an
event queue overflow); from then on each of its writes applies (debounced), until its
writer is done with it (close, rename, delete) and a new change holds it again.
Which files are being written is healerd.daemon.confwriters' `Writers`.

A burst of completions (a package install, `cp -r`) is debounced: the callback runs once
`QUIET` seconds pass without a new one, and at most `MAX_DELAY` seconds after the first.

Only names that count as service files matter (see healerd.config.desired's
is_config_name: `*.yaml`/`*.yml`, no dotfiles, no editor or package-manager leftovers
such as `*~`, `*.swp`, `*.dpkg-new`, `*.rpmsave`, `*.bak`), plus healerd.yaml under the
same rules: its node keys apply at once, the daemon logs which others wait for a restart;
and each service file's variables, `<name>.env` (healerd.config.interpolate); and the
files of project directories, wherever they are (healerd.daemon.projectwatch).

Without inotify (ENOSYS, the instance limit) or when the watch limit is reached (ENOSPC),
the watcher polls every `POLL_INTERVAL` seconds instead: a change is applied once the
file's size, mtime and inode have stayed the same for one poll interval, and counts as
being written until then. That is best effort: a writer that pauses longer than the
interval cannot be told from one that is done. `HEALERD_CONFWATCH=polling` in the
environment forces polling (for tests only).

SIGHUP, the periodic resync and `healerctl reload` re-read every file too, except those
that `writing()` names. The daemon starts the watcher before its first read, so a file
written from then on is held at start too; a writer already busy before healerd started
cannot be known, and its file is read as it stands.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from healerd.config import is_config_name
from healerd.daemon.confwriters import WRITE_BOUND, Writers
from healerd.daemon.inotify import (
    IN_ATTRIB,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_ISDIR,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    Event,
    Inotify,
)
from healerd.daemon.projectwatch import ProjectFiles, WatchLimit

__all__ = [
    "CONF_D", "MODE_ENV", "SETTINGS_FILE", "WRITE_BOUND", "ConfigWatcher", "Inotify", "Writers",
    "inotify_wanted", "is_variables_name",
]  # fmt: skip

log = logging.getLogger("healerd.confwatch")

QUIET = 0.2
MAX_DELAY = 0.8
POLL_INTERVAL = 1.0
RETRY_INTERVAL = 1.0  # how often to try to watch a directory that does not exist
SETTINGS_FILE = "healerd.yaml"


def is_variables_name(name: str) -> bool:
    """A service file's variables (`<name>.env`, healerd.config.interpolate): an edit
    reloads, as an edit of the file itself does."""
    return name.endswith(".env") and is_config_name(name[: -len(".env")] + ".yaml")


CONF_D = "conf.d"
MODE_ENV = "HEALERD_CONFWATCH"  # "polling": no inotify (tests only)

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

_Snapshot = dict[Path, tuple[int, ...]]


def inotify_wanted() -> bool:
    """False when the environment asks for polling (MODE_ENV=polling, for tests)."""
    return os.environ.get(MODE_ENV, "").strip().lower() != "polling"


class _Fallback(Exception):
    """inotify cannot go on (the watch limit): poll instead."""


class ConfigWatcher:
    """Calls `callback` (from its own thread) soon after a config file is complete.

    `callback` must be quick and thread-safe: the daemon passes request_reload, which only
    sets a flag. `use_inotify=False` forces polling (tests, or systems without inotify);
    None asks the environment (MODE_ENV). `write_bound` and `clock` are for tests.
    """

    def __init__(
        self,
        config_dir: Path,
        callback: Callable[[], None],
        *,
        quiet: float = QUIET,
        max_delay: float = MAX_DELAY,
        poll_interval: float = POLL_INTERVAL,
        use_inotify: bool | None = None,
        write_bound: float = WRITE_BOUND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config_dir = config_dir
        self.conf_d = config_dir / CONF_D
        self._callback = callback
        self._quiet = quiet
        self._max_delay = max_delay
        self._poll_interval = poll_interval
        self._use_inotify = inotify_wanted() if use_inotify is None else use_inotify
        self._clock = clock
        self.writers = Writers(write_bound, clock)
        self.projects = ProjectFiles(self.conf_d)
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._wake_r = self._wake_w = -1
        self.mode = "stopped"
        self._polled: _Snapshot | None = None  # polling: the files as the last poll saw them
        # Debounce state: when the first pending event arrived and the latest one did.
        self._first: float | None = None
        self._last = 0.0

    def writing(self) -> frozenset[Path]:
        """Config files (conf.d's and healerd.yaml) being written now: a reload keeps
        their last state. Empty while the watcher is not running. When polling, a file
        that changed since the last poll counts too: it was not seen stable yet."""
        held = self.writers.writing()
        polled = self._polled
        if polled is None or self.mode != "polling":
            return held
        current = self._snapshot()
        unseen = {p for p in self._files(current) if current[p] != polled.get(p)}
        return held | (unseen - self.writers.late())

    def watch_also(self, files: Iterable[str]) -> None:
        """The files conf.d's projects read at the last reload: watched too (projectwatch)."""
        # Polling reads the project files at each poll: a wake would cut its stability rule.
        if self.projects.set(files) and self._wake_w >= 0 and self.mode == "inotify":
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"p")

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        inotify = self._open_inotify() if self._use_inotify else None
        self.mode = "inotify" if inotify is not None else "polling"
        self._thread = threading.Thread(
            target=self._guard, args=(inotify,), name="healerd-confwatch", daemon=True
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
        self._wake_r = self._wake_w = -1
        self.mode = "stopped"
        self._polled = None

    def _guard(self, inotify: Inotify | None) -> None:
        """A watcher bug must not go unnoticed, nor end hot reload for good: fall back."""
        try:
            try:
                if inotify is None:
                    self._run_polling()
                else:
                    self._run_inotify(inotify)
                return
            finally:
                if inotify is not None:
                    inotify.close()
        except (_Fallback, WatchLimit) as exc:
            log.warning("%s: polling %s every %gs instead", exc, self.conf_d, self._poll_interval)
        except Exception:
            if self._stopping.is_set():
                return
            log.exception("config watcher failed; polling %s instead", self.conf_d)
        self._run_polling()  # says mode "polling" once it has its baseline

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

    def _expire(self) -> list[Path]:
        late = self.writers.expire()
        for path in late:
            doing = "open for writing" if self.mode == "inotify" else "changing"
            log.warning(
                "%s is still %s after %gs; applying it as it stands",
                path,
                doing,
                self.writers.bound,
            )
        return late

    # -- inotify --------------------------------------------------------------------

    def _open_inotify(self) -> Inotify | None:
        try:
            return Inotify()
        except OSError as exc:
            log.warning("inotify is not available (%s): polling for config changes", exc)
            return None

    def _run_inotify(self, inotify: Inotify) -> None:
        watches: dict[int, Path] = {}
        next_retry = 0.0
        poller = select.poll()
        poller.register(inotify.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stopping.is_set():
            now = self._clock()
            if self.projects.sync(inotify, watches, _DIR_EVENTS, (self.config_dir, self.conf_d)):
                self._note(now)  # files may have changed before the watch was there
            if self._missing(watches) and now >= next_retry:
                if self._add_watches(inotify, watches):
                    self._note(now)  # files may have appeared before the watch did
                next_retry = now + RETRY_INTERVAL
            if self._expire():
                self._note(now)
            due = self._due_in(now)
            if due is not None and due <= 0:
                self._fire()
                continue
            expiry = self.writers.next_expiry()
            waits = [
                due,
                next_retry - now if self._missing(watches) else None,
                None if expiry is None else expiry + self.writers.bound - now,
            ]
            ready = {fd for fd, _ in poller.poll(_timeout_ms(waits))}
            _drain(self._wake_r, ready)  # watch_also's wake-up: synced at the loop's top
            if not ready or self._stopping.is_set():
                continue
            for event in inotify.read():
                self._handle(inotify, watches, event)

    def _missing(self, watches: dict[int, Path]) -> bool:
        return not {self.config_dir, self.conf_d} <= set(watches.values())

    def _add_watches(
        self, inotify: Inotify, watches: dict[int, Path], *, again: Path | None = None
    ) -> bool:
        """Watches the config dir and conf.d where missing (and `again` in any case, for a
        directory replaced under the same name); True when a watch was added."""
        added = False
        for path in (self.config_dir, self.conf_d):
            if path in watches.values() and path != again:
                continue
            try:
                wd = inotify.add_watch(path, _DIR_EVENTS)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise _Fallback(f"cannot watch {path}: the inotify watch limit") from exc
                log.warning("cannot watch %s (%s); relying on resync", path, exc)  # EACCES
                continue
            watches[wd] = path
            added = True
        return added

    def _handle(self, inotify: Inotify, watches: dict[int, Path], event: Event) -> None:
        now = self._clock()
        mask, name = event.mask, event.name
        if mask & IN_Q_OVERFLOW:
            self._note(now)  # events were lost: reload to be sure
            return
        path = watches.get(event.wd)
        if path is None:
            return
        if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
            # The directory went away (or was renamed): forget it, re-add it when it is back.
            if mask & (IN_IGNORED | IN_MOVE_SELF):
                watches.pop(event.wd, None)
                self.writers.end_under(path)
                if mask & IN_MOVE_SELF:
                    with contextlib.suppress(OSError):
                        inotify.rm_watch(event.wd)
            self._note(now)
            return
        if name and self._is_watched(path, name, mask):
            if self._completes(path, name, mask):
                self._note(now)
        elif path == self.config_dir and name == CONF_D:
            if mask & (IN_CREATE | IN_MOVED_TO):
                self._add_watches(inotify, watches, again=self.conf_d)
            self._note(now)
        elif not name:
            self._note(now)  # a watched directory's own mode or owner changed

    def _is_watched(self, directory: Path, name: str, mask: int) -> bool:
        return self._is_config_file(directory, name) or self.projects.relevant(
            directory, name, bool(mask & IN_ISDIR)
        )

    def _completes(self, directory: Path, name: str, mask: int) -> bool:
        """Whether the event completes a change (a project coming or going in conf.d does)."""
        if directory == self.conf_d and not self._is_config_file(directory, name):
            return True
        return self.writers.on_event(directory / name, mask)

    def _is_config_file(self, directory: Path, name: str) -> bool:
        if directory == self.conf_d:
            return is_config_name(name) or is_variables_name(name)
        return directory == self.config_dir and name == SETTINGS_FILE

    # -- polling --------------------------------------------------------------------

    def _snapshot(self) -> _Snapshot:
        snap: _Snapshot = {}
        for path in (self.config_dir, self.conf_d):
            with contextlib.suppress(OSError):
                st = path.stat()
                snap[path] = (st.st_ino, st.st_mode, st.st_uid)
        try:
            names = [
                n for n in os.listdir(self.conf_d) if is_config_name(n) or is_variables_name(n)
            ]
        except OSError:
            names = []
        files = [self.config_dir / SETTINGS_FILE, *(self.conf_d / n for n in names)]
        for file in [*files, *self.projects.snapshot_paths()]:
            with contextlib.suppress(OSError):
                st = file.stat()
                snap[file] = (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode, st.st_uid)
        return snap

    def _run_polling(self) -> None:
        applied = last = self._polled = self._snapshot()
        # Only now: a file written after the mode reads "polling" differs from the
        # baseline (set before it, a write in between was taken as already applied).
        self.mode = "polling"
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        while not self._stopping.is_set():
            _drain(self._wake_r, {fd for fd, _ in poller.poll(int(self._poll_interval * 1000))})
            if self._stopping.is_set():
                return
            current = self._snapshot()
            target = self.poll_step(applied, last, current)
            last = self._polled = current
            if target != applied:
                applied = target
                self._fire()

    def poll_step(self, applied: _Snapshot, last: _Snapshot, current: _Snapshot) -> _Snapshot:
        """What a reload would apply now: `current`, except that a file that changed since
        the last poll (`last`) counts as being written and keeps its `applied` state, until
        it is stable for one poll or past the bound. A reload is due when this differs
        from `applied`."""
        changing: set[Path] = set()
        for path in self._files(last.keys() | current.keys()):
            if path in current and current[path] != last.get(path):
                if self.writers.begin(path):
                    changing.add(path)
            else:
                self.writers.end(path)
        changing.difference_update(self._expire())
        target = {p: v for p, v in current.items() if p not in changing}
        target.update({p: applied[p] for p in changing if p in applied})
        return target

    def _files(self, paths: Iterable[Path]) -> list[Path]:
        return [p for p in paths if p not in (self.config_dir, self.conf_d)]


def _drain(fd: int, ready: set[int]) -> None:
    if fd in ready:
        with contextlib.suppress(OSError):
            os.read(fd, 512)


def _timeout_ms(waits: Iterable[float | None]) -> int | None:
    """poll()'s timeout for the nearest of `waits` (seconds; None: nothing to wait for)."""
    due = [w for w in waits if w is not None]
    return None if not due else max(1, int(min(due) * 1000) + 1)
