"""The images directory (`images_dir`): every image archive placed there is loaded into
the engine once, in a thread of its own (a load of gigabytes never holds a heal).

When a file is complete: a watcher of its own, inotify on the directory, with the config
files' close-write rule (healerd.daemon.confwatch): a file created or modified is being
written until its writer closes it (`IN_CLOSE_WRITE`) or a file is renamed onto its name
(`IN_MOVED_TO`), and is never read meanwhile, however long the copy takes (there is no
`WRITE_BOUND` here: a copy of gigabytes over USB takes minutes). Besides, a file must
keep the same size, mtime and inode for `SETTLE` seconds before it is read, and again
from the start of its hashing to its end: that covers a writer busy before healerd
started, which no event names, and the poll that stands in when inotify cannot be had
(then a writer pausing longer than `SETTLE` cannot be told from one that is done).

Which archives were loaded: a small state file, `state_dir/images-dir.json`, names the
sha256 of each archive's bytes with what it brought (healerd.core.imagefiles'
`ArchiveBook`), written atomically (healerd.daemon.statefile). Not a label: an image's
labels are in its config, whose digest is its ID, and cannot be added after a load. Not
the engine's image list either: that an image is present does not say that this
archive's bytes were read (another tag, a newer layer). Lost, the file costs one more
load of each archive (the engine skips layers it has), never a wrong one.

Who may place archives: whoever can load an image under a tag a service names runs code
as that service, so the directory and each file pass the config files' trust checks
(healerd.config.trust: owned by root or healerd's user, not writable by group or others,
nor any directory above; `strict_modes: false` skips them). An untrusted file is not
read, said once (event, log, `healerctl images`), and read once it is fixed.

A corrupt archive (healerd.daemon.imagearchive) or one the engine refuses is recorded
with its reason (event, log, `healerctl images`), left in place, and not read again until
its bytes change (another digest). An engine away is no verdict: the file is tried again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import select
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from healerd.config.trust import FileRefused, mode_problem, trusted_directory
from healerd.core.clock import Clock
from healerd.core.events import EventLog
from healerd.core.imagefiles import (
    Archive,
    ArchiveBook,
    FileState,
    Verdict,
    is_archive_name,
    settled,
)
from healerd.core.persist import StateStore
from healerd.daemon.bundlefile import is_bundle
from healerd.daemon.imagearchive import (
    ArchiveChanged,
    ArchiveFacts,
    CorruptArchive,
    inspect_archive,
    load_archive,
)
from healerd.daemon.inotify import (
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_IGNORED,
    IN_MODIFY,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    Inotify,
)
from healerd.engine import EngineUnavailable, ImageLoadFailed, ImageStore
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.imagesdir")

SETTLE = 2.0  # seconds a file's size, mtime and inode stay the same before it is read
RESCAN = 1.0  # seconds between looks at the directory
STATE_FILE = "images-dir.json"
_WRITING = IN_CREATE | IN_MODIFY
_DONE = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE
_MASK = _WRITING | _DONE


def _stat(path: Path) -> FileState | None:
    """A regular file's state; None for anything else (a symbolic link is not followed:
    its target's directories would escape the trust checks)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return FileState(st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def _being_created(path: Path) -> bool:
    """A new regular file of one link: its writer has it open (confwriters' rule)."""
    try:
        st = os.lstat(path)
    except OSError:
        return True  # gone already: holding it costs nothing
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


class ImagesDir:
    """The directory's watcher and loader; `book()` for image GC and `healerctl images`."""

    def __init__(
        self,
        directory: Path,
        engine: ImageStore,
        clock: Clock,
        events: EventLog,
        store: StateStore,
        on_loaded: Callable[[], None],
        *,
        strict: bool = True,
        bundle: Callable[[Path], str | None] | None = None,
    ) -> None:
        """`on_loaded()`: an archive brought images (services waiting for one try now).
        `strict`: strict_modes (the trust checks). `bundle(path)` installs a bundle
        (healerctl bundle create's) placed here: None when done, else why not."""
        self._strict = strict
        self._bundle = bundle
        self._kinds: dict[str, tuple[FileState, bool]] = {}  # name -> is it a bundle
        self.directory = directory
        self._engine = engine
        self._clock = clock
        self._events = events
        self._store = store
        self._on_loaded = on_loaded
        self._lock = threading.Lock()
        self._book = ArchiveBook.of(store.load())
        self._writing: set[str] = set()  # names open for writing, as inotify says
        self._first: dict[str, tuple[FileState, float]] = {}  # name -> unchanged since
        self._judged: dict[str, FileState] = {}  # name -> the state whose bytes were judged
        self._present: frozenset[str] = frozenset()  # the digests of the files there
        self._untrusted: dict[str, tuple[FileState, str]] = {}  # name -> why not read

    # -- the thread -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Watch and load until `stop` is set (a thread's body). The directory is made
        (0700) when missing and its parent is there (the default's is state_dir)."""
        with contextlib.suppress(OSError):
            self.directory.mkdir(mode=0o700)
        log.info("images_dir: archives placed in %s are loaded once", self.directory)
        try:
            inotify: Inotify | None = Inotify()
        except OSError as exc:
            log.warning("images_dir: no inotify (%s): polling, a file settles in %gs", exc, SETTLE)
            inotify = None
        wd = -1
        try:
            while not stop.is_set():
                if inotify is not None and wd < 0:
                    wd = _watch(inotify, self.directory)
                if inotify is None or wd < 0:
                    stop.wait(RESCAN)
                elif self._events_for(inotify, RESCAN):
                    wd = -1  # the directory went away: watched again once it is back
                try:
                    self.scan()
                except Exception:
                    log.exception("images_dir: a look at %s failed unexpectedly", self.directory)
        finally:
            if inotify is not None:
                inotify.close()

    def _events_for(self, inotify: Inotify, timeout: float) -> bool:
        """The events of up to `timeout` seconds; True when the watch ended."""
        ready, _, _ = select.select([inotify.fileno()], [], [], timeout)
        lost = False
        for event in inotify.read() if ready else ():
            lost = lost or bool(event.mask & IN_IGNORED)
            if event.mask & IN_CREATE and not _being_created(self.directory / event.name):
                continue  # a hard link arrives whole, and no close follows
            self.on_event(event.name, event.mask)
        return lost

    def on_event(self, name: str, mask: int) -> None:
        """An inotify event: a file created or written to is being written until its
        writer closes it or a file is renamed onto it; an overflow forgets every writer
        (they are then held by the settle rule alone)."""
        with self._lock:
            if mask & IN_Q_OVERFLOW:
                self._writing.clear()
            elif mask & _DONE:
                self._writing.discard(name)
            elif mask & _WRITING:
                self._writing.add(name)

    # -- a look -----------------------------------------------------------------------

    def scan(self) -> None:
        """One look: every complete archive not loaded nor refused is read, then loaded."""
        try:
            names = sorted(n for n in os.listdir(self.directory) if is_archive_name(n))
        except OSError:
            names = []
        now = self._clock.monotonic()
        with self._lock:
            for table in (self._first, self._judged, self._untrusted, self._kinds):
                for gone in set(table) - set(names):
                    del table[gone]
        present: set[str] = set()
        for name in names:
            if not self._writing_now(name):
                digest = self._consider(name, now)
                if digest is not None:
                    present.add(digest)
        with self._lock:
            self._present = frozenset(present)

    def _consider(self, name: str, now: float) -> str | None:
        """The file's digest once known; loaded or refused when its bytes are new."""
        path = self.directory / name
        state = _stat(path)
        first = self._first.get(name)
        if state is None or first is None or first[0] != state:
            if state is not None:
                self._first[name] = (state, now)
            return None
        if not settled(first[0], first[1], state, now, SETTLE) or not self._trusted(path, state):
            return None
        if self._is_bundle(name, path, state):
            return self._install(name, path, state)
        with self._lock:
            digest = self._book.known(name, state)
        if digest is None:
            digest, facts, why = self._read(path, state)
            if digest is None:
                return None
        else:
            facts, why = None, ""
        with self._lock:
            verdict = self._book.verdict(digest)
            moved = verdict is not Verdict.LOAD and self._book.renamed(digest, name, state)
        if moved:
            self._save()
        if verdict is Verdict.LOAD and self._judged.get(name) != state:
            self._judged[name] = state
            if facts is None:
                self._refuse(name, digest, state, why)
            else:
                self._load(name, path, facts, state)
        return digest

    def _is_bundle(self, name: str, path: Path, state: FileState) -> bool:
        if self._bundle is None:
            return False
        known = self._kinds.get(name)
        if known is None or known[0] != state:
            known = self._kinds[name] = (state, is_bundle(str(path)))
        return known[1]

    def _install(self, name: str, path: Path, state: FileState) -> str | None:
        """A bundle installed once per digest, as an archive is loaded once; refused
        with its reason (and left in place) otherwise."""
        digest = _file_digest(path)
        if digest is None or _stat(path) != state or self._bundle is None:
            return None
        with self._lock:
            verdict = self._book.verdict(digest)
        if verdict is not Verdict.LOAD or self._judged.get(name) == state:
            return digest
        self._judged[name] = state
        log.info("images_dir: installing bundle %s", name)
        try:
            why = self._bundle(path)
        except EngineUnavailable as exc:  # as an archive's load: no verdict
            log.info("images_dir: bundle %s not installed now (tried again): %s", name, exc)
            self._judged.pop(name, None)
            return digest
        if why is not None:
            self._refuse(name, digest, state, why)
            return digest
        at = self._clock.time()
        self._note(Archive(digest, name, at, state.size, (), (), "", state.stamp, {}))
        self._events.record(EventKind.IMAGE_LOADED, "", f"installed bundle {name}")
        self._on_loaded()
        return digest

    def _trusted(self, path: Path, state: FileState) -> bool:
        """The file and its directories pass the trust checks; else said once per state."""
        why = _distrust(path) if self._strict else None
        with self._lock:
            said = self._untrusted.get(path.name)
            if why is None:
                self._untrusted.pop(path.name, None)
                return True
            self._untrusted[path.name] = (state, why)
        if said is None or said[0] != state:
            log.warning("images_dir: %s", why)
            self._events.record(EventKind.IMAGE_LOAD_REFUSED, "", why)
        return False

    def _read(self, path: Path, state: FileState) -> tuple[str | None, ArchiveFacts | None, str]:
        """(digest, facts or None, why not): None for a digest when the file changed
        while it was read (it settles again first) or cannot be read."""
        facts: ArchiveFacts | None = None
        why = ""
        try:
            facts = inspect_archive(path)
        except CorruptArchive as exc:
            why = str(exc)
        except OSError as exc:
            log.info("images_dir: %s not read: %s", path.name, exc)
            return None, None, ""
        digest = facts.digest if facts is not None else _file_digest(path)
        if _stat(path) != state or self._writing_now(path.name):
            return None, None, ""
        return digest, facts, why

    def _writing_now(self, name: str) -> bool:
        with self._lock:
            return name in self._writing

    def _load(self, name: str, path: Path, facts: ArchiveFacts, state: FileState) -> None:
        log.info("images_dir: loading %s (%s)", name, facts.digest[:19])
        try:
            said = load_archive(self._engine, path, facts.digest)
        except (CorruptArchive, ImageLoadFailed) as exc:
            self._refuse(name, facts.digest, state, str(exc))
            return
        except (EngineUnavailable, OSError, ArchiveChanged) as exc:
            log.info("images_dir: %s not loaded now (tried again): %s", name, exc)
            self._judged.pop(name, None)
            return
        said_tags = (s for s in said if not s.startswith("sha256:"))
        tags = tuple(dict.fromkeys((*facts.tags, *said_tags)))
        at = self._clock.time()
        led = dict(facts.manifests)
        self._note(
            Archive(facts.digest, name, at, state.size, facts.images, tags, "", state.stamp, led)
        )
        shown = ", ".join(tags) or ", ".join(i[:19] for i in facts.images)
        message = f"loaded {shown} from {name}"
        log.info("images_dir: %s", message)
        self._events.record(EventKind.IMAGE_LOADED, "", message)
        self._on_loaded()

    def _refuse(self, name: str, digest: str, state: FileState, why: str) -> None:
        reason = why.removeprefix(f"{name}: ")
        at = self._clock.time()
        self._note(Archive(digest, name, at, state.size, error=reason, stamp=state.stamp))
        message = f"refused {name}: {reason} (left in place; read again once it changes)"
        log.warning("images_dir: %s", message)
        self._events.record(EventKind.IMAGE_LOAD_REFUSED, "", message)

    def _note(self, archive: Archive) -> None:
        with self._lock:
            self._book.note(archive)
        self._save()

    def _save(self) -> None:
        with self._lock:
            data = self._book.saved()
        try:
            self._store.save(data)
        except OSError as exc:
            log.warning("images_dir: %s not saved: %s", STATE_FILE, exc)

    # -- what is read -----------------------------------------------------------------

    def book(self) -> ArchiveBook:
        """A copy of the book, for image GC and `healerctl images`."""
        with self._lock:
            return ArchiveBook(dict(self._book.records))

    def refused_here(self) -> list[Archive]:
        """The refused archives still in the directory (by their digests)."""
        with self._lock:
            untrusted = [
                Archive("", name, 0.0, state.size, error=why)
                for name, (state, why) in sorted(self._untrusted.items())
            ]
            return self._book.refused(self._present) + untrusted


def _distrust(path: Path) -> str | None:
    """Why the archive must not be read (its directories, its own owner and mode)."""
    try:
        trusted_directory(path.parent, "images_dir")
        st = os.stat(path)
    except FileRefused as exc:
        return str(exc)
    except OSError:
        return None  # gone: the next look says so
    return mode_problem(path, st.st_mode, st.st_uid, "image archive")


def _watch(inotify: Inotify, directory: Path) -> int:
    """The directory's watch (-1 while it does not exist: tried again each round)."""
    try:
        return inotify.add_watch(directory, _MASK)
    except OSError:
        return -1


def _file_digest(path: Path) -> str | None:
    """A refused file's digest (inspect_archive stopped before its end)."""
    sha = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            while data := fh.read(1 << 20):
                sha.update(data)
    except OSError:
        return None
    return f"sha256:{sha.hexdigest()}"


__all__ = ["RESCAN", "SETTLE", "STATE_FILE", "ImagesDir"]
