"""The auto-updater's memory (issue 29, L5): bad digests (a bounded set, not the last
one), digests run (a tag moved back is held until an operator allows it), both across
restarts through a store. Each test failed before the fix: the tag flipping between
two broken digests rolled out and back at every check, a tag moved back was rolled out
as an update, and a restart forgot the bad mark.
"""

from __future__ import annotations

from healerd.core.controller import Controller
from healerd.core.persist import MemoryStore
from healerd.core.updatememory import MAX_BAD, DigestMemory
from healerd.core.updates import pinned_ref
from healerd.core.wiring import build_loop
from tests.unit.harness.fake_engine import FakeEngine
from tests.unit.harness.loop import drive
from tests.unit.harness.updates import TAG, V1, V2, V3, V4, desired, follower, images, make, reason


def kinds(ctrl: Controller, kind: str) -> int:
    return sum(e.kind == kind for e in ctrl.events.since(0))


def restarted(ctrl: Controller, engine: FakeEngine, store: MemoryStore) -> Controller:
    """A new healerd on the same engine and state_dir: nothing of `ctrl` but the store."""
    assert engine.clock is not None
    again = build_loop(engine, engine.clock, ctrl.parts.settings)
    again.updates.use_store(store)
    again.set_desired(desired(follower()))
    return again


def test_two_broken_digests_the_tag_flips_between_are_each_tried_once() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(follower()))
    drive(ctrl, clock)
    engine.crash_images |= {pinned_ref(TAG, V2), pinned_ref(TAG, V3)}
    trials = 0
    for i in range(6):  # the tag flips at every check
        engine.registry[TAG] = V2 if i % 2 == 0 else V3
        trials += ctrl.check_updates() == ["app"]
        drive(ctrl, clock)
    assert trials == 2 and kinds(ctrl, "image-rollback") == 2
    assert engine.calls.count("pull") == 2
    assert images(engine) == [pinned_ref(TAG, V1)] * 2


def test_a_tag_moved_back_is_held_until_an_operator_allows_it() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(follower()))
    drive(ctrl, clock)
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2
    engine.registry[TAG] = V1  # back to the digest it ran before
    pulls = engine.calls.count("pull")
    assert ctrl.check_updates() == [] and ctrl.check_updates() == []
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2
    assert engine.calls.count("pull") == pulls
    assert kinds(ctrl, "image-downgrade-held") == 1, "said once, not at every check"
    assert "moved back to 111111111111, which ran before 222222222222" in reason(ctrl)
    assert "healerctl update app --allow-downgrade" in reason(ctrl)
    # The operator allows it: rolled out (by the usual rules), once.
    ctrl.updates.allow("app", downgrade=True)
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    engine.registry[TAG] = V2  # V2 ran before V1 now: held again
    assert ctrl.check_updates() == []
    # A digest never run is an update as before.
    engine.registry[TAG] = V4
    assert ctrl.check_updates() == ["app"]


def test_bad_digests_and_digests_run_survive_a_restart() -> None:
    store = MemoryStore()
    ctrl, engine, clock = make()
    ctrl.updates.use_store(store)
    ctrl.set_desired(desired(follower()))
    drive(ctrl, clock)
    engine.crash_images.add(pinned_ref(TAG, V3))
    engine.registry[TAG] = V3
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert kinds(ctrl, "image-rollback") == 1
    entry = store.data["services"]["app"]
    assert {k: entry[k] for k in ("declared", "bad", "ran")} == {
        "declared": TAG,
        "bad": [V3],
        "ran": [V1],
    }
    assert [h["what"] for h in entry["history"]] == ["rolled back"]
    assert entry["said"]["text"].startswith("rolled back to")

    again = restarted(ctrl, engine, store)
    drive(again, clock)
    pulls = engine.calls.count("pull")
    assert again.check_updates() == [] and engine.calls.count("pull") == pulls
    assert kinds(again, "image-rollback") == 0
    # After V2 is proven, the tag moving back to V1 is held across a restart too.
    engine.registry[TAG] = V2
    assert again.check_updates() == ["app"]
    drive(again, clock)
    third = restarted(again, engine, store)
    drive(third, clock)
    engine.registry[TAG] = V1
    assert third.check_updates() == [] and kinds(third, "image-downgrade-held") == 1


def test_a_failed_digest_is_tried_again_only_when_the_operator_says_so() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(follower()))
    drive(ctrl, clock)
    engine.crash_images.add(pinned_ref(TAG, V2))
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert "healerctl update app --retry-failed" in reason(ctrl)
    engine.crash_images.clear()  # fixed elsewhere (a volume, a dependency)
    assert ctrl.check_updates() == []
    ctrl.updates.allow("app", retry_failed=True)
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2


def test_the_memory_is_bounded_and_a_broken_store_is_no_memory() -> None:
    store = MemoryStore()
    memory = DigestMemory(store)
    digests = [f"sha256:{n:064x}" for n in range(MAX_BAD + 4)]
    for d in digests:
        memory.failed("app", TAG, d)
    assert memory.of("app", TAG).bad == tuple(digests[-MAX_BAD:])
    assert not memory.is_bad("app", TAG, digests[0]) and memory.is_bad("app", TAG, digests[-1])
    # Memory of another tag does not count.
    assert memory.of("app", "reg.local:5000/app:beta").bad == ()
    assert DigestMemory(store).of("app", TAG).bad == tuple(digests[-MAX_BAD:])
    broken_stores: list[object] = [{"services": []}, {"services": {"app": {"bad": [V1]}}}, "x"]
    for broken in broken_stores:
        assert DigestMemory(MemoryStore(broken)).of("app", TAG).bad == ()
    odd = {"services": {"app": {"declared": TAG, "bad": [V1, 7, "md5:x"], "ran": "V2"}}}
    assert DigestMemory(MemoryStore(odd)).of("app", TAG).bad == (V1,)
