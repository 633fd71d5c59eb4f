"""The events of healerd's own creates and removes are not hints (healerd.core.echoes):
the pass that acted looks again anyway; anything else still queues its service."""

from __future__ import annotations

from healerd.core.clock import FakeClock
from healerd.core.echoes import EXPECT_FOR, OwnActions
from healerd.model import EngineAction, EngineEvent
from healerd.model import EngineAction as A
from tests.unit.harness.builders import spec
from tests.unit.harness.loop import desired, drive, make


def ev(action: EngineAction, name: str = "", cid: str = "c1") -> EngineEvent:
    return EngineEvent(service="web", container_id=cid, action=action, name=name)


def test_announced_create_and_start_are_consumed_once() -> None:
    own = OwnActions(FakeClock())
    own.creating("web-abcde-12345")
    assert own.consume(ev(EngineAction.CREATED, "web-abcde-12345"))
    assert own.consume(ev(EngineAction.STARTED, "web-abcde-12345"))
    # A second start of the same container is someone's `docker start`: a hint.
    assert not own.consume(ev(EngineAction.STARTED, "web-abcde-12345"))
    assert not own.consume(ev(EngineAction.STARTED, "web-other-00000"))


def test_only_announced_removes_are_consumed_and_deaths_never() -> None:
    own = OwnActions(FakeClock())
    own.removing("c1")
    assert not own.consume(ev(EngineAction.DESTROYED, cid="c2"))
    assert own.consume(ev(EngineAction.DESTROYED, cid="c1"))
    assert not own.consume(ev(EngineAction.DESTROYED, cid="c1"))
    own.creating("web-abcde-12345")
    for action in (A.DIED, A.KILLED, A.STOPPED, A.OOM, A.PAUSED, A.HEALTH):
        assert not own.consume(ev(action, "web-abcde-12345"))


def test_expectations_that_never_came_are_forgotten() -> None:
    clock = FakeClock()
    own = OwnActions(clock)
    own.creating("lost")
    clock.advance(EXPECT_FOR + 1)
    for i in range(70):  # expiry runs as the tables grow
        own.creating(f"n{i}")
    assert not own.consume(ev(EngineAction.STARTED, "lost"))
    assert own.consume(ev(EngineAction.STARTED, "n3"))


def test_the_loop_does_not_queue_a_pass_for_its_own_creates_but_for_others() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 2)))
    drive(ctrl, clock)
    mine = [c for c in engine.containers.values() if c.service == "web"]
    assert len(mine) == 2
    for c in mine:  # their events arrive late, after the pass that made them
        ctrl.on_event(EngineEvent("web", c.id, EngineAction.CREATED, name=c.name))
        ctrl.on_event(EngineEvent("web", c.id, EngineAction.STARTED, name=c.name))
    assert ctrl.queue.pending() == set()
    # Someone else's `docker start` of a container, and any death, are hints.
    ctrl.on_event(EngineEvent("web", mine[0].id, EngineAction.STARTED, name=mine[0].name))
    assert ctrl.queue.pending() == {"web"}
