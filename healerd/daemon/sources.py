"""Configuration from git: each source of healerd.yaml's `sources:` fetched in a thread of
its own, its commit's signature checked, its directory checked out read-only.

A source's commits go through three hands. `sync` (the source's thread) fetches the tip
of the ref; a commit not signed by an allowed key is refused, and one that is checks out
into `trees/<commit>/` and becomes the *candidate*: `on_change` tells the daemon. The
daemon loads the candidate's tree like files in conf.d (`wanted`), all-or-nothing: it
calls `accept(commit)` when every file was taken, and `refuse(commit, reason)` when one
was not; then the *applied* commit stays what it was and its tree stays on disk. A
refused commit is remembered and not tried again until the ref moves. A fetch that
fails (the remote away, a timeout) changes nothing but `last_error`.

What was applied is kept in `state.json` beside the trees, so that a restart without the
network still has the last good commit's files. A change of the source's URL, ref, path
or verify forgets it all: a tree checked under other rules is not trusted.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healerd.config.settingsmodel import Settings
from healerd.config.sourcekeys import GitSource, masked_git_url
from healerd.config.trust import FileRefused
from healerd.daemon.gitrun import Runner, run
from healerd.daemon.sourcegit import FetchFailed, Refused, SourceGit, Tip, remove_tree
from healerd.daemon.statefile import StateFile

log = logging.getLogger("healerd.sources")

# Refused commits remembered per source (the newest), so that a bad tip is not checked
# again at every interval.
KEEP_REFUSED = 16


@dataclass(frozen=True)
class SourceState:
    """What `healerctl status` says of a source: the tip last fetched (`commit`, its
    committer's time), when, the commit in force, one waiting to be loaded, the last
    error (no credentials in any of it)."""

    name: str
    url: str
    ref: str
    commit: str = ""
    commit_time: float | None = None
    fetched_at: float | None = None
    applied_commit: str = ""
    candidate_commit: str = ""
    last_error: str = ""

    def view(self, now: float) -> dict[str, Any]:
        age = round(max(0.0, now - self.commit_time), 3) if self.commit_time else None
        fetched = round(max(0.0, now - self.fetched_at), 3) if self.fetched_at else None
        return {
            "name": self.name,
            "url": self.url,
            "ref": self.ref,
            "commit": self.commit or None,
            "commit_time": self.commit_time,
            "commit_age_seconds": age,
            "fetched_at": self.fetched_at,
            "fetched_age_seconds": fetched,
            "applied_commit": self.applied_commit or None,
            "candidate_commit": self.candidate_commit or None,
            "last_error": self.last_error,
        }


class Source:
    """One git source: its state machine (candidate, applied, refused) and its rounds."""

    def __init__(
        self,
        conf: GitSource,
        sources_dir: Path,
        *,
        runner: Runner = run,
        strict: bool = True,
        hostname: str | None = None,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.conf = conf
        self.root = sources_dir / conf.name
        self.git = SourceGit(conf, self.root, runner, strict=strict, hostname=hostname)
        self.clock = clock
        self.on_change = on_change
        self._lock = threading.Condition()
        self._store = StateFile(self.root / "state.json", f"git source {conf.name}")
        self._state = SourceState(conf.name, masked_git_url(conf.url), conf.ref)
        self._refused: dict[str, str] = {}
        self._checking = ""  # the commit being checked out by the source's thread
        self._unsaved = False  # the last save failed: tried again at every change
        self.rounds = 0
        self.wake = threading.Event()
        self._load()

    # -- what the daemon reads and says -----------------------------------------------

    def state(self) -> SourceState:
        with self._lock:
            return self._state

    def _tree(self, commit: str) -> tuple[str, Path] | None:
        return (commit, self.git.trees / commit) if commit else None

    def wanted(self) -> tuple[str, Path] | None:
        """The tree to load: the candidate's, else the applied commit's (None: neither)."""
        with self._lock:
            s = self._state
            return self._tree(s.candidate_commit or s.applied_commit)

    def applied(self) -> tuple[str, Path] | None:
        """The last good commit's tree, what stays when a candidate is refused."""
        with self._lock:
            return self._tree(self._state.applied_commit)

    def accept(self, commit: str) -> None:
        """The daemon loaded `commit`'s tree whole: it is now the one applied."""
        with self._lock:
            if commit != self._state.candidate_commit:
                return  # an older candidate, or already applied
            self._set(applied_commit=commit, candidate_commit="", last_error="")
            self._prune()
        log.info("source %s: applied commit %s", self.conf.name, commit[:12])

    def refuse(self, commit: str, reason: str) -> None:
        """The daemon refused `commit`'s tree (a file with an error): the applied commit
        stays, and `commit` is not tried again."""
        with self._lock:
            if commit != self._state.candidate_commit:
                return
            self._note_refused(commit, reason)
            self._set(candidate_commit="")
            self._prune()

    def wait_round(self, before: int, deadline: float) -> bool:
        """Until a round after the `before`th is done (True), or the monotonic deadline."""
        with self._lock:
            while self.rounds <= before:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    # -- one round, in the source's thread ------------------------------------------------

    def sync(self) -> None:
        """Fetch, verify, check out; never raises (the error is the state's)."""
        try:
            self._round(time.monotonic() + self.conf.timeout)
        except (FetchFailed, FileRefused, OSError, ValueError) as exc:
            self._failed(self.git.scrub(str(exc)))
        except Exception as exc:  # a bug must not end the thread: said, and tried again
            log.exception("source %s: round failed", self.conf.name)
            self._failed(self.git.scrub(f"internal error: {type(exc).__name__}"))
        finally:
            with self._lock:
                self._checking = ""
                self.rounds += 1
                self._lock.notify_all()

    def _round(self, deadline: float) -> None:
        tip = self.git.fetch(deadline)
        with self._lock:
            s = self._state
            self._set(commit=tip.commit, commit_time=tip.time, fetched_at=self.clock())
            if tip.commit in (s.applied_commit, s.candidate_commit):
                self._set(last_error="")
                return
            if tip.commit in self._refused:
                self._set(last_error=self._refused_text(tip.commit))
                return
        if self._checked(tip, deadline):
            self.on_change()

    def _checked(self, tip: Tip, deadline: float) -> bool:
        """Verified and checked out: the new candidate (True), or refused for good."""
        with self._lock:
            self._checking = tip.commit  # its checkout is not pruned meanwhile
        try:
            self.git.verify(tip.commit, deadline)
            self.git.checkout(tip.commit, deadline)
        except Refused as exc:
            with self._lock:
                self._checking = ""
                self._note_refused(tip.commit, str(exc))
            return False
        with self._lock:
            self._checking = ""
            self._set(candidate_commit=tip.commit, last_error="")
        log.info("source %s: commit %s verified, to be loaded", self.conf.name, tip.commit[:12])
        return True

    def _failed(self, error: str) -> None:
        with self._lock:
            changed = error != self._state.last_error
            self._set(last_error=error)
        if changed:  # said once, not at every interval while the remote is away
            log.warning("source %s: %s; the last good commit stays", self.conf.name, error)

    def _note_refused(self, commit: str, reason: str) -> None:
        self._refused[commit] = self.git.scrub(reason)
        while len(self._refused) > KEEP_REFUSED:
            del self._refused[next(iter(self._refused))]
        self._set(last_error=self._refused_text(commit))
        log.warning("source %s: %s", self.conf.name, self._state.last_error)
        self._save()

    def _refused_text(self, commit: str) -> str:
        return f"commit {commit[:12]} refused: {self._refused[commit]}"

    # -- state on disk ----------------------------------------------------------------------

    def _set(self, **changes: Any) -> None:
        """Under the lock: the state replaced, and saved when what matters moved."""
        before = self._state
        self._state = after = _replace(before, changes)
        if self._unsaved or (before.applied_commit, before.candidate_commit, before.commit) != (
            after.applied_commit,
            after.candidate_commit,
            after.commit,
        ):
            self._save()

    def _fingerprint(self) -> list[str]:
        c = self.conf
        return [c.url, c.ref, self.git.subdir, c.verify.kind, c.verify.file]

    def _save(self) -> None:
        """A state_dir that cannot be written (full, read-only) costs the memory of the
        commit across a restart (the source says so), never the reload that accepts it."""
        s = self._state
        try:
            self._save_state(s)
        except OSError as exc:
            if not self._unsaved:  # said once; the status says it until a save works
                log.warning("source %s: its state not saved (kept in memory): %s", s.name, exc)
            self._unsaved = True
            self._state = _replace(s, {"last_error": f"its state not saved in state_dir: {exc}"})
        else:
            self._unsaved = False

    def _save_state(self, s: SourceState) -> None:
        self._store.save(
            {
                "rules": self._fingerprint(),
                "applied": s.applied_commit,
                "candidate": s.candidate_commit,
                "commit": s.commit,
                "commit_time": s.commit_time,
                "fetched_at": s.fetched_at,
                "refused": self._refused,
            }
        )

    def _load(self) -> None:
        data = self._store.load()
        if not isinstance(data, dict):
            return
        if data.get("rules") != self._fingerprint():
            log.info("source %s: its settings changed; earlier commits forgotten", self.conf.name)
            remove_tree(self.git.trees)
            return
        trees = self.git.trees

        def kept(key: str) -> str:
            commit = data.get(key)
            return commit if isinstance(commit, str) and (trees / commit).is_dir() else ""

        refused = data.get("refused")
        if isinstance(refused, dict):
            self._refused = {str(k): str(v) for k, v in refused.items()}
        when, fetched = data.get("commit_time"), data.get("fetched_at")
        self._state = _replace(
            self._state,
            {
                "applied_commit": kept("applied"),
                "candidate_commit": kept("candidate"),
                "commit": str(data.get("commit") or ""),
                "commit_time": float(when) if isinstance(when, int | float) else None,
                "fetched_at": float(fetched) if isinstance(fetched, int | float) else None,
            },
        )

    def _prune(self) -> None:
        """Under the lock: every tree but the applied one and the candidate removed."""
        keep = {self._state.applied_commit, self._state.candidate_commit, self._checking}
        if self.git.trees.is_dir():
            for tree in self.git.trees.iterdir():
                # A checkout on its way (`.new-*`, or renamed but not yet the candidate)
                # belongs to the source's thread.
                if tree.name not in keep and not tree.name.startswith("."):
                    remove_tree(tree)


def _replace(state: SourceState, changes: dict[str, Any]) -> SourceState:
    return dataclasses.replace(state, **changes)


class Sources:
    """Every source, each in a thread of its own: a slow or dead remote holds only its
    own thread (and only for its timeout), never the reconcile loop."""

    def __init__(
        self,
        confs: Sequence[GitSource],
        state_dir: Path,
        *,
        strict: bool = True,
        on_change: Callable[[], None] = lambda: None,
        runner: Runner = run,
        hostname: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        host = hostname or socket.gethostname()
        self.by_name = {
            c.name: Source(
                c,
                state_dir / "sources",
                runner=runner,
                strict=strict,
                hostname=host,
                clock=clock,
                on_change=on_change,
            )
            for c in confs
        }
        self._stopping = False

    @classmethod
    def of(cls, settings: Settings, on_change: Callable[[], None]) -> Sources:
        """The daemon's: healerd.yaml's sources, in its state_dir, with its trust rules."""
        return cls(
            settings.sources, settings.state_dir, strict=settings.strict_modes, on_change=on_change
        )

    def __iter__(self) -> Iterator[Source]:
        return iter(self.by_name.values())

    def states(self) -> list[SourceState]:
        return [s.state() for s in self.by_name.values()]

    def views(self, now: float | None = None) -> list[dict[str, Any]]:
        now = time.time() if now is None else now
        return [s.view(now) for s in self.states()]

    def sync_now(self, name: str | None) -> dict[str, int]:
        """Wake `name`'s thread (or every one) now; the rounds each had done. KeyError:
        no such source."""
        chosen = [self.by_name[name]] if name is not None else list(self.by_name.values())
        rounds = {}
        for source in chosen:
            rounds[source.conf.name] = source.rounds
            source.wake.set()
        return rounds

    def wait(self, rounds: dict[str, int], timeout: float) -> bool:
        """Until each source named in `rounds` finished a round after it (True), or
        `timeout` passed."""
        deadline = time.monotonic() + timeout
        return all(self.by_name[n].wait_round(r, deadline) for n, r in rounds.items())

    def threads(self, stop: threading.Event) -> list[threading.Thread]:
        """One (unstarted) thread per source: a round at once, then one per interval or
        when woken."""
        return [
            threading.Thread(
                target=self._run, args=(s, stop), name=f"healerd-source-{s.conf.name}", daemon=True
            )
            for s in self.by_name.values()
        ]

    def stop(self) -> None:
        self._stopping = True
        for s in self.by_name.values():
            s.wake.set()

    def _run(self, source: Source, stop: threading.Event) -> None:
        while not (stop.is_set() or self._stopping):
            source.sync()
            source.wake.wait(source.conf.interval)
            source.wake.clear()


__all__ = ["KEEP_REFUSED", "Source", "SourceState", "Sources"]
