"""The wall clock jumps (NTP at boot on a board without an RTC, an operator's `date -s`).

healerd paces itself with the monotonic clock (the work queue's timers, backoffs,
graces, rollout pacing) and compares container ages with the wall clock, because the
engine reports creation times in wall time (a container counts as at least as old as
healerd has seen it). A jump of the wall clock alone (the monotonic one goes on) must not replace
containers en masse, nor leave a backoff or a rollout stuck.

The loop is driven without threads: FakeClock.now is monotonic time, wall_offset moves
the wall clock alone.
"""

from __future__ import annotations

import pytest

from healerd.core.clock import FakeClock
from healerd.core.controller import Controller
from healerd.model import EngineAction, EngineEvent, RestartPolicy, ServiceSpec, UpdateConfig
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import FakeEngine
from tests.unit.harness.loop import desired, drive, make, state

DAY = 86_400.0
JUMPS = [pytest.param(DAY, id="forward-1d"), pytest.param(-DAY, id="back-1d")]


def converged(ctrl: Controller, clock: FakeClock, *specs: ServiceSpec) -> None:
    ctrl.set_desired(desired(*specs))
    drive(ctrl, clock)
    assert {state(ctrl, s.name) for s in specs} == {"Converged"}


def crashy() -> ServiceSpec:
    return spec(
        "crashy",
        1,
        image="crash:1",
        restart_policy=RestartPolicy(delay=10.0, max_delay=40.0, window=600.0),
    )


def heals_within(ctrl: Controller, engine: FakeEngine, clock: FakeClock, seconds: float) -> int:
    """Starts in place and creates: a crash-looping container is healed by either."""

    def heals() -> int:
        return engine.calls.count("create") + engine.calls.count("start")

    before = heals()
    drive(ctrl, clock, max_seconds=seconds)
    return heals() - before


@pytest.mark.parametrize("jump", JUMPS)
def test_a_wall_clock_jump_replaces_nothing(jump: float) -> None:
    ctrl, engine, clock = make()
    web = spec("web", 3, update_config=UpdateConfig(min_ready_seconds=5.0))
    converged(ctrl, clock, web, spec("other", 2), spec("sick", 1, unhealthy_grace=30.0))
    before = dict(engine.containers)
    engine.calls.clear()
    clock.wall_offset += jump
    ctrl.enqueue_all(force=True)
    drive(ctrl, clock, max_seconds=120)
    assert engine.containers == before, "a clock jump alone changes nothing"
    assert set(engine.calls) == {"list"}


@pytest.mark.parametrize(
    "jump",
    [
        pytest.param(DAY, id="forward-1d"),
        pytest.param(-DAY, id="back-1d"),
    ],
)
def test_a_wall_clock_jump_leaves_converged_services_converged(jump: float) -> None:
    ctrl, _engine, clock = make()
    converged(ctrl, clock, spec("web", 3), spec("other", 2))
    clock.wall_offset += jump
    ctrl.enqueue_all(force=True)
    drive(ctrl, clock, max_seconds=120)
    assert {s.state for s in ctrl.statuses()} == {"Converged"}


@pytest.mark.parametrize("jump", JUMPS)
def test_a_kill_after_a_wall_clock_jump_is_healed_at_once(jump: float) -> None:
    ctrl, engine, clock = make()
    converged(ctrl, clock, spec("web", 2))
    clock.wall_offset += jump
    (victim, _) = engine.running("web")
    engine.kill(victim.id)
    ctrl.on_event(EngineEvent("web", victim.id, EngineAction.KILLED, signal=9))
    ctrl.on_event(EngineEvent("web", victim.id, EngineAction.DIED))
    ctrl.process_once()
    # Started again in place (a jump must not make its backoff wait, or its age count).
    assert len(engine.running("web")) == 2 and engine.containers[victim.id].running


def test_a_crash_backoff_ends_at_the_latest_on_time_after_a_jump_forward() -> None:
    ctrl, engine, clock = make()
    engine.crash_images.add("crash:1")
    ctrl.set_desired(desired(crashy()))
    drive(ctrl, clock, max_seconds=15)  # created, restarted at once, now backing off 10 s
    assert state(ctrl, "crashy") == "CrashLoopBackOff"
    clock.wall_offset += DAY
    ctrl.enqueue_all()
    n = heals_within(ctrl, engine, clock, 20.0)
    assert 1 <= n <= 3, "the backoff ends (early, if anything) and does not burst"


def test_a_crash_backoff_is_not_stuck_after_a_jump_back() -> None:
    ctrl, engine, clock = make()
    engine.crash_images.add("crash:1")
    ctrl.set_desired(desired(crashy()))
    drive(ctrl, clock, max_seconds=15)
    assert state(ctrl, "crashy") == "CrashLoopBackOff"
    clock.wall_offset -= DAY
    ctrl.enqueue_all()
    # The pending backoff was at most 40 s (max_delay); a minute is plenty.
    assert heals_within(ctrl, engine, clock, 60.0) >= 1


def test_a_rollout_is_not_stuck_after_a_jump_back() -> None:
    ctrl, engine, clock = make()
    web = spec("web", 3, update_config=UpdateConfig(min_ready_seconds=5.0))
    converged(ctrl, clock, web)
    new = spec("web", 3, image="img:2", update_config=UpdateConfig(min_ready_seconds=5.0))
    ctrl.set_desired(desired(new))
    ctrl.process_once()  # the first new container is created (start-first)
    assert any(c.spec_hash == new.spec_hash for c in engine.containers.values())
    clock.wall_offset -= DAY
    drive(ctrl, clock, max_seconds=120)
    assert {c.spec_hash for c in engine.containers.values()} == {new.spec_hash}


def test_a_rollout_under_way_completes_after_a_jump_forward() -> None:
    ctrl, engine, clock = make()
    web = spec("web", 3, update_config=UpdateConfig(min_ready_seconds=5.0))
    converged(ctrl, clock, web)
    new = spec("web", 3, image="img:2", update_config=UpdateConfig(min_ready_seconds=5.0))
    ctrl.set_desired(desired(new))
    ctrl.process_once()
    clock.wall_offset += DAY
    drive(ctrl, clock, max_seconds=120)
    assert {c.spec_hash for c in engine.containers.values()} == {new.spec_hash}
    assert len(engine.running("web")) == 3 and state(ctrl, "web") == "Converged"


def test_an_unhealthy_container_is_restarted_on_time_after_a_jump_back() -> None:
    ctrl, engine, clock = make()
    converged(ctrl, clock, spec("web", 1, unhealthy_grace=10.0))
    (c,) = engine.running("web")
    engine.set(c.id, health="unhealthy")
    ctrl.reconcile_now("web")
    drive(ctrl, clock, max_seconds=5)
    clock.wall_offset -= DAY
    engine.calls.clear()
    drive(ctrl, clock, max_seconds=30)
    # Its grace ended on time: stopped and started again, the same container.
    assert engine.calls.count("stop") == 1 and engine.calls.count("start") == 1
    assert engine.running("web")[0].id == c.id
