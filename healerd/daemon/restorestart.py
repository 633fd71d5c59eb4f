"""Restores of volumes that healerd did not live to finish (a stop, a crash, a power cut
in the middle), found at its next start in their journals (healerd.daemon.restorejournal).

Each such service is held when the daemon is built, before the loop may start anything
of it ("finishing the restore of its volumes from snapshot ID, interrupted by a restart
of healerd"). Then, in a thread of its own, once the engine answers and is this
healerd's (its ID locked: another healerd may manage it by another address), its
containers are stopped (someone may have started them meanwhile; after their pre_stop
hooks, within their grace, as the declaration says now), the restore is finished from its
snapshot (the moves completed, the half copies deleted and made again from scratch,
synced), what the volumes held before is deleted, and the hold ends; the log and an
`image-rollback` event say so. A snapshot that cannot be used any more (gone, or not on
disk when the host went down) puts every volume back as it was before that restore and
keeps the service held with the reason, as a restore that fails does; so does a
restore that fails again. A failed restore's journal holds its service at every start
until `healerctl resume`, which removes the journal (and never what a volume held).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial

from healerd.core.events import EventLog
from healerd.core.updatedata import Hold, SnapshotFailed, UpdateData
from healerd.daemon import restorejournal
from healerd.daemon.restorejournal import FAILED, RESTORING, Journal
from healerd.daemon.snapshots import Snapshot, SnapshotStore
from healerd.daemon.volumecopy import SnapshotError, real_dir
from healerd.model import ServiceSpec
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.snapshots")
# How often the finishing thread looks whether healerd may act on the engine yet.
GUARD_WAIT = 0.5
RESUME_WAITS = "resumed by the operator: its volumes are put back once healerd holds the engine"


def finish(store: SnapshotStore, journal: Journal) -> str:
    """Finish the restore `journal` records (the service stopped): what was done.
    SnapshotError when the snapshot cannot be used (the volumes are put back as they were
    before that restore) or the restore fails again."""
    what = f"restore of snapshot {journal.snapshot} of {journal.service}"
    with store.lock(journal.service):
        now = restorejournal.read(store.root / journal.service)
        if now is None or now.snapshot != journal.snapshot:
            return "nothing left to restore: healerctl resume gave that restore up"
        if now.state == FAILED:
            raise SnapshotError(now.reason)
        snapshot = _usable(store, now) if now.state == RESTORING else None
        try:
            store.replay(now, snapshot, what, room=False)
        except OSError as exc:
            raise SnapshotError(f"{what}: {restorejournal.said(exc)}") from None
    names = ", ".join(v.name for v in now.volumes)
    log.info("snapshot %s of %s restored: %s", now.snapshot, now.service, names)
    return (
        f"volumes restored from snapshot {now.snapshot} ({names}), finishing the restore "
        "a restart of healerd interrupted"
    )


def _usable(store: SnapshotStore, journal: Journal) -> Snapshot:
    """The snapshot `journal` restores, if it can still be used; else every volume put
    back as it was before that restore, and SnapshotError says why."""
    try:
        snap = store.get(journal.service, journal.snapshot)
        for v in journal.volumes:
            if v.name not in dict(snap.volumes):
                raise SnapshotError(f"it holds no volume {v.name}")
            real_dir(snap.path / "volumes" / v.name, f"its volume {v.name}:")
        return snap
    except (OSError, ValueError, KeyError, TypeError, SnapshotError) as exc:
        why = f"snapshot {journal.snapshot} cannot be used: {restorejournal.said(exc)}"
        if not restorejournal.undo(journal, why):
            kept = ", ".join(map(str, journal.asides()))
            why += f"; what the volumes held before that restore is kept in {kept}"
        raise SnapshotError(why) from None


def resumed(store: SnapshotStore, service: str) -> bool:
    """healerctl resume: the service runs on its volumes as they are, and the journal of
    its restore goes; what a volume held before, wherever it still is, stays (said). Not
    while a restore runs: that one ends its own journal. False when a journal stays."""
    try:
        lock = store.lock(service)
    except SnapshotError:
        return True  # no service name of the store's: no journal
    if not lock.acquire(blocking=False):
        return False
    try:
        journal = restorejournal.read(store.root / service)
        if journal is None:
            return True
        # A restore cut short (its copy failed and could not be undone, or it waits for
        # the engine): each volume gets back what it held before, never a mix.
        if journal.state == restorejournal.RESTORING and not restorejournal.undo(
            journal, "given up by healerctl resume"
        ):
            return False  # said by undo; the journal stays: the next start finishes it
        journal.remove()
        kept = journal.asides()
        log.warning(
            "%s: resumed on its volumes as they are: the journal of the restore of snapshot "
            "%s is removed%s",
            service,
            journal.snapshot or "?",
            f"; what they held before that restore is kept in {', '.join(map(str, kept))}"
            if kept
            else "",
        )
        return True
    finally:
        lock.release()


def wait_ours(ours: threading.Event, stop: threading.Event) -> bool:
    """Until the engine is this healerd's (`ours`: its ID locked at the first look); False
    when `stop` comes first. A second healerd on the same engine stops at that look: what
    waits here never acts on the other one's containers, images or volumes."""
    while not ours.wait(GUARD_WAIT):
        if stop.is_set():
            return False
    return not stop.is_set()


class Interrupted:
    """The restores found unfinished when the daemon is built: their services held at
    once, then finished by `run` (in the thread `threads` gives)."""

    def __init__(
        self,
        store: SnapshotStore,
        data: UpdateData,
        events: EventLog,
        engine_ours: threading.Event | None = None,
        spec_of: Callable[[str], ServiceSpec | None] = lambda _service: None,
    ) -> None:
        """`engine_ours`: set once this healerd holds the engine (its ID locked, the loop's
        guard passed); until then nothing is stopped nor moved nor copied (a `healerctl
        resume` meanwhile is carried out then): another healerd may be the one that
        manages it. None: at once (tests). `spec_of`: a service's declaration now (its
        pre_stop hooks and grace for the stop before the copy)."""
        self._store, self._data, self._events = store, data, events
        self._spec_of = spec_of
        if engine_ours is None:
            engine_ours = threading.Event()
            engine_ours.set()
        self._engine_ours = engine_ours
        self.found = restorejournal.unfinished(store.root)
        self._holds = {j.service: data.hold(j.service, j.held()) for j in self.found}
        for journal in self.found:
            log.warning("%s: held: %s", journal.service, journal.held())
        # A failed restore's resume only removes its journal; an unfinished one's moves data.
        self._unfinished = {j.service for j in self.found if j.state != FAILED}
        self._gate = threading.Lock()
        self._early: dict[str, Hold] = {}  # resumed before the engine was this healerd's
        data.on_resume = self._on_resume

    def _on_resume(self, service: str) -> None:
        """healerctl resume (every hold of `service` ended): its journal goes now, or, if
        this healerd does not hold the engine yet, once it does, the service held till
        then so that the loop starts nothing on volumes about to be put back."""
        with self._gate:
            if not self._engine_ours.is_set() and service in self._unfinished:
                self._early[service] = self._data.hold(service, RESUME_WAITS)
                return
        resumed(self._store, service)  # a journal that stays is said by resumed

    def threads(self, stop: threading.Event) -> list[threading.Thread]:
        if not self._unfinished:
            return []
        return [
            threading.Thread(
                target=self.run, args=(stop,), name="healerd-restore-finish", daemon=True
            )
        ]

    def run(self, stop: threading.Event) -> None:
        if not wait_ours(self._engine_ours, stop):
            return
        with self._gate:
            early, self._early = self._early, {}
        # A resume given before then: given up as a restore is finished (its containers
        # stopped first, held until the data is back, a second resume deferred meanwhile).
        work = [(s, h, partial(self._give_up, s), EventKind.RESUMED) for s, h in early.items()]
        work += [
            (j.service, self._holds[j.service], partial(self._finish, j), EventKind.IMAGE_ROLLBACK)
            for j in self.found
            if j.service in self._unfinished
        ]
        for service, hold, do, kind in work:
            if not stop.is_set():
                self._data.finish_interrupted(
                    service,
                    hold,
                    do,
                    partial(self._told, kind, service),
                    stop,
                    partial(self._spec_of, service),
                )

    def _told(self, kind: EventKind, service: str, what: str) -> None:
        self._events.record(kind, service, what)

    def _give_up(self, service: str) -> str:
        if not resumed(self._store, service):
            raise SnapshotFailed("giving its interrupted restore up failed (see the log)")
        return (
            "resumed by the operator: the interrupted restore is given up, its volumes "
            "hold what they held before it"
        )

    def _finish(self, journal: Journal) -> str:
        try:
            return finish(self._store, journal)
        except SnapshotError as exc:
            raise SnapshotFailed(str(exc)) from None


__all__ = ["Interrupted", "finish", "resumed"]
