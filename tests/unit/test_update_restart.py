"""A new digest's trial across a restart of healerd (issue 33, point 6). Before, a
healerd started while a new digest was rolled out but not proven adopted it as proven:
a container of it that failed afterwards was healed in place, never rolled back, and
the snapshot taken before it was never restored. The trial is kept in the updater's
memory (state_dir/auto-update.json) from its start until it is proven, fails or is
superseded; a restarted healerd goes on judging it from when it began."""

from __future__ import annotations

import threading
import time

from healerd.core.clock import FakeClock
from healerd.core.controller import Controller
from healerd.core.persist import MemoryStore
from healerd.core.updatememory import DigestMemory, Trial
from healerd.core.updates import pinned_ref
from healerd.core.wiring import build_loop
from healerd.model import ServiceSpec
from tests.unit.harness.fake_engine import FakeEngine
from tests.unit.harness.loop import drive
from tests.unit.harness.updates import (
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


def kinds(ctrl: Controller, kind: str) -> int:
    return sum(e.kind == kind for e in ctrl.events.since(0))


def kept(store: MemoryStore) -> dict[str, object]:
    entry: dict[str, object] = store.data["services"]["app"]
    return entry


def restarted(
    ctrl: Controller, engine: FakeEngine, clock: FakeClock, store: MemoryStore, s: ServiceSpec
) -> Controller:
    """A new healerd on the same engine and state_dir: nothing of `ctrl` but the store
    (and the snapshots, which are files in state_dir)."""
    again = build_loop(engine, clock, ctrl.parts.settings)
    again.updates.use_store(store)
    again.updates.data.snapshots = ctrl.updates.data.snapshots
    again.updates.data.quiet = 0.0
    again.set_desired(desired(s))
    return again


def mid_trial(
    s: ServiceSpec,
) -> tuple[Controller, FakeEngine, FakeClock, MemoryStore, FakeSnapshots]:
    """V1 proven, then V2 rolled out and not proven yet (its containers have not run for
    min_ready_seconds)."""
    store = MemoryStore()
    ctrl, engine, clock = make()
    ctrl.updates.use_store(store)
    snaps = FakeSnapshots(engine)
    ctrl.updates.data.snapshots = snaps
    ctrl.updates.data.quiet = 0.0
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * s.replicas
    clock.advance(60)
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    for _ in range(4):
        ctrl.process_once()
    assert pinned_ref(TAG, V2) in images(engine), "a container of V2 runs"
    return ctrl, engine, clock, store, snaps


def test_a_trial_is_kept_in_the_store_from_its_start() -> None:
    ctrl, _, clock, store, _ = mid_trial(follower(2))
    pin = ctrl.updates.pin("app")
    assert pin is not None and pin.trying and pin.since == clock.time()
    assert kept(store)["trial"] == {"digest": V2, "previous": V1, "since": pin.since}


def fail(ctrl: Controller, engine: FakeEngine) -> None:
    """Every running container of V2 exits with code 1, and V2 fails from now on."""
    engine.crash_images.add(pinned_ref(TAG, V2))
    for c in list(engine.containers.values()):
        if c.image == pinned_ref(TAG, V2) and c.running:
            engine.kill(c.id, exit_code=1)
    ctrl.reconcile_now("app")


def test_a_restart_mid_trial_then_a_failure_rolls_back_to_the_previous_digest() -> None:
    s = follower(2)
    ctrl, engine, clock, store, _ = mid_trial(s)
    assert images(engine).count(pinned_ref(TAG, V1)) == 2, "start-first: V1 still serves"
    before = ctrl.updates.pin("app")
    again = restarted(ctrl, engine, clock, store, s)
    again.process_once()
    pin = again.updates.pin("app")
    assert pin is not None and (pin.digest, pin.previous, pin.trying) == (V2, V1, True)
    assert before is not None and pin.since == before.since, "from when the trial began"
    fail(again, engine)
    drive(again, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    assert kinds(again, "image-rollback") == 1
    assert "rolled back to 111111111111: 222222222222 failed" in reason(again)
    assert "trial" not in kept(store) and kept(store)["bad"] == [V2]
    pulls = engine.calls.count("pull")
    assert again.check_updates() == [] and engine.calls.count("pull") == pulls, "V2 is bad"


def test_a_restart_mid_trial_then_a_failure_restores_the_snapshot_taken_before_it() -> None:
    s = follower(2, snapshot=("app_pgdata",))
    ctrl, engine, clock, store, snaps = mid_trial(s)
    assert snaps.taken == [(V1, V2, 0)]
    again = restarted(ctrl, engine, clock, store, s)
    again.process_once()
    fail(again, engine)
    drive(again, clock)
    restores_done()
    drive(again, clock)
    assert snaps.restored == [(V2, 0)], "V1's data back, with nothing of the service running"
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    said = again.updates.said("app")
    assert said is not None and "restored" in said.text, said


def test_a_container_of_the_trial_that_died_while_healerd_was_away_gets_one_more_start() -> None:
    """Found stopped at a start, like any container then: started again (an engine
    restart or a reboot stops containers too); failing again rolls back."""
    for crashes_again in (False, True):
        s = follower(2)
        ctrl, engine, clock, store, _ = mid_trial(s)
        fail(ctrl, engine)  # the old healerd never saw it
        if not crashes_again:
            engine.crash_images.clear()
        again = restarted(ctrl, engine, clock, store, s)
        drive(again, clock)
        back = (V1 if crashes_again else V2, int(crashes_again))
        assert images(engine) == [pinned_ref(TAG, back[0])] * 2
        assert kinds(again, "image-rollback") == back[1]
        assert "trial" not in kept(store)


def test_a_restart_mid_trial_then_proven_ends_the_trial() -> None:
    s = follower(2)
    ctrl, engine, clock, store, _ = mid_trial(s)
    again = restarted(ctrl, engine, clock, store, s)
    drive(again, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2
    pin = again.updates.pin("app")
    assert pin is not None and (pin.digest, pin.trying) == (V2, False)
    assert kinds(again, "image-updated") == 1
    assert "trial" not in kept(store) and kept(store)["ran"] == [V1, V2]
    # Proven: a crash later is healed in place, not a rollback.
    clock.advance(600)
    fail(again, engine)
    engine.crash_images.clear()
    drive(again, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2
    assert kinds(again, "image-rollback") == 0


def test_a_trial_kept_for_a_digest_nothing_runs_is_dropped() -> None:
    s = follower(2)
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    since = clock.time()
    trial = {"digest": V3, "previous": V1, "since": since}
    store = MemoryStore({"services": {"app": {"declared": TAG, "ran": [V1], "trial": trial}}})
    again = restarted(ctrl, engine, clock, store, s)
    drive(again, clock)
    pin = again.updates.pin("app")
    assert pin is not None and (pin.digest, pin.trying) == (V1, False)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    assert "trial" not in kept(store)
    assert "dropped at a restart of healerd" in reason(again)
    # V1 is no trial: a crash is healed in place.
    clock.advance(600)
    c = next(c for c in engine.containers.values() if c.running)
    engine.kill(c.id, exit_code=1)
    again.reconcile_now("app")
    drive(again, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    assert kinds(again, "image-rollback") == 0


def test_a_malformed_trial_kept_is_no_trial() -> None:
    s = follower(2)
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    for trial in ({"digest": "latest", "since": 1.0}, {"digest": V1, "since": "now"}, [V1]):
        store = MemoryStore({"services": {"app": {"declared": TAG, "trial": trial}}})
        again = restarted(ctrl, engine, clock, store, s)
        drive(again, clock)
        pin = again.updates.pin("app")
        assert pin is not None and (pin.digest, pin.trying) == (V1, False), trial


def test_the_memory_keeps_one_trial_until_its_digest_runs_fails_or_another_begins() -> None:
    store = MemoryStore()
    memory = DigestMemory(store)
    memory.begin_trial("app", TAG, Trial(V2, V1, 100.0))
    assert DigestMemory(store).trial("app", TAG) == Trial(V2, V1, 100.0), "across a restart"
    assert DigestMemory(store).trial("app", "reg.local:5000/app:beta") is None, "another tag"
    memory.begin_trial("app", TAG, Trial(V3, V1, 200.0))  # superseded
    memory.ran("app", TAG, V2)
    memory.end_trial("app", TAG, V2)
    assert memory.trial("app", TAG) == Trial(V3, V1, 200.0), "another digest's end is not its"
    memory.failed("app", TAG, V3)
    assert memory.trial("app", TAG) is None and "trial" not in kept(store)
    memory.begin_trial("app", TAG, Trial(V2, V1, 300.0))
    memory.ran("app", TAG, V2)
    assert DigestMemory(store).trial("app", TAG) is None


def test_healerctl_rollback_mid_trial_ends_the_trial() -> None:
    ctrl, engine, clock, store, _ = mid_trial(follower(2))
    ctrl.updates.rollback_now("app", ctrl.desired.services["app"])
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    assert "trial" not in kept(store)


def test_a_restart_in_the_middle_of_a_rollbacks_restore_runs_the_previous_digest() -> None:
    """healerd dies while the rollback restores V1's data (every container stopped, the
    newest of them V2's): the restarted healerd pins V1, never the failed V2."""
    s = follower(2, snapshot=("app_pgdata",))
    ctrl, engine, clock, store, snaps = mid_trial(s)
    gate = threading.Event()
    snaps.gate = gate  # the rollback's restore is cut short (healerd dies in it)
    fail(ctrl, engine)
    for _ in range(6):
        ctrl.process_once()
    assert ctrl.updates.data.held("app") and kept(store)["bad"] == [V2]
    try:
        again = restarted(ctrl, engine, clock, store, s)
        journal = again.updates.data.hold("app", "finishing the restore (interrupted)")
        for _ in range(6):
            again.process_once()
        again.updates.data.release("app", journal)  # V1's data is back
        engine.crash_images.clear()  # V2 would run now: it must not
        drive(again, clock)
        pin = again.updates.pin("app")
        assert pin is not None and pin.digest == V1
        assert images(engine) == [pinned_ref(TAG, V1)] * 2
        assert kept(store)["bad"] == [V2]
    finally:
        gate.set()


def test_resume_while_a_restore_copies_waits_for_the_copy() -> None:
    """healerctl resume while the rollback's restore copies: refused (said), nothing
    starts on a volume being rewritten; the restore's end starts the previous digest."""
    s = follower(2, snapshot=("app_pgdata",))
    ctrl, engine, clock, _store, snaps = mid_trial(s)
    gate = threading.Event()
    snaps.gate = gate  # the restore is copying
    fail(ctrl, engine)
    for _ in range(6):
        ctrl.process_once()
    assert ctrl.updates.data.held("app") and ctrl.updates.data.copying("app")
    try:
        assert "being copied now" in ctrl.resume("app")
        drive(ctrl, clock, max_seconds=30)
        assert images(engine) == [], "nothing may run on a volume being restored"
    finally:
        gate.set()
    deadline = time.monotonic() + 10
    while ctrl.updates.data.held("app") and time.monotonic() < deadline:
        time.sleep(0.01)  # the restore's thread ends
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
