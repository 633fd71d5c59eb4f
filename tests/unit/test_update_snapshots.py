"""Data that rolls back with the image (issue 33, point 6) as the updater drives it:
the service held and stopped before its volumes are copied, then the new digest; at a
rollback (automatic or healerctl rollback) held, stopped, the volumes copied back, and
only then the previous digest. The copies are a fake here (the store has tests of its
own: test_snapshots.py); the engine is the FakeEngine."""

from __future__ import annotations

import threading

from healerd.core.clock import FakeClock
from healerd.core.controller import Controller
from healerd.core.updatedata import SnapshotFailed
from healerd.core.updates import pinned_ref
from healerd.model import ServiceSpec
from tests.unit.harness.fake_engine import FakeEngine
from tests.unit.harness.loop import drive
from tests.unit.harness.updates import TAG, V1, V2, desired, follower, images, make, reason


class FakeSnapshots:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.taken: list[tuple[str, str, int]] = []  # (from, to, containers running then)
        self.restored: list[tuple[str, int]] = []
        self.fail = ""

    def running(self) -> int:
        return sum(1 for c in self.engine.containers.values() if c.running)

    def take(self, spec: ServiceSpec, from_digest: str, to_digest: str) -> str:
        if self.fail:
            raise SnapshotFailed(self.fail)
        self.taken.append((from_digest, to_digest, self.running()))
        return "taken"

    def restore(self, service: str, to_digest: str) -> str | None:
        self.restored.append((to_digest, self.running()))
        return "restored"


def started() -> tuple[Controller, FakeEngine, FakeSnapshots, FakeClock]:
    ctrl, engine, clock = make()
    snaps = FakeSnapshots(engine)
    ctrl.updates.data.snapshots = snaps
    ctrl.set_desired(desired(follower(snapshot=("app_pgdata",))))
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    return ctrl, engine, snaps, clock


def restores_done() -> None:
    for t in threading.enumerate():
        if t.name.startswith("healerd-restore-"):
            t.join(timeout=10)


def test_the_volumes_are_copied_with_the_service_stopped_before_the_new_digest() -> None:
    ctrl, engine, snaps, clock = started()
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    assert snaps.taken == [(V1, V2, 0)], "copied while nothing of the service ran"
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2


def test_no_room_for_the_snapshot_refuses_the_update_and_the_old_digest_runs_again() -> None:
    ctrl, engine, snaps, clock = started()
    snaps.fail = "snapshot of app_pgdata needs 1.0 GiB, 0.2 GiB free on /var/lib/healerd"
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == []
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2, "started again in place"
    assert "not rolled out: no snapshot of app_pgdata" in reason(ctrl)
    assert "0.2 GiB free" in reason(ctrl)


def test_an_automatic_rollback_restores_the_volumes_before_the_previous_digest_starts() -> None:
    ctrl, engine, snaps, clock = started()
    engine.crash_images.add(pinned_ref(TAG, V2))
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    restores_done()
    drive(ctrl, clock)
    assert snaps.restored == [(V2, 0)], "restored while nothing of the service ran"
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    said = ctrl.updates.said("app")
    assert said is not None and "restored" in said.text, said


def test_healerctl_rollback_restores_the_snapshot_taken_before_that_update() -> None:
    ctrl, engine, snaps, clock = started()
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2
    spec = ctrl.desired.services["app"]
    ctrl.updates.rollback_now("app", spec)
    restores_done()
    drive(ctrl, clock)
    assert snaps.restored == [(V2, 0)]
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
