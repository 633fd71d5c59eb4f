"""Data that rolls back with the image (x-healerd: {snapshot: [VOLUME]}): before a new
digest starts, the service is held (the loop leaves it alone: no heal restarts what is
stopped for the copy), its containers are stopped, and the volumes are copied; at a
rollback, the service is held, stopped, its volumes copied back from the snapshot taken
before that update, and the previous digest starts. The copies themselves are the
daemon's (healerd.daemon.snapshots: files on this host), behind VolumeSnapshots.

A restore runs in a thread of its own: a rollback is decided in a reconcile pass, and a
copy of a GiB takes seconds that no worker may spend. The hold is what keeps the
previous digest from starting before its data is back. The hold is in memory; what
outlives a restart of healerd is the daemon's restore journal: a restore it cut short
is held again at the next start, before the loop runs, and finished
(`finish_interrupted`), and one that failed stays held until `healerctl resume`
(`on_resume` ends its journal).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from healerd.engine import EngineError
from healerd.engine.api import ContainerRuntime
from healerd.model import ObservedContainer, ServiceSpec

log = logging.getLogger("healerd.updates")

STOP_TRIES = 3  # a pass in flight when the hold began may start what was stopped
ENGINE_RETRY = 2.0  # seconds between looks while the engine is away at a start
SETTLE_POLL = 0.01  # seconds between looks at a pass or a start under way


class SnapshotFailed(Exception):
    """A snapshot or a restore could not be made (the reason is the message)."""


class VolumeSnapshots(Protocol):
    def take(self, spec: ServiceSpec, from_digest: str, to_digest: str) -> str:
        """Copy the service's snapshot volumes (it is stopped); returns what was taken
        (for the log). Raises SnapshotFailed (no room, an engine not on this host)."""
        ...

    def restore(self, service: str, to_digest: str) -> str | None:
        """Copy back the snapshot taken before the update to `to_digest` (the service
        is stopped); returns what was restored, None when there is no such snapshot.
        Raises SnapshotFailed (then every volume holds what it held before)."""
        ...


def _no_hooks(spec: ServiceSpec | None, container: ObservedContainer) -> None:
    pass


def not_restored(key: str, reason: str) -> str:
    """The hold of a service whose restore failed (healerctl resume ends it)."""
    return f"volumes NOT restored ({reason}); healerctl resume {key} starts it as it is"


class NoSnapshots:
    """Until the daemon sets its store: an update that needs a snapshot is refused."""

    def take(self, spec: ServiceSpec, from_digest: str, to_digest: str) -> str:
        raise SnapshotFailed("volume snapshots are not set up here")

    def restore(self, service: str, to_digest: str) -> str | None:
        return None


class Hold:
    """One holder's hold of a service (UpdateData.hold): only its holder releases it, so
    one holder's end (a rollback whose pin did not move) never ends another's (a restore
    that a restart cut short and a thread finishes)."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


class UpdateData:
    """The holds and the copies; thread-safe."""

    def __init__(self, engine: ContainerRuntime, on_change: Callable[[str], None]) -> None:
        self._engine = engine
        self._on_change = on_change
        self._lock = threading.Lock()
        # service -> why the loop leaves it alone, one entry per holder (a snapshot, a
        # restore, a restore that failed), each released by its holder, the newest said.
        self._held: dict[str, list[Hold]] = {}
        self.snapshots: VolumeSnapshots = NoSnapshots()
        # Whether a pass of a service runs, or a start of it is on its way (the loop's:
        # set by the wiring): either may have begun before the hold, and start a
        # container after the stop. The stop waits for them, `quiet` seconds at most.
        self.busy: Callable[[str], bool] = lambda key: False
        self.quiet = 1.0
        # Told of healerctl resume (the daemon ends the journal of a failed restore).
        self.on_resume: Callable[[str], None] = lambda key: None
        self._copying: set[str] = set()  # services whose volumes are being copied now
        # A stop of a running container runs its pre_stop hooks first, as every other
        # stop of healerd's does (healerd.core.hooks.Hooks.pre_stop; set by the wiring).
        self.pre_stop: Callable[[ServiceSpec | None, ObservedContainer], None] = _no_hooks

    def held(self, key: str) -> str:
        """Why the loop must leave `key` alone now ("" : it need not)."""
        with self._lock:
            holds = self._held.get(key)
            return holds[-1].why if holds else ""

    def holds(self, key: str, hold: Hold) -> bool:
        """Whether `hold` still holds `key` (healerctl resume ends every hold)."""
        with self._lock:
            return any(h is hold for h in self._held.get(key, ()))

    def hold(self, key: str, why: str) -> Hold:
        """`key` held for `why` until `release(key, <the hold returned>)`."""
        hold = Hold(why)
        with self._lock:
            self._held.setdefault(key, []).append(hold)
        self._on_change(key)  # the status says why
        return hold

    def release(self, key: str, hold: Hold) -> None:
        """`hold` is done (the others, if any, still hold; nothing if it was ended)."""
        with self._lock:
            holds = [h for h in self._held.get(key, ()) if h is not hold]
            if holds:
                self._held[key] = holds
            else:
                self._held.pop(key, None)
        self._on_change(key)

    def copying(self, key: str) -> bool:
        """Whether a snapshot or a restore is copying `key`'s volumes now."""
        with self._lock:
            return key in self._copying

    def release_all(self, key: str) -> bool:
        """`healerctl resume`: the operator ends every hold (a restore that failed).
        Not while a copy runs (the API refuses that resume first): the service would
        start on a volume being rewritten; that copy's own end releases it."""
        with self._lock:
            if key in self._copying:
                return False
            had = self._held.pop(key, None)
        self.on_resume(key)
        if had:
            self._on_change(key)
        return bool(had)

    def snapshot(
        self, spec: ServiceSpec, from_digest: str, to_digest: str
    ) -> tuple[str, Hold | None]:
        """Hold and stop the service, then copy its volumes: ("", the hold) when taken
        (the hold stands: the caller moves the pin, then releases it), else (why not,
        None) (released: the loop starts the stopped containers again in place)."""
        vols = ", ".join(spec.snapshot)
        hold = self.hold(spec.name, f"stopped for a snapshot of {vols} before {to_digest[7:19]}")
        try:
            self._stop_all(spec.name, spec)
            with self._copy(spec.name):
                said = self.snapshots.take(spec, from_digest, to_digest)
        except Exception as exc:  # whatever it was, the hold ends: the old digest runs again
            if not isinstance(exc, SnapshotFailed | EngineError):
                log.exception("%s: the snapshot failed unexpectedly", spec.name)
            self.release(spec.name, hold)
            return f"no snapshot of {vols}: {exc}", None
        log.info("%s: %s", spec.name, said)
        return "", hold

    def restore_later(
        self,
        spec: ServiceSpec,
        hold: Hold,
        to_digest: str,
        then: Callable[[str], None],
    ) -> None:
        """`spec`'s service is held by `hold` (the caller's, before its pin moved back);
        in a thread, stop it (its pre_stop hooks first), restore the snapshot taken
        before the update to `to_digest`, release it, and tell `then` what happened. A
        restore that fails keeps the service held, stopped: the previous digest is not
        started on what the failed one left (the issue's whole point); `healerctl
        resume SERVICE` starts it as it is."""
        key = spec.name

        def work() -> str:
            said = self.snapshots.restore(key, to_digest)
            return said or f"no snapshot was taken before {to_digest[7:19]}: volumes as they are"

        threading.Thread(
            target=self._restore,
            args=(key, hold, spec, work, then),
            name=f"healerd-restore-{key}",
            daemon=True,
        ).start()

    def finish_interrupted(
        self,
        key: str,
        hold: Hold,
        work: Callable[[], str],
        then: Callable[[str], None],
        stop: threading.Event,
        spec: Callable[[], ServiceSpec | None] = lambda: None,
    ) -> None:
        """At healerd's start, in the caller's thread: `key` is held by `hold` (since
        before the loop ran) for a restore that a restart cut short; once the engine
        answers, its containers are stopped (someone may have started them meanwhile:
        after the pre_stop hooks and within the stop_grace_period of `spec()`, its
        declaration at that moment, if any) and `work` finishes the restore, as restore_later's
        thread does (released, or held with the reason), then `then` is told. Nothing
        while the engine is away: it waits."""
        said = False
        current: ServiceSpec | None = None
        while not stop.is_set():
            if not self.holds(key, hold):
                return  # healerctl resume gave the restore up meanwhile: nothing to stop
            try:
                current = spec()
                self._stop_all(key, current)
                break
            except EngineError as exc:
                if not said:
                    log.info("%s: its restore waits for the engine (%s)", key, exc)
                    said = True
                stop.wait(ENGINE_RETRY)
            except SnapshotFailed:
                break  # said by the restore itself, which tries again
        else:
            return
        self._restore(key, hold, current, work, then)

    def _restore(
        self,
        key: str,
        hold: Hold,
        spec: ServiceSpec | None,
        work: Callable[[], str],
        then: Callable[[str], None],
    ) -> None:
        try:
            self._stop_all(key, spec)
            with self._copy(key):
                if not self.holds(key, hold):  # healerctl resume before the copy began
                    then("resumed by the operator before the restore began: volumes as they are")
                    return
                told = work()
        except Exception as exc:
            if not isinstance(exc, SnapshotFailed | EngineError):
                log.exception("%s: restoring the volumes failed unexpectedly", key)
            why = str(exc) or type(exc).__name__
            told = (
                f"volumes NOT restored ({why}): the service stays stopped rather than run on "
                f"what the failed digest left; healerctl resume {key} starts it as it is"
            )
            log.error("%s: %s", key, told)
            # The restore's hold stays, saying why, until the operator's resume.
            self._reword(key, hold, not_restored(key, why))
        else:
            self.release(key, hold)
        then(told)

    @contextmanager
    def _copy(self, key: str) -> Iterator[None]:
        with self._lock:
            self._copying.add(key)
        try:
            yield
        finally:
            with self._lock:
                self._copying.discard(key)

    def _reword(self, key: str, hold: Hold, why: str) -> None:
        """`hold` says `why` now (held again if a resume ended it meanwhile)."""
        with self._lock:
            hold.why = why
            holds = self._held.setdefault(key, [])
            if not any(h is hold for h in holds):
                holds.append(hold)
        self._on_change(key)

    def _stop_all(self, key: str, spec: ServiceSpec | None) -> None:
        """Stop every running container of the service (healerd's own, by its labels),
        each after its pre_stop hooks and within its stop_grace_period, until none runs
        and nothing of the loop is under way for it (a pass, a start in place, begun
        before the hold: waited for, `quiet` seconds at most, then looked at again;
        nothing is waited for when nothing is under way: that is the update's downtime)."""
        grace = spec.stop_grace_period if spec is not None else None
        for _ in range(STOP_TRIES + 1):
            running = [c for c in self._engine.list_managed(key) if c.running]
            if not running:
                if self._settled(key) or not any(c.running for c in self._engine.list_managed(key)):
                    return
                continue
            for c in running:
                self.pre_stop(spec, c)
                self._engine.stop(c, grace)
        raise SnapshotFailed(f"{key}'s containers kept being started again")

    def _settled(self, key: str) -> bool:
        """True when nothing of the loop is under way for `key`; else False once it
        ended, or `quiet` seconds passed (the caller lists again)."""
        if not self.busy(key):
            return True
        end = time.monotonic() + self.quiet
        while self.busy(key) and time.monotonic() < end:
            time.sleep(SETTLE_POLL)
        return False


__all__ = [
    "Hold",
    "NoSnapshots",
    "SnapshotFailed",
    "UpdateData",
    "VolumeSnapshots",
    "not_restored",
]
