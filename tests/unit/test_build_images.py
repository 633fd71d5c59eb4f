"""Services with `build:` in the loop (issue 34): built when missing or when their
context changed, as pull_policy says; a failed build is the service's reason and the
containers of the image before keep running; GC keeps a built image."""

from __future__ import annotations

import dataclasses

import pytest

from healerd.core.backoff import Backoff
from healerd.core.builds import Need, build_need
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.timings import Timings
from healerd.core.wiring import build_loop
from healerd.engine import ImageBuildFailed
from healerd.model import LABEL_CONTEXT_HASH, BuildSpec, PullPolicy, ServiceSpec
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine
from tests.unit.harness.loop import desired, drive, state

B = PullPolicy.BUILD


@pytest.mark.parametrize(
    ("policy", "labels", "pulled", "need"),
    [
        (B, None, False, Need.BUILD),
        (B, {LABEL_CONTEXT_HASH: "h1"}, False, Need.NOTHING),
        (B, {LABEL_CONTEXT_HASH: "h0"}, False, Need.BUILD),
        (B, {}, False, Need.BUILD),  # an image of that tag healerd did not build
        (PullPolicy.MISSING, None, False, Need.BUILD),
        (PullPolicy.MISSING, {LABEL_CONTEXT_HASH: "h0"}, False, Need.NOTHING),
        (PullPolicy.NEVER, None, False, Need.MISSING),
        (PullPolicy.NEVER, {LABEL_CONTEXT_HASH: "h0"}, False, Need.NOTHING),
        (PullPolicy.ALWAYS, {LABEL_CONTEXT_HASH: "h1"}, False, Need.PULL),
        (PullPolicy.ALWAYS, None, True, Need.BUILD),  # the pull failed: build
        (PullPolicy.ALWAYS, {}, True, Need.NOTHING),  # the registry's image
        (PullPolicy.ALWAYS, {LABEL_CONTEXT_HASH: "h0"}, True, Need.BUILD),
    ],
)
def test_the_build_rule_by_pull_policy(
    policy: PullPolicy, labels: dict[str, str] | None, pulled: bool, need: Need
) -> None:
    assert build_need(policy, labels, "h1", pulled=pulled) is need


def make() -> tuple[Controller, FakeEngine, FakeClock]:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"pull", "image_labels", "build_image"})
    engine.images = set()
    settings = LoopSettings(
        workers=2,
        parallel_actions=4,
        timings=Timings(backoff=Backoff(0.5, 8.0), pull_backoff=Backoff(2.0, 8.0)),
    )
    return build_loop(engine, clock, settings), engine, clock


def built(name: str, context_hash: str, policy: PullPolicy = B, replicas: int = 1) -> ServiceSpec:
    build = BuildSpec("/srv/app", context_hash=context_hash)
    return spec(name, replicas, image=f"p-{name}", build=build, pull_policy=policy)


def test_a_missing_image_is_built_then_a_changed_context_rebuilds_and_rolls_out() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(built("app", "h1", replicas=2)))
    drive(ctrl, clock)
    assert engine.builds == [("p-app", "h1", False)]
    assert len(engine.running("app")) == 2 and state(ctrl, "app") == "Converged"
    drive(ctrl, clock, max_seconds=30)  # heals and resyncs build nothing more
    assert len(engine.builds) == 1
    new = built("app", "h2", replicas=2)
    ctrl.set_desired(desired(new))
    drive(ctrl, clock)
    assert engine.builds[-1] == ("p-app", "h2", False)
    assert {c.spec_hash for c in engine.running("app")} == {new.spec_hash}


def test_a_failed_build_is_the_reason_and_the_old_containers_keep_running() -> None:
    ctrl, engine, clock = make()
    old = built("app", "h1")
    ctrl.set_desired(desired(old))
    drive(ctrl, clock)
    engine.build_failures["p-app"] = "The command '/bin/sh -c make' returned a non-zero code: 2"
    ctrl.set_desired(desired(built("app", "h2")))
    drive(ctrl, clock, max_seconds=20)
    st = {s.name: s for s in ctrl.statuses()}["app"]
    assert st.state == "ImagePullBackOff"
    assert st.reason.startswith("cannot build p-app: The command '/bin/sh -c make'")
    assert [c.spec_hash for c in engine.running("app")] == [old.spec_hash]
    tries = [b for b in engine.builds if b[1] == "h2"]
    assert 2 <= len(tries) <= 6  # retried with the pull backoff, not hammered
    del engine.build_failures["p-app"]
    drive(ctrl, clock, max_seconds=20)
    assert state(ctrl, "app") == "Converged"
    assert events(ctrl) >= {"build-failed", "built"}


def events(ctrl: Controller) -> set[str]:
    return {str(e.kind) for e in ctrl.events.since(0)}


def test_missing_uses_a_present_image_and_never_builds_nothing() -> None:
    ctrl, engine, clock = make()
    assert engine.images is not None
    engine.images.add("p-a")  # present, of another context
    engine.image_label_sets["p-a"] = {LABEL_CONTEXT_HASH: "old"}
    ctrl.set_desired(
        desired(built("a", "h1", PullPolicy.MISSING), built("n", "h1", PullPolicy.NEVER))
    )
    drive(ctrl, clock, max_seconds=10)
    assert engine.builds == []
    assert len(engine.running("a")) == 1
    assert state(ctrl, "n") == "ErrImageNeverPull"


def test_always_pulls_first_and_builds_when_the_pull_fails() -> None:
    ctrl, engine, clock = make()
    engine.pullable.add("p-b")
    ctrl.set_desired(
        desired(built("a", "h1", PullPolicy.ALWAYS), built("b", "h1", PullPolicy.ALWAYS))
    )
    drive(ctrl, clock, max_seconds=10)
    assert [b[0] for b in engine.builds] == ["p-a"]  # b came from its registry
    assert engine.calls.count("pull") == 2
    assert len(engine.running("a")) == 1 and len(engine.running("b")) == 1


def test_build_now_builds_only_what_changed_unless_no_cache() -> None:
    ctrl, engine, clock = make()
    s = built("app", "h1")
    ctrl.set_desired(desired(s))
    mark = ctrl.build_mark()
    drive(ctrl, clock)
    # The loop built it after the mark (the reload before healerctl build lets a pass
    # start first): that build is the one asked for.
    assert ctrl.build_now("app", s, since=mark) == "built p-app" and len(engine.builds) == 1
    clock.advance(1)
    later = ctrl.build_mark()
    assert ctrl.build_now("app", s, since=later) == "p-app is up to date with its context"
    assert ctrl.build_now("app", s, no_cache=True) == "built p-app"
    assert engine.builds[-1] == ("p-app", "h1", True)
    engine.build_failures["p-app"] = "boom"
    with pytest.raises(ImageBuildFailed, match="cannot build p-app: boom"):
        ctrl.build_now(
            "app", dataclasses.replace(s, build=BuildSpec("/srv/app", context_hash="h3"))
        )
