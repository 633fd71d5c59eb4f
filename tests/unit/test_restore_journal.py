"""The restore journal (review finding, issue 33 point 6): a restore of volumes from a
snapshot that healerd (or the host) did not live to finish is held at the next start,
before the loop may run the service, and finished from the snapshot; one whose snapshot
cannot be used puts the volumes back and keeps the service held until healerctl
resume; what a volume held before a restore is deleted only once a journal says that
restore completed.

A crash is a real one: the restore runs in a child process that the kernel kills
(SIGKILL) mid-way, and the next "start" is a new store, a new UpdateData and a new loop
on what the child left on disk."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import healerd.core.updatedata as updatedata
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.events import EventLog
from healerd.core.updatedata import UpdateData
from healerd.core.wiring import build_loop
from healerd.daemon import restorejournal, restorestart, volumecopy
from healerd.daemon.restorejournal import JOURNAL
from healerd.daemon.restorestart import Interrupted
from healerd.daemon.snapshots import Snapshot, SnapshotError, SnapshotStore, cp_a
from healerd.daemon.volumecopy import REMOVALS, Removals
from healerd.model import Hook
from healerd.vocabulary import EventKind
from tests.unit.harness.builders import spec
from tests.unit.harness.daemon import daemon
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine
from tests.unit.harness.loop import desired, drive
from tests.unit.harness.volumes import tree, volume

FROM, TO = "sha256:" + "a" * 64, "sha256:" + "b" * 64
DB = spec("db", 1, "img:1")


def dies(work: Callable[[], None]) -> None:
    """Run `work` in a child process that is killed (SIGKILL) where `work` says: what
    it leaves on disk is what a crash of healerd leaves."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            work()
        finally:
            os._exit(3)  # not killed: the assertion below fails
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def crash() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def no_sync(_: Path) -> None:
    pass


class Setup:
    """A volume as v1 left it, its snapshot, then what v2 made of it."""

    def __init__(self, tmp: Path) -> None:
        self.data = volume(tmp / "vol" / "_data")
        self.root = tmp / "state" / "snapshots"
        self.before = tree(self.data)
        store = SnapshotStore(self.root, sync=no_sync)
        self.snap: Snapshot = store.take(
            "db", {"v": str(self.data)}, from_digest=FROM, to_digest=TO
        )
        if store.settling is not None:
            store.settling.join(10)
        (self.data / "PG_VERSION").write_text("17\n")  # v2's migration
        (self.data / "v2-table").write_text("migrated\n")
        (self.data / "conf").unlink()
        self.replaced = tree(self.data)

    @property
    def journal(self) -> Path:
        return self.root / "db" / JOURNAL

    def beside(self) -> list[str]:
        return sorted(p.name for p in self.data.parent.iterdir())

    def restore_dies(self, copy: Callable[[Path, Path], None] = cp_a) -> None:
        store = SnapshotStore(self.root, copy=copy, sync=no_sync)
        dies(lambda: store.restore(self.snap, {"v": str(self.data)}))

    def restore_dies_mid_copy(self) -> None:
        def half_then_killed(source: Path, target: Path) -> None:
            for name in ("PG_VERSION", "conf"):
                shutil.copy2(source / name, target / name)
            (target / "base").mkdir()
            (target / "base" / "1").write_bytes(b"row 1\n" * 10)  # cut short
            crash()

        self.restore_dies(half_then_killed)


class KilledAtTheDrop(Removals):
    def later(self, path: Path, *, leftover: bool = False) -> None:
        crash()


def holder(engine: FakeEngine | None = None) -> tuple[UpdateData, EventLog]:
    data = UpdateData(engine or FakeEngine(allow=LOOP_CALLS), lambda key: None)
    data.quiet = 0.0
    return data, EventLog(FakeClock())


def test_a_restore_killed_mid_copy_is_finished_at_the_next_start(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.restore_dies_mid_copy()
    # What the crash left: the volume half restored, what it held aside, the journal.
    assert s.journal.exists()
    assert sorted(os.listdir(s.data)) == ["PG_VERSION", "base", "conf"]
    [aside] = [n for n in s.beside() if n != "_data"]
    assert aside.startswith(f".healerd-restore-_data-{s.snap.id}-")
    doc = json.loads(s.journal.read_text())
    assert (doc["state"], doc["snapshot"], doc["volumes"][0]["copying"]) == (
        "restoring",
        s.snap.id,
        True,
    )
    assert {k: v for k, v in tree(s.data.parent / aside).items() if k != "."} == {
        k: v for k, v in s.replaced.items() if k != "."
    }

    data, events = holder()
    synced: list[Path] = []
    start = Interrupted(SnapshotStore(s.root, sync=synced.append), data, events)
    assert data.held("db") == (
        f"finishing the restore of its volumes from snapshot {s.snap.id}, "
        "interrupted by a restart of healerd"
    )
    stop = threading.Event()
    [thread] = start.threads(stop)
    thread.start()
    thread.join(10)
    assert tree(s.data) == s.before, "exactly the snapshot, nothing of the half copy"
    assert synced == [s.data]
    assert not data.held("db")
    assert not s.journal.exists()
    REMOVALS.wait()
    assert s.beside() == ["_data"], "what the volume held before goes once restored"
    [event] = events.since()
    assert event.kind is EventKind.IMAGE_ROLLBACK and event.service == "db"
    assert f"volumes restored from snapshot {s.snap.id}" in event.message
    assert "a restart of healerd interrupted" in event.message


def test_a_restore_killed_mid_move_aside_is_finished_too(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    renames = 0
    rename = os.rename

    def third_rename_killed(a: object, b: object) -> None:
        nonlocal renames
        renames += 1
        if renames == 3:
            crash()
        rename(a, b)  # type: ignore[arg-type]

    def child() -> None:
        setattr(os, "rename", third_rename_killed)  # noqa: B010 (the child's own os)
        SnapshotStore(s.root, sync=no_sync).restore(s.snap, {"v": str(s.data)})

    dies(child)
    # Two entries moved aside, the rest of v2's data still in the volume.
    [aside] = [n for n in s.beside() if n != "_data"]
    assert len(os.listdir(s.data.parent / aside)) == 2
    assert len(os.listdir(s.data)) == len([k for k in s.replaced if "/" not in k and k != "."]) - 2
    assert json.loads(s.journal.read_text())["volumes"][0]["copying"] is False
    data, events = holder()
    Interrupted(SnapshotStore(s.root, sync=no_sync), data, events).run(threading.Event())
    assert tree(s.data) == s.before
    assert not data.held("db") and not s.journal.exists()
    REMOVALS.wait()
    assert s.beside() == ["_data"]


def test_a_crash_after_the_restore_completed_only_drops_what_was_set_aside(
    tmp_path: Path,
) -> None:
    s = Setup(tmp_path)

    def synced_then_killed(path: Path) -> None:
        crash()  # the copies are in: killed at the sync, before the journal says so

    store = SnapshotStore(s.root, sync=synced_then_killed)
    dies(lambda: store.restore(s.snap, {"v": str(s.data)}))
    assert json.loads(s.journal.read_text())["state"] == "restoring"
    copies: list[Path] = []

    def counted(source: Path, target: Path) -> None:
        copies.append(target)
        cp_a(source, target)

    data, events = holder()
    Interrupted(SnapshotStore(s.root, copy=counted, sync=no_sync), data, events).run(
        threading.Event()
    )
    assert tree(s.data) == s.before and copies == [s.data]
    # And once the journal said `restored`: nothing is copied again, the aside goes.
    s2 = Setup(tmp_path / "again")
    done = SnapshotStore(s2.root, sync=no_sync, removals=KilledAtTheDrop())
    dies(lambda: done.restore(s2.snap, {"v": str(s2.data)}))
    assert json.loads(s2.journal.read_text())["state"] == "restored"
    copies.clear()
    data2, events2 = holder()
    Interrupted(SnapshotStore(s2.root, copy=counted, sync=no_sync), data2, events2).run(
        threading.Event()
    )
    assert copies == [] and tree(s2.data) == s2.before
    REMOVALS.wait()
    assert s2.beside() == ["_data"] and not s2.journal.exists()


def test_a_snapshot_lost_with_the_power_keeps_the_service_held_and_the_data_kept(
    tmp_path: Path,
) -> None:
    """The restore began right after the update failed, before its snapshot was synced;
    the power went: the snapshot is not used on the next boot. The volume gets back
    what it held before the restore (nothing of it deleted) and the service stays held,
    across another restart too, until healerctl resume."""
    data = volume(tmp_path / "vol" / "_data")
    root = tmp_path / "state" / "snapshots"

    def never_synced(path: Path) -> None:
        raise SnapshotError("sync cut by the power")

    taker = SnapshotStore(root, sync=never_synced, boot_id=lambda: "boot-1")
    snap = taker.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    assert taker.settling is not None
    taker.settling.join(10)
    (data / "v2-table").write_text("migrated\n")
    replaced = tree(data)

    def half_then_killed(source: Path, target: Path) -> None:
        shutil.copy2(source / "PG_VERSION", target / "PG_VERSION")
        crash()

    store = SnapshotStore(root, copy=half_then_killed, sync=no_sync, boot_id=lambda: "boot-1")
    dies(lambda: store.restore(snap, {"v": str(data)}))
    assert sorted(os.listdir(data)) == ["PG_VERSION"]

    booted = SnapshotStore(root, sync=no_sync, boot_id=lambda: "boot-2")
    data_holder, events = holder()
    Interrupted(booted, data_holder, events).run(threading.Event())
    held = data_holder.held("db")
    assert held.startswith(f"volumes NOT restored (snapshot {snap.id} cannot be used: ")
    assert "not on disk yet when the host went down" in held
    assert held.endswith("healerctl resume db starts it as it is")
    assert tree(data) == replaced, "what it held before the restore, all of it, back"
    assert sorted(p.name for p in data.parent.iterdir()) == ["_data"]
    assert "volumes NOT restored" in events.since()[-1].message
    # Another restart: still held, with the same reason, and nothing touched.
    again, _ = holder()
    later = Interrupted(booted, again, EventLog(FakeClock()))
    assert again.held("db") == held and later.threads(threading.Event()) == []
    # healerctl resume: released, and the journal goes with the hold.
    assert again.release_all("db")
    assert not (root / "db" / JOURNAL).exists()
    third, _ = holder()
    Interrupted(booted, third, EventLog(FakeClock()))
    assert not third.held("db")
    assert tree(data) == replaced


def test_a_snapshot_gone_puts_back_and_holds_and_deletes_no_data(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.restore_dies_mid_copy()
    shutil.rmtree(s.snap.path)  # removed by hand meanwhile
    data, events = holder()
    Interrupted(SnapshotStore(s.root, sync=no_sync), data, events).run(threading.Event())
    assert data.held("db").startswith(
        f"volumes NOT restored (snapshot {s.snap.id} cannot be used: snapshot "
    )
    assert tree(s.data) == s.replaced
    assert s.beside() == ["_data"]
    assert json.loads(s.journal.read_text())["state"] == "failed"


def test_the_loop_starts_nothing_of_the_service_until_its_restore_is_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Setup(tmp_path)
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS)
    settings = LoopSettings(workers=2)
    before = build_loop(engine, clock, settings)
    before.set_desired(desired(DB))
    drive(before, clock)
    [c] = engine.running("db")
    engine.stop(c, None)  # the restore stopped it, then healerd was killed
    s.restore_dies_mid_copy()

    # The next start: the daemon holds the service before its loop runs; the engine is
    # away at first.
    ctrl: Controller = build_loop(engine, clock, settings)
    ctrl.updates.data.quiet = 0.0
    running_at_copy: list[int] = []

    def watched(source: Path, target: Path) -> None:
        running_at_copy.append(len(engine.running("db")))
        cp_a(source, target)

    start = Interrupted(
        SnapshotStore(s.root, copy=watched, sync=no_sync), ctrl.updates.data, ctrl.events
    )
    ctrl.set_desired(desired(DB))
    drive(ctrl, clock)
    assert engine.running("db") == [], "not started on a half-restored volume"
    [status] = ctrl.statuses()
    assert "interrupted by a restart of healerd" in status.reason
    engine.start(c)  # someone starts it meanwhile
    engine.down = True
    monkeypatch.setattr(updatedata, "ENGINE_RETRY", 0.01)
    stop = threading.Event()
    [thread] = start.threads(stop)
    thread.start()
    thread.join(0.2)
    assert thread.is_alive() and running_at_copy == [], "waits for the engine"
    engine.down = False
    thread.join(10)
    assert running_at_copy == [0], "its containers stopped before the copy"
    assert tree(s.data) == s.before
    drive(ctrl, clock)
    assert len(engine.running("db")) == 1, "started once its data is back"


def test_a_failed_restore_stays_held_across_a_restart_until_resume(tmp_path: Path) -> None:
    s = Setup(tmp_path)

    def fails(source: Path, target: Path) -> None:
        raise SnapshotError("copy failed: Input/output error")

    with pytest.raises(SnapshotError, match="Input/output"):
        SnapshotStore(s.root, copy=fails, sync=no_sync).restore(s.snap, {"v": str(s.data)})
    assert tree(s.data) == s.replaced and s.beside() == ["_data"]
    data, _ = holder()
    start = Interrupted(SnapshotStore(s.root, sync=no_sync), data, EventLog(FakeClock()))
    assert data.held("db") == (
        "volumes NOT restored (copy failed: Input/output error); "
        "healerctl resume db starts it as it is"
    )
    assert start.threads(threading.Event()) == []
    data.release_all("db")
    assert not s.journal.exists()


def test_a_leftover_no_journal_names_is_kept_and_in_no_restores_way(tmp_path: Path) -> None:
    """What an older healerd's crash left beside the volume (or a restore healerctl
    resume gave up on): the volume's data before some restore. Never deleted; and the
    next restore of that same snapshot is not refused ("File exists")."""
    s = Setup(tmp_path)
    for name in (
        f".healerd-restore-_data-{s.snap.id}",
        f".healerd-restore-_data-{s.snap.id}-abc123",
    ):
        (s.data.parent / name / "base").mkdir(parents=True)
        (s.data.parent / name / "base" / "1").write_text("the only copy of something\n")
    kept = sorted(n for n in s.beside() if n != "_data")
    data, _ = holder()
    Interrupted(SnapshotStore(s.root, sync=no_sync), data, EventLog(FakeClock()))
    assert not data.held("db"), "no journal: nothing to finish"
    SnapshotStore(s.root, sync=no_sync).restore(s.snap, {"v": str(s.data)})
    assert tree(s.data) == s.before
    REMOVALS.wait()
    assert s.beside() == sorted(["_data", *kept])
    for name in kept:
        assert (s.data.parent / name / "base" / "1").read_text() == "the only copy of something\n"


def test_a_prune_keeps_the_snapshot_an_unfinished_restore_needs(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.restore_dies_mid_copy()
    store = SnapshotStore(s.root, sync=no_sync)
    store.take("db", {"v": str(tmp_path / "vol" / "_data")}, from_digest=TO, to_digest=FROM)
    assert store.prune("db", 0) != [] and [x.id for x in store.list("db")] == [s.snap.id]


def test_the_daemon_holds_at_its_start_and_resume_ends_a_failed_restores_journal(
    tmp_path: Path,
) -> None:
    """The wiring: the Daemon, as main() builds it on state_dir, holds each service a
    journal names before its loop runs; healerctl resume (the controller's) removes the
    journal of a failed restore."""
    s = Setup(tmp_path)  # state_dir is tmp_path/state, as the harness's settings say
    s.restore_dies_mid_copy()
    d, _ = daemon(tmp_path)
    assert "interrupted by a restart of healerd" in d.controller.updates.data.held("db")
    names = [t.name for t in d.images.threads(threading.Event())]
    assert "healerd-restore-finish" in names

    # A restore that failed (put back) before this start:
    doc = {
        "version": 1,
        "service": "db",
        "snapshot": s.snap.id,
        "state": "failed",
        "reason": "copy failed: Input/output error",
        "volumes": [],
    }
    (s.root / "db" / JOURNAL).write_text(json.dumps(doc))
    d2, _ = daemon(tmp_path)
    assert d2.controller.updates.data.held("db").startswith(
        "volumes NOT restored (copy failed: Input/output error)"
    )
    assert "healerd-restore-finish" not in [t.name for t in d2.images.threads(threading.Event())]
    d2.controller.resume("db")
    assert not d2.controller.updates.data.held("db")
    assert not (s.root / "db" / JOURNAL).exists()


def test_a_resume_while_the_engine_is_away_gives_the_restore_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """healerctl resume before the finish began (the engine away): the operator's word;
    nothing is stopped or copied after it, the journal goes, and the volume gets back
    what it held before that restore (v2's data), never a mix of the two."""
    s = Setup(tmp_path)
    s.restore_dies_mid_copy()
    assert tree(s.data) != s.replaced
    engine = FakeEngine(allow=LOOP_CALLS)
    engine.down = True
    monkeypatch.setattr(updatedata, "ENGINE_RETRY", 0.01)
    data, events = holder(engine)
    start = Interrupted(SnapshotStore(s.root, sync=no_sync), data, events)
    [thread] = start.threads(threading.Event())
    thread.start()
    thread.join(0.1)
    assert thread.is_alive()
    assert data.release_all("db")
    thread.join(10)
    assert not thread.is_alive() and events.since() == []
    assert not s.journal.exists() and tree(s.data) == s.replaced
    assert s.beside() == ["_data"]  # what it held before is back in place


def test_an_aside_kept_inside_a_volume_survives_the_next_restore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A volume that is a filesystem of its own keeps its asides inside it; one that a
    given-up restore left (the data of before it, "kept in ...") is neither moved aside
    nor deleted by the next restore: it is said, and stays."""
    monkeypatch.setattr(volumecopy, "same_filesystem", lambda a, b: False)
    data = volume(tmp_path / "vol" / "_data")
    store = SnapshotStore(tmp_path / "state" / "snapshots", sync=no_sync)
    snap = store.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    if store.settling is not None:
        store.settling.join(10)
    kept = data / f"{restorejournal.ASIDE}20260101T000000Z-abcdef-123456"
    kept.mkdir()
    (kept / "the-only-copy").write_text("precious\n")
    store.restore(snap, {"v": str(data)})
    REMOVALS.wait()
    assert (kept / "the-only-copy").read_text() == "precious\n"


def test_each_holder_releases_only_its_own_hold() -> None:
    """A holder's end ends its own hold only: the restore a restart cut short (which a
    thread finishes) ending before a rollback's restore leaves the rollback's hold, and
    its reason, in place; a hold released twice ends nothing else."""
    data = UpdateData(FakeEngine(allow=LOOP_CALLS), lambda key: None)
    interrupted = data.hold("app", "finishing the restore of snapshot X (interrupted)")
    rollback = data.hold("app", "stopped to restore its volumes as they were before 9f8e")
    data.release("app", interrupted)
    assert data.held("app") == "stopped to restore its volumes as they were before 9f8e"
    assert not data.holds("app", interrupted) and data.holds("app", rollback)
    data.release("app", interrupted)
    assert data.holds("app", rollback)
    data.release("app", rollback)
    assert data.held("app") == ""


def test_nothing_is_stopped_or_copied_until_the_engine_is_this_healerd_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another healerd may manage the engine (reached by another address): until this one
    holds the engine's ID lock, the finishing thread touches neither containers nor data."""
    s = Setup(tmp_path)
    s.restore_dies_mid_copy()
    half = tree(s.data)
    engine = FakeEngine(allow=LOOP_CALLS)
    data, events = holder(engine)
    ours = threading.Event()
    monkeypatch.setattr(restorestart, "GUARD_WAIT", 0.01)
    start = Interrupted(SnapshotStore(s.root, sync=no_sync), data, events, ours)
    stop = threading.Event()
    [thread] = start.threads(stop)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive() and tree(s.data) == half and s.journal.exists()
    assert engine.calls == [], "no call to the engine either"
    ours.set()
    thread.join(10)
    assert tree(s.data) == s.before and not data.held("db")


def test_a_stop_ends_a_finishing_thread_still_waiting_for_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Setup(tmp_path)
    s.restore_dies_mid_copy()
    data, events = holder()
    monkeypatch.setattr(restorestart, "GUARD_WAIT", 0.01)
    start = Interrupted(SnapshotStore(s.root, sync=no_sync), data, events, threading.Event())
    stop = threading.Event()
    [thread] = start.threads(stop)
    thread.start()
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and s.journal.exists() and data.held("db")


def test_the_stop_before_a_finished_restore_runs_the_pre_stop_hooks_within_the_grace(
    tmp_path: Path,
) -> None:
    """Someone started the service while healerd was down: the stop before its restore is
    finished is a stop of healerd's like any other (its declaration is known by then)."""
    s = Setup(tmp_path)
    checkpoint = Hook(("checkpoint",))
    db = spec("db", 1, "img:1", pre_stop=(checkpoint,), stop_grace_period=7.0)
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"exec_hook"})
    ctrl: Controller = build_loop(engine, clock, LoopSettings(workers=2))
    ctrl.set_desired(desired(db))
    drive(ctrl, clock)
    [c] = engine.running("db")
    s.restore_dies_mid_copy()
    ctrl.updates.data.quiet = 0.0
    engine.stop_timeouts.clear()
    Interrupted(
        SnapshotStore(s.root, sync=no_sync),
        ctrl.updates.data,
        ctrl.events,
        spec_of=lambda service: ctrl.desired.services.get(service),
    ).run(threading.Event())
    assert [cid for cid, hook, _ in engine.hooks_run if hook == checkpoint] == [c.id]
    assert engine.stop_timeouts == [7.0] and engine.running("db") == []
    assert tree(s.data) == s.before


def test_a_resume_before_the_engine_is_this_healerd_s_is_carried_out_once_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """healerctl resume gives an unfinished restore up, which moves the volumes' data
    back: not while another healerd may manage the engine. The operator is told so, the
    service stays held (the loop starts nothing) until this healerd holds the engine;
    then what someone started meanwhile is stopped (its pre_stop hooks first), the data
    put back, and the service released."""
    s = Setup(tmp_path)
    checkpoint = Hook(("checkpoint",))
    db = spec("db", 1, "img:1", pre_stop=(checkpoint,))
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"exec_hook"})
    ctrl: Controller = build_loop(engine, clock, LoopSettings(workers=2))
    ctrl.set_desired(desired(db))
    drive(ctrl, clock)
    [c] = engine.running("db")  # started by someone while healerd was down
    s.restore_dies_mid_copy()
    half = tree(s.data)
    ctrl.updates.data.quiet = 0.0
    ours = threading.Event()
    monkeypatch.setattr(restorestart, "GUARD_WAIT", 0.01)
    start = Interrupted(
        SnapshotStore(s.root, sync=no_sync),
        ctrl.updates.data,
        ctrl.events,
        ours,
        spec_of=lambda service: ctrl.desired.services.get(service),
    )
    stop = threading.Event()
    [thread] = start.threads(stop)
    thread.start()
    told = ctrl.resume("db")
    assert told == f"db: {restorestart.RESUME_WAITS}"
    assert tree(s.data) == half and s.journal.exists() and engine.running("db") == [c]
    assert ctrl.updates.data.held("db") == restorestart.RESUME_WAITS
    ours.set()
    thread.join(10)
    assert [cid for cid, hook, _ in engine.hooks_run if hook == checkpoint] == [c.id]
    assert tree(s.data) == s.replaced, "what it held before the restore, all of it, back"
    assert not s.journal.exists() and not ctrl.updates.data.held("db")
    assert "the interrupted restore is given up" in ctrl.events.since()[-1].message
