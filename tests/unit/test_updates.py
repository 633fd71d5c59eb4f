"""Image updates (issue 17, point 3): a service that follows its tag runs it pinned to a
digest; a new digest rolls out, a failed one rolls back by itself and is marked bad. The
loop with an injected clock and the in-memory engine, plus the pure rules."""

from __future__ import annotations

import dataclasses

from healerd.config.servicefile import parse_service_text
from healerd.core.controller import LoopSettings
from healerd.core.lifecycle import ServiceState
from healerd.core.readiness import available
from healerd.core.updates import digest_in, failure, follows, pinned_ref, proven
from healerd.core.wiring import build_loop
from healerd.model import (
    ContainerState,
    Dependency,
    EngineAction,
    EngineEvent,
    ServiceSpec,
    UpdateConfig,
)
from healerd.vocabulary import AutoUpdate
from tests.unit.harness.builders import container, spec
from tests.unit.harness.loop import drive, state
from tests.unit.harness.updates import (
    REPO,
    TAG,
    V1,
    V2,
    V3,
    V4,
    desired,
    follower,
    images,
    make,
    reason,
)


def test_the_pure_rules() -> None:
    s = follower()
    assert follows(s) and not follows(spec("x", 1, TAG))
    assert not follows(dataclasses.replace(s, image=f"{REPO}@{V1}")), "pinned by digest"
    assert digest_in(pinned_ref(TAG, V2), TAG) == V2
    assert digest_in(TAG, TAG) is None and digest_in(f"{REPO}:other@{V2}", TAG) is None
    pinned = dataclasses.replace(s, image=pinned_ref(TAG, V2))
    ok = container(pinned)
    dead = dataclasses.replace(container(pinned, ContainerState.EXITED), exit_code=3)
    assert failure(pinned, [ok], set(), set(), "") == ""
    assert "exited with code 3" in failure(pinned, [ok, dead], set(), set(), "")
    assert failure(pinned, [ok, dead], set(), {dead.id}, "") == "", "stopped by an operator"
    assert "unhealthy" in failure(pinned, [ok], {ok.id}, set(), "")
    assert failure(pinned, [ok], set(), set(), "deadline") == "deadline"
    old = container(s)
    assert not proven(pinned, [ok, old], 1e9) and proven(pinned, [ok, container(pinned)], 1e9)


def test_the_first_containers_are_made_from_the_local_digest_not_the_tag() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(follower()))
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    assert state(ctrl, "app") == ServiceState.CONVERGED
    assert ctrl.desired.services["app"].image == pinned_ref(TAG, V1)
    assert engine.calls.count("registry_digest") == 0  # no check before the checker's


def test_a_new_digest_rolls_out_and_a_check_is_one_manifest_request() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(follower()))
    drive(ctrl, clock)
    assert ctrl.check_updates() == []  # the same digest: nothing pulled
    assert engine.calls.count("registry_digest") == 1 and engine.calls.count("pull") == 0
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    assert engine.calls.count("registry_digest") == 2
    assert [a for a, _ in engine.pull_auths] == [f"{REPO}@{V2}"]
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2
    kinds = [e.kind for e in ctrl.events.since(0)]
    assert "image-update" in kinds and "image-updated" in kinds
    assert "updated to 222222222222 (from 111111111111)" in reason(ctrl)
    assert ctrl.updates.protected() == {pinned_ref(TAG, V2), pinned_ref(TAG, V1)}


def test_a_failing_digest_is_rolled_back_and_not_tried_again_until_the_tag_moves() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(follower()))
    drive(ctrl, clock)
    old = set(engine.containers)
    engine.crash_images.add(pinned_ref(TAG, V3))
    engine.registry[TAG] = V3
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    running = {cid for cid, c in engine.containers.items() if c.running}
    assert running == old, "start-first: the old containers served throughout"
    assert any(e.kind == "image-rollback" for e in ctrl.events.since(0))
    assert "rolled back to 111111111111: 333333333333 failed" in reason(ctrl)
    assert "exited with code 1" in reason(ctrl)
    # The tag still names the bad digest: no pull, no rollout.
    pulls = engine.calls.count("pull")
    assert ctrl.check_updates() == [] and engine.calls.count("pull") == pulls
    # The tag moves to a good one: picked up.
    engine.registry[TAG] = V4
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V4)] * 2
    assert ctrl.updates.protected() == {pinned_ref(TAG, V4), pinned_ref(TAG, V1)}


def test_an_unhealthy_new_digest_is_rolled_back_too() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(follower(1, unhealthy_grace=5.0)))
    drive(ctrl, clock)
    engine.registry[TAG] = V2
    ctrl.check_updates()
    ctrl.process_once()
    new = [c for c in engine.containers.values() if c.image == pinned_ref(TAG, V2)]
    assert len(new) == 1
    engine.set(new[0].id, health="unhealthy")
    ctrl.on_event(EngineEvent("app", new[0].id, EngineAction.HEALTH))
    drive(ctrl, clock, 30)
    assert images(engine) == [pinned_ref(TAG, V1)]
    assert "turned unhealthy" in reason(ctrl)


def test_after_a_restart_the_pin_comes_back_from_the_containers() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(follower()))
    drive(ctrl, clock)
    engine.registry[TAG] = V2
    ctrl.check_updates()
    drive(ctrl, clock)
    # A new healerd: the local tag's digest is V1, but the containers say V2.
    fresh = build_loop(engine, clock, LoopSettings())
    fresh.set_desired(desired(follower()))
    creates = engine.calls.count("create")
    drive(fresh, clock)
    assert engine.calls.count("create") == creates, "nothing rolled"
    assert fresh.desired.services["app"].image == pinned_ref(TAG, V2)


def test_an_image_from_no_registry_runs_by_its_tag_and_says_so() -> None:
    ctrl, engine, clock = make()
    engine.repo_digests[TAG] = ()
    ctrl.set_desired(desired(follower(1)))
    drive(ctrl, clock)
    assert images(engine) == [TAG]
    assert "came from no registry" in reason(ctrl)


def test_an_unreachable_registry_changes_nothing() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(follower()))
    drive(ctrl, clock)
    del engine.registry[TAG]
    assert ctrl.check_updates() == []
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2


def test_config_x_healerd_and_podmans_label() -> None:
    def parse(body: str) -> tuple[ServiceSpec | None, list[str]]:
        text = f"services:\n  app:\n    image: {TAG}\n{body}"
        result = parse_service_text(text, "app.yaml", env={})
        services = result.services or {}
        return services.get("app"), [str(e) for e in result.errors]

    s, errors = parse("    x-healerd: {auto_update: registry}\n")
    assert not errors and s is not None and s.auto_update == "registry"
    s, errors = parse("    labels: {io.containers.autoupdate: registry}\n")
    assert not errors and s is not None and s.auto_update == "registry"
    s, errors = parse(
        "    x-healerd: {auto_update: disabled}\n    labels: {io.containers.autoupdate: registry}\n"
    )
    assert not errors and s is not None and s.auto_update == "disabled"
    s, errors = parse("    x-healerd: {auto_update: notify}\n")
    assert not errors and s is not None and s.auto_update == "notify" and follows(s)
    _, errors = parse("    x-healerd: {auto_update: always}\n")
    assert errors and "x-healerd.auto_update" in errors[0] and "registry" in errors[0]
    _, errors = parse("    x-healerd: {auto_updte: registry}\n")
    assert errors and "did you mean 'auto_update'" in errors[0]
    _, errors = parse("    labels: {io.containers.autoupdate: local}\n")
    assert errors and "local" in errors[0]


def test_a_restart_never_pins_a_rolled_back_digest_kept_as_history() -> None:
    s = follower(1)
    good = dataclasses.replace(s, image=pinned_ref(TAG, V1))
    bad = dataclasses.replace(s, image=pinned_ref(TAG, V3))
    failed = dataclasses.replace(
        container(bad, ContainerState.EXITED, created=100.0), exit_code=1, image=bad.image
    )
    # After a reboot everything is stopped; the rollback's container replaced the failed
    # one (which is kept as history) and is the newer one.
    back = dataclasses.replace(
        container(good, ContainerState.EXITED, created=200.0),
        exit_code=0,
        image=good.image,
        replaces=failed.id,
    )
    ctrl, engine, _clock = make()
    engine.containers = {c.id: c for c in (failed, back)}
    ctrl.set_desired(desired(s))
    ctrl.process_once()
    assert ctrl.desired.services["app"].image == pinned_ref(TAG, V1)


def test_an_earlier_trials_failed_containers_say_nothing_of_a_new_one() -> None:
    s = dataclasses.replace(follower(1), image=pinned_ref(TAG, V3))
    ok = container(s, created=500.0)
    old = dataclasses.replace(container(s, ContainerState.EXITED, created=100.0), exit_code=1)
    kept = dataclasses.replace(old, id="kept")
    replacer = dataclasses.replace(container(s, created=150.0), replaces=kept.id)
    assert failure(s, [ok, old], set(), set(), "", since=400.0) == "", "before the trial"
    assert failure(s, [ok, kept, replacer], set(), set(), "") == "", "history"
    assert "exited" in failure(s, [ok, old], set(), set(), "", since=50.0)


def test_docker_hub_names_find_their_local_digest() -> None:
    ctrl, engine, clock = make()
    hub = "docker.io/library/nginx:1.25"
    engine.repo_digests[hub] = (f"nginx@{V2}",)
    s = spec("web", 1, hub, auto_update=AutoUpdate.REGISTRY)
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(hub, V2)]


def test_a_rollout_held_by_a_dependency_past_its_deadline_is_no_failed_update() -> None:
    ctrl, engine, clock = make()
    db = spec("db", 1, "db:1")
    app = follower(2, depends_on=(Dependency("db"),))
    ctrl.set_desired(desired(db, app))
    drive(ctrl, clock)
    ctrl.pause("db")
    (db_id,) = [c.id for c in engine.containers.values() if c.service == "db"]
    engine.kill(db_id)  # db stays down: app may create nothing
    engine.registry[TAG] = V2
    ctrl.check_updates()
    drive(ctrl, clock, 200)  # the progress deadline is 60 s
    assert not any(e.kind == "image-rollback" for e in ctrl.events.since(0))
    ctrl.resume("db")
    drive(ctrl, clock)
    assert images(engine) == ["db:1", *[pinned_ref(TAG, V2)] * 2]


def test_no_check_for_a_service_scaled_to_zero_or_never_pulled() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(follower(2)))
    drive(ctrl, clock)
    engine.registry[TAG] = V2
    ctrl.set_desired(desired(follower(0)))
    drive(ctrl, clock)
    assert ctrl.check_updates() == [] and "registry_digest" not in engine.calls


def test_a_whole_second_creation_time_is_taken_as_the_end_of_its_second() -> None:
    # The list call gives Created in whole seconds: a container made at 100.9 reads 100.
    s = dataclasses.replace(follower(1), update_config=UpdateConfig(min_ready_seconds=1.0))
    c = container(s, created=100.0)
    assert not available(c, s, 101.5), "it may have run for 0.6 s only"
    assert available(c, s, 102.0)
    assert available(container(s, created=100.5), s, 101.5)  # a precise time as it is
