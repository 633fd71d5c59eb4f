"""Data that rolls back with the image (issue 33, point 6) as the updater drives it:
the service held and stopped before its volumes are copied, then the new digest; at a
rollback (automatic or healerctl rollback) held, stopped, the volumes copied back, and
only then the previous digest. The copies are a fake here (the store has tests of its
own: test_snapshots.py); the engine is the FakeEngine."""

from __future__ import annotations

import threading
import time

import pytest

from healerd.core.clock import FakeClock
from healerd.core.controller import Controller
from healerd.core.updates import UpdateRefused, pinned_ref
from healerd.model import Hook, ObservedContainer
from tests.unit.harness.fake_engine import FakeEngine
from tests.unit.harness.loop import drive
from tests.unit.harness.updates import (
    REPO,
    TAG,
    V1,
    V2,
    V3,
    FakeSnapshots,
    desired,
    follower,
    images,
    make,
    reason,
    restores_done,
)


def started() -> tuple[Controller, FakeEngine, FakeSnapshots, FakeClock]:
    ctrl, engine, clock = make()
    snaps = FakeSnapshots(engine)
    ctrl.updates.data.snapshots = snaps
    ctrl.updates.data.quiet = 0.0  # no start in place on its way in these tests
    ctrl.set_desired(desired(follower(snapshot=("app_pgdata",))))
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    return ctrl, engine, snaps, clock


def test_the_volumes_are_copied_with_the_service_stopped_before_the_new_digest() -> None:
    ctrl, engine, snaps, clock = started()
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    assert snaps.taken == [(V1, V2, 0)], "copied while nothing of the service ran"
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2


def test_image_gc_keeps_a_new_digest_from_its_pull_to_its_pin() -> None:
    """Review: the pulled digest was kept only while the pull ran, not while the volumes
    were copied (minutes) before its pin; and the keep was one per service, so a
    rollback's pull ending ended the checker's (and the other way round)."""
    ctrl, engine, snaps, clock = started()
    u = ctrl.updates
    seen: list[set[str]] = []
    take = snaps.take

    def watched(spec: object, from_digest: str, to_digest: str) -> str:
        seen.append(u.protected())
        with u.kept(pinned_ref(TAG, V3)):  # another bring-back, overlapping, ends first
            pass
        seen.append(u.protected())
        return take(spec, from_digest, to_digest)  # type: ignore[arg-type]

    snaps.take = watched  # type: ignore[method-assign]
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    assert len(seen) == 2 and all(pinned_ref(TAG, V2) in refs for refs in seen), seen
    assert u.protected() == {pinned_ref(TAG, V2), pinned_ref(TAG, V1)}, "pinned now"
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


def test_a_rollback_whose_previous_image_is_gone_pulls_it_before_anything_stops() -> None:
    """A `docker rmi` of the previous image: the rollback stopped the service and put its
    data back, then could not pull. It pulls first now; a pull that fails refuses the
    rollback with nothing stopped, no data moved and the digest that runs kept."""
    ctrl, engine, snaps, clock = started()
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    spec = ctrl.desired.services["app"]
    engine.images = {pinned_ref(TAG, V2)}  # V1 removed by hand
    engine.pullable.discard(f"{REPO}@{V1}")
    stops = engine.calls.count("stop")
    with pytest.raises(UpdateRefused, match=r"not on this host and cannot be pulled .*nothing"):
        ctrl.updates.rollback_now("app", spec)
    assert not ctrl.updates.data.held("app") and snaps.restored == []
    assert engine.calls.count("stop") == stops
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2, "the digest that ran runs on"
    assert ctrl.check_updates() == [], "and nothing of the refused rollback was kept"
    # The registry back: pulled before the first stop, then restored and rolled back.
    engine.pullable.add(f"{REPO}@{V1}")
    del engine.calls[:]
    ctrl.updates.rollback_now("app", spec)
    restores_done()
    drive(ctrl, clock)
    assert "pull" in engine.calls and engine.calls.index("pull") < engine.calls.index("stop")
    assert snaps.restored == [(V2, 0)]
    assert images(engine) == [pinned_ref(TAG, V1)] * 2


def rolled_back_while_the_restore_waits() -> tuple[
    Controller, FakeEngine, FakeSnapshots, FakeClock
]:
    ctrl, engine, snaps, clock = started()
    snaps.gate = threading.Event()
    engine.crash_images.add(pinned_ref(TAG, V2))
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    return ctrl, engine, snaps, clock


def test_the_pass_that_rolls_back_starts_nothing_while_the_volumes_are_restored() -> None:
    """Review: the pass that judged the rollback planned on and started v1 under the
    restore's hold; and a check meanwhile snapshotted the failed digest's data."""
    ctrl, engine, snaps, clock = rolled_back_while_the_restore_waits()
    assert ctrl.updates.data.held("app")
    assert images(engine) == [], "nothing of the previous digest runs before its data"
    engine.registry[TAG] = V3
    assert ctrl.check_updates() == [], "no new update while a restore is under way"
    assert snaps.gate is not None
    snaps.gate.set()
    restores_done()
    drive(ctrl, clock)
    assert snaps.restored == [(V2, 0)] and not ctrl.updates.data.held("app")
    assert images(engine) == [pinned_ref(TAG, V1)] * 2


def test_a_restore_that_fails_keeps_the_service_stopped_until_resume() -> None:
    ctrl, engine, snaps, clock = rolled_back_while_the_restore_waits()
    snaps.restore_fails = "no room: needs 1.0 GiB, 0.1 GiB free"
    assert snaps.gate is not None
    snaps.gate.set()
    restores_done()
    drive(ctrl, clock)
    assert images(engine) == [], "not started on what the failed digest left"
    assert "volumes NOT restored" in reason(ctrl) and "healerctl resume app" in reason(ctrl)
    ctrl.resume("app")
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2


def test_an_unexpected_error_of_the_snapshot_ends_the_hold() -> None:
    ctrl, engine, snaps, clock = started()
    snaps.take_raises = OSError(28, "No space left on device")
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == []
    drive(ctrl, clock)
    assert not ctrl.updates.data.held("app")
    assert images(engine) == [pinned_ref(TAG, V1)] * 2, "the old digest runs again"


def test_the_stops_for_a_snapshot_and_a_restore_run_the_pre_stop_hooks_first() -> None:
    """A stop of healerd's runs the container's pre_stop hooks (a database's checkpoint)
    before it, with the service's stop_grace_period: the stops that hold a service for
    its snapshot and for its restore too, not only a rollout's and a scale-down's."""
    ctrl, engine, clock = make()
    snaps = FakeSnapshots(engine)
    ctrl.updates.data.snapshots = snaps
    ctrl.updates.data.quiet = 0.0
    checkpoint = Hook(("checkpoint",))
    app = follower(snapshot=("app_pgdata",), pre_stop=(checkpoint,), stop_grace_period=7.0)
    ctrl.set_desired(desired(app))
    drive(ctrl, clock)
    v1 = {c.id for c in engine.containers.values() if c.running}
    engine.stop_timeouts.clear()
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    assert snaps.taken == [(V1, V2, 0)]
    assert {cid for cid, hook, _ in engine.hooks_run if hook == checkpoint} == v1
    drive(ctrl, clock)
    v2 = {c.id for c in engine.containers.values() if c.running}
    engine.hooks_run.clear()
    ctrl.updates.rollback_now("app", ctrl.desired.services["app"])
    restores_done()
    assert snaps.restored == [(V2, 0)]
    assert {cid for cid, hook, _ in engine.hooks_run if hook == checkpoint} == v2
    assert engine.stop_timeouts and set(engine.stop_timeouts) == {7.0}


def test_the_stop_for_a_snapshot_waits_only_for_what_is_under_way() -> None:
    """The stop before a snapshot used to wait a whole `quiet` (1 s) of the update's
    downtime, in case a start in place begun before the hold was on its way. It waits for
    such a start (or a pass) itself now: none under way, no wait; one that lands after
    the stop is seen, and its container stopped too, before the copy."""
    ctrl, engine, clock = make()
    snaps = FakeSnapshots(engine)
    data = ctrl.updates.data
    data.snapshots = snaps
    data.quiet = 30.0  # never waited out here: the test would take 30 s
    ctrl.set_desired(desired(follower(snapshot=("app_pgdata",))))
    drive(ctrl, clock)
    assert not data.busy("app")
    engine.registry[TAG] = V2
    began = time.monotonic()
    assert ctrl.check_updates() == ["app"]
    assert time.monotonic() - began < 5.0 and snaps.taken == [(V1, V2, 0)]
    drive(ctrl, clock)
    # A start on its way when the hold began: the stop waits for it, then stops it too.
    under_way = threading.Event()
    under_way.set()
    data.busy = lambda key: under_way.is_set()
    late: list[str] = []
    stopped_once = threading.Event()
    stop = engine.stop

    def stopped(container: ObservedContainer, stop_timeout: float | None) -> None:
        stop(container, stop_timeout)
        stopped_once.set()

    engine.stop = stopped  # type: ignore[method-assign]

    def lands() -> None:  # the start in place that was on its way lands after the stop
        stopped_once.wait(5)
        time.sleep(0.1)
        c = next(c for c in engine.containers.values() if not c.running)
        engine.start(c)
        late.append(c.id)
        under_way.clear()

    engine.registry[TAG] = V3
    threading.Thread(target=lands, daemon=True).start()
    began = time.monotonic()
    assert ctrl.check_updates() == ["app"]
    assert time.monotonic() - began < 5.0
    assert late and snaps.taken[-1] == (V2, V3, 0), "the late start stopped before the copy"
