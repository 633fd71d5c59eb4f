"""The loop with an injected clock and an in-memory engine: no sleeps, no threads."""

from __future__ import annotations

import pytest

from healerd.config import DesiredState
from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.model import EngineEvent, ServiceSpec
from tests.unit.builders import spec
from tests.unit.fake_engine import FakeEngine


def desired(*specs: ServiceSpec, hold: bool = False) -> DesiredState:
    return DesiredState(
        services={s.name: s for s in specs}, errors=(), hold_orphans=hold, broken_files=()
    )


def make(**kw: object) -> tuple[Controller, FakeEngine, FakeClock]:
    engine, clock = FakeEngine(), FakeClock()
    settings = LoopSettings(
        workers=2,
        parallel_actions=4,
        backoff=Backoff(0.5, 8.0),
        crash_backoff=Backoff(1.0, 16.0),
        crash_reset=60.0,
        **kw,
    )  # type: ignore[arg-type]
    return Controller(engine, clock, settings), engine, clock


def drive(ctrl: Controller, clock: FakeClock, max_seconds: float = 120.0) -> float:
    """Run passes, jumping the clock to the next timer, until nothing is left to do."""
    start = clock.monotonic()
    while clock.monotonic() - start <= max_seconds:
        if ctrl.process_once():
            continue
        delay = ctrl.queue.next_delay()
        if delay is None:
            return clock.monotonic() - start
        clock.advance(delay)
    raise AssertionError("did not settle")


def test_one_list_call_per_batch_whatever_the_number_of_services() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 2), spec("b", 1), spec("c", 3)))
    ctrl.process_once()
    assert engine.calls.count("list") == 1
    assert engine.calls.count("create") == 6
    drive(ctrl, clock)
    assert {s.name: s.state for s in ctrl.statuses()} == dict.fromkeys("abc", "Converged")


def test_a_converged_service_costs_one_list_and_nothing_else() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 2)))
    drive(ctrl, clock)
    engine.calls.clear()
    ctrl.enqueue_all()
    drive(ctrl, clock)
    assert engine.calls == ["list"]


def test_engine_errors_back_off_exponentially_and_never_give_up() -> None:
    ctrl, engine, clock = make()
    engine.fail_creates = 10
    ctrl.set_desired(desired(spec("a", 1)))
    times = []
    for _ in range(10):
        ctrl.process_once()
        delay = ctrl.queue.next_delay()
        assert delay is not None
        times.append(delay)
        assert ctrl.statuses()[0].state == "Degraded"
        clock.advance(delay)
    assert times == [0.5, 1, 2, 4, 8, 8, 8, 8, 8, 8]
    drive(ctrl, clock)
    assert len(engine.running("a")) == 1 and ctrl.statuses()[0].state == "Converged"


def test_one_failing_service_does_not_hold_up_another() -> None:
    ctrl, engine, _clock = make()
    ctrl.set_desired(desired(spec("bad", 1, image="missing:1"), spec("good", 1)))
    orig = engine.create_and_start

    def create(s: ServiceSpec, name: str) -> str:
        if s.image == "missing:1":
            from healerd.engine import ImageMissing

            raise ImageMissing("no such image")
        return orig(s, name)

    engine.create_and_start = create  # type: ignore[method-assign]
    ctrl.process_once()
    assert len(engine.running("good")) == 1
    states = {s.name: s.state for s in ctrl.statuses()}
    assert states == {"bad": "Degraded", "good": "Progressing"}


def test_engine_down_then_back_resyncs_every_service() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1), spec("b", 1)))
    drive(ctrl, clock)
    engine.down = True
    for cid in list(engine.containers):
        engine.kill(cid)
    ctrl.enqueue_all()
    for _ in range(6):
        ctrl.process_once()
        clock.advance(ctrl.queue.next_delay() or 0.0)
    assert ctrl.engine_ok is False
    assert {s.state for s in ctrl.statuses()} == {"EngineUnreachable"}
    engine.down = False
    # One key coming through is enough: a successful list re-queues every service, forced.
    ctrl.on_event(EngineEvent("a", "", "die"))
    ctrl.queue.add("a", force=True)
    drive(ctrl, clock, max_seconds=1.0)
    assert len(engine.running("a")) == 1 and len(engine.running("b")) == 1


def test_crash_loop_backs_off_replacements() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("crashy", 1)))
    drive(ctrl, clock)
    waits = []
    for _ in range(8):
        (c,) = engine.running("crashy")
        engine.kill(c.id)
        ctrl.on_event(EngineEvent("crashy", c.id, "die"))
        t0 = clock.monotonic()
        while not engine.running("crashy"):
            if not ctrl.process_once():
                clock.advance(ctrl.queue.next_delay() or 0.0)
        waits.append(clock.monotonic() - t0)
        drive(ctrl, clock, max_seconds=0.0)
    # Two replacements at once (a kill storm seen in two passes is no crash loop), then
    # 1, 2, 4, 8, 16 s (the cap) while crashes keep coming.
    assert waits == [0, 0, 1, 2, 4, 8, 16, 16]
    # A quiet minute resets it.
    clock.advance(61)
    (c,) = engine.running("crashy")
    engine.kill(c.id)
    ctrl.on_event(EngineEvent("crashy", c.id, "die"))
    ctrl.process_once()
    assert len(engine.running("crashy")) == 1


def test_undeclared_services_are_discovered_and_removed() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 2), spec("b", 1)))
    drive(ctrl, clock)
    ctrl.set_desired(desired(spec("a", 2)))
    drive(ctrl, clock)
    assert engine.running("b") == [] and len(engine.running("a")) == 2


def test_orphans_are_held_while_a_broken_file_may_declare_them() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1), spec("b", 1)))
    drive(ctrl, clock)
    ctrl.set_desired(desired(spec("a", 1), hold=True))
    drive(ctrl, clock)
    assert len(engine.running("b")) == 1
    assert {s.name: s.state for s in ctrl.statuses()}["b"] == "Held"


def test_a_die_event_ahead_of_the_list_is_checked_again_until_the_list_agrees() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    (c,) = engine.running("a")
    ctrl.on_event(EngineEvent("a", c.id, "die"))  # the list still says running
    ctrl.process_once()
    assert engine.running("a") == [c]
    assert ctrl.queue.next_delay() == pytest.approx(0.02)
    engine.kill(c.id)
    clock.advance(0.02)
    ctrl.process_once()
    (new,) = engine.running("a")
    assert new.id != c.id


def test_a_die_event_that_the_list_never_confirms_stops_being_rechecked() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    (c,) = engine.running("a")
    ctrl.on_event(EngineEvent("a", c.id, "die"))
    engine.calls.clear()
    drive(ctrl, clock, max_seconds=5.0)
    # About one look every 20 ms for the 2 s window, then quiet.
    assert 50 <= engine.calls.count("list") <= 110
    assert ctrl.queue.next_delay() is None
