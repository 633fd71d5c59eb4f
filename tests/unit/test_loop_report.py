"""What the loop says about its work (issue 28, point 7): the words of its events and how
many log lines an outage costs."""

from __future__ import annotations

import logging

import pytest

from healerd.config import DesiredState
from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.ratelog import RateLimitedLog
from healerd.core.timings import Timings
from healerd.core.wiring import build_loop
from healerd.engine import EngineUnavailable
from healerd.model import EngineAction, EngineEvent, ObservedContainer, ServiceSpec
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine


def desired(*specs: ServiceSpec) -> DesiredState:
    return DesiredState({s.name: s for s in specs}, (), False, ())


TEST_BACKOFF = Backoff(0.5, 8.0)


def make(backoff: Backoff = TEST_BACKOFF) -> tuple[Controller, FakeEngine, FakeClock]:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS)
    settings = LoopSettings(workers=2, parallel_actions=4, timings=Timings(backoff=backoff))
    return build_loop(engine, clock, settings), engine, clock


def settle(ctrl: Controller, clock: FakeClock) -> None:
    for _ in range(100):
        if not ctrl.process_once():
            delay = ctrl.queue.next_delay()
            if delay is None or delay > 5:
                return
            clock.advance(delay)


def messages(ctrl: Controller) -> list[tuple[str, str]]:
    return [(e.kind, e.message) for e in ctrl.events.since(0)]


# -- docker rm -f -----------------------------------------------------------------------


def test_a_container_removed_by_someone_else_is_said_to_be_removed_not_exited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`docker rm -f` sends kill (SIGKILL), die, then destroy; the pass that the die
    wakes plans on a list that still shows the container, dead: its start in place is
    refused (marked for removal) and replaced in the same action, which must not say
    "exited"."""
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    settle(ctrl, clock)
    (victim,) = engine.running("web")
    engine.kill(victim.id)
    engine.unstartable[victim.id] = "container is marked for removal and cannot be started"
    ctrl.on_event(EngineEvent("web", victim.id, EngineAction.KILLED, signal=9, name=victim.name))
    ctrl.on_event(EngineEvent("web", victim.id, EngineAction.DIED, exit_code=137, name=victim.name))
    create = engine.create_and_start

    def create_while_the_removal_ends(*args: object, **kwargs: object) -> str:
        # The destroy event arrives while the replacement is being created.
        if engine.containers.pop(victim.id, None) is not None:
            ctrl.on_event(EngineEvent("web", victim.id, EngineAction.DESTROYED, name=victim.name))
        return create(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "create_and_start", create_while_the_removal_ends)
    settle(ctrl, clock)
    assert len(engine.running("web")) == 1
    said = messages(ctrl)
    assert (
        "gone",
        f"{victim.name} was removed, not by healerd (docker rm -f or another client)",
    ) in said
    created = [m for k, m in said if k == "created"]
    assert created[-1] == f"replace {victim.name}: it was removed (not by healerd)", said
    assert not any("exited" in m for _, m in said), said


def test_a_removal_seen_before_the_pass_is_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    settle(ctrl, clock)
    (victim,) = engine.running("web")
    del engine.containers[victim.id]
    ctrl.on_event(EngineEvent("web", victim.id, EngineAction.DESTROYED, name=victim.name))
    settle(ctrl, clock)
    said = messages(ctrl)
    assert [k for k, _ in said].count("gone") == 1 and len(engine.running("web")) == 1
    assert not any("exited" in m for _, m in said), said


def test_healerd_own_removals_and_unknown_containers_are_no_news() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 2)))
    settle(ctrl, clock)
    before = set(engine.containers)
    ctrl.set_desired(desired(spec("web", 1)))
    settle(ctrl, clock)
    (removed,) = before - set(engine.containers)
    gone = EngineAction.DESTROYED
    ctrl.on_event(EngineEvent("web", removed, gone, name="web-x"))  # healerd's own
    ctrl.on_event(EngineEvent("web", "f" * 64, gone, name="web-lookalike"))  # never listed
    assert "gone" not in [k for k, _ in messages(ctrl)]


# -- an engine that goes away --------------------------------------------------------------


def test_an_engine_that_flaps_then_stays_away_costs_a_few_lines(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A dockerd shutting down answers some calls and refuses others for a second or two
    (lists pass, creates and starts fail), then nothing answers: 100-200 lines in 15 s
    (issue 28). Now: the engine lost and back, a few lines per service and one for the
    failed calls, per 10 s window."""
    ctrl, engine, clock = make(Timings().backoff)  # 5 ms doubling, as healerd runs
    services = {"a": 1, "b": 2, "c": 1}
    ctrl.set_desired(desired(*(spec(name, n) for name, n in services.items())))
    settle(ctrl, clock)
    refuse = {"on": False}
    create, start = engine.create_and_start, engine.start

    def create_unless_refused(*args: object, **kwargs: object) -> str:
        if refuse["on"]:
            raise EngineUnavailable("engine unreachable (ConnectionError)")
        return create(*args, **kwargs)  # type: ignore[arg-type]

    def start_unless_refused(c: ObservedContainer) -> None:
        if refuse["on"]:
            raise EngineUnavailable("engine unreachable (ConnectionError)")
        start(c)

    monkeypatch.setattr(engine, "create_and_start", create_unless_refused)
    monkeypatch.setattr(engine, "start", start_unless_refused)
    caplog.set_level(logging.INFO, logger="healerd")
    for cid in list(engine.containers):
        engine.kill(cid, exit_code=0)
    ctrl.enqueue_all(force=True)
    t0 = clock.monotonic()
    n = 0
    while clock.monotonic() - t0 < 15.0:
        away = clock.monotonic() - t0
        flapping = away < 2.0
        engine.down = not flapping or int(away / 0.05) % 2 == 1  # 50 ms up, 50 ms down
        refuse["on"] = True
        ctrl.process_once()
        n += 1
        clock.advance(0.01 if flapping else 0.1)
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    print(f"{len(lines)} lines for {n} passes:\n" + "\n".join(lines))
    assert any(ln.startswith("cannot list containers") for ln in lines)
    for name in services:
        mine = [ln for ln in lines if ln.startswith(f"{name}: ")]
        assert len(mine) <= 5, mine  # 3 state lines, the latest with a count, one failure
    assert len(lines) <= 20
    # And once it is back, it says so and heals.
    engine.down, refuse["on"] = False, False
    caplog.clear()
    clock.advance(10.0)
    settle(ctrl, clock)
    assert all(len(engine.running(name)) == n for name, n in services.items())
    assert "engine reachable again: resyncing every service" in caplog.text


def test_ratelog_burst_says_the_first_lines_at_once_and_the_latest_at_the_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    rl = RateLimitedLog(
        logging.getLogger("healerd.test.burst"), 10.0, burst=2, clock=lambda: now[0]
    )
    caplog.set_level(logging.INFO, logger="healerd.test.burst")
    states = ["lost", "back", "lost", "back", "lost"]
    said = [rl.info("engine", "engine %s", s) for s in states]
    assert said == [True, True, False, False, False]
    rl.flush()
    assert caplog.messages == ["engine lost", "engine back"]
    now[0] = 10.0
    rl.flush()  # the window is over: the latest state, with the count
    assert caplog.messages[-1] == "engine lost [3 more like this in the last 10s not logged]"
    assert rl.info("engine", "engine %s", "back") is True  # the flush's line counts
    assert rl.info("engine", "engine %s", "lost") is False
