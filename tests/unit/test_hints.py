"""When a look still shows a service (healerd.core.hints): the kill's own pass listed a
moment before the death, which the memory folds in; any other event is news."""

from __future__ import annotations

import threading

from healerd.core.hints import LookHints
from healerd.engine.api import EngineUnavailable
from healerd.model import EngineAction, EngineEvent, ObservedContainer
from tests.support.polling import wait_for
from tests.unit.harness.builders import spec
from tests.unit.harness.in_place import make
from tests.unit.harness.loop import desired, drive


def test_queued_before_the_look_is_shown() -> None:
    h = LookHints()
    assert h.still_shown("web", 1.0, began=2.0)
    assert h.still_shown("web", None, began=2.0)


def test_queued_after_by_a_kill_or_death_only_is_shown() -> None:
    h = LookHints()
    h.looking(None)
    assert h.event("web", EngineAction.DIED)
    h.hinted("web", 3.0)
    assert h.still_shown("web", 3.0, began=2.0)
    # Queued again later by something else (a timer, a reload): not by the death.
    assert not h.still_shown("web", 4.0, began=2.0)


def test_any_other_event_since_the_look_is_news() -> None:
    h = LookHints()
    h.looking(None)
    assert not h.event("web", EngineAction.CREATED)
    assert h.event("web", EngineAction.DIED)
    h.hinted("web", 3.0)
    assert not h.still_shown("web", 3.0, began=2.0)
    h.looking("web")  # a new look lists it: the news is in it
    assert h.still_shown("web", 3.0, began=2.0)
    h.looking("db")  # a look of another service says nothing of web
    h.event("web", EngineAction.DESTROYED)
    assert not h.still_shown("web", 3.0, began=2.0)


def test_a_docker_kill_is_started_in_place_on_the_kills_own_look() -> None:
    """docker kill: `kill` (its pass lists), then `die` ~60 ms later: the death's pass
    starts the container without listing again (the start is on the engine's critical
    path of the heal; the list is not)."""
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (cid,) = engine.containers
    c = engine.containers[cid]
    stop = threading.Event()
    loop = threading.Thread(target=ctrl.run, args=(stop,), daemon=True)
    loop.start()
    try:
        ctrl.on_event(EngineEvent("web", cid, EngineAction.KILLED, signal=9, name=c.name))
        wait_for("the kill's pass", lambda: engine.calls.count("list") >= 2, 5, 0.01)
        lists = engine.calls.count("list")
        engine.kill(cid, exit_code=137)
        ctrl.on_event(EngineEvent("web", cid, EngineAction.DIED, exit_code=137, name=c.name))
        wait_for("started in place", lambda: engine.containers[cid].running, 5, 0.01)
        assert engine.calls.count("list") == lists  # no list between the death and the start
    finally:
        stop.set()
        loop.join(5)
        ctrl.shutdown()


def test_news_between_the_kill_and_the_death_makes_the_death_list_again() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (cid,) = engine.containers
    c = engine.containers[cid]
    stop = threading.Event()
    loop = threading.Thread(target=ctrl.run, args=(stop,), daemon=True)
    loop.start()
    try:
        ctrl.on_event(EngineEvent("web", cid, EngineAction.KILLED, signal=9, name=c.name))
        wait_for("the kill's pass", lambda: engine.calls.count("list") >= 2, 5, 0.01)
        lists = engine.calls.count("list")
        ctrl.on_event(EngineEvent("web", "other", EngineAction.HEALTH, name="x"))
        engine.kill(cid, exit_code=137)
        ctrl.on_event(EngineEvent("web", cid, EngineAction.DIED, exit_code=137, name=c.name))
        wait_for("started in place", lambda: engine.containers[cid].running, 5, 0.01)
        assert engine.calls.count("list") > lists
    finally:
        stop.set()
        loop.join(5)
        ctrl.shutdown()


def test_a_list_that_failed_since_the_kills_look_leaves_the_death_waiting() -> None:
    """The last look is not acted on once a later list failed (here another service's):
    the engine may be going away, and healerd does not act on what it can no longer see;
    the death's pass lists, and waits for a list that works."""
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1), spec("db", 1)))
    drive(ctrl, clock)
    (cid,) = (k for k, v in engine.containers.items() if v.service == "web")
    c = engine.containers[cid]
    real_list = engine.list_managed
    failing = threading.Event()

    def list_managed(service: str | None = None) -> list[ObservedContainer]:
        if failing.is_set():
            engine.calls.append("list")
            raise EngineUnavailable("lists refused")
        return real_list(service)

    engine.list_managed = list_managed  # type: ignore[method-assign]
    stop = threading.Event()
    loop = threading.Thread(target=ctrl.run, args=(stop,), daemon=True)
    loop.start()
    try:
        ctrl.on_event(EngineEvent("web", cid, EngineAction.KILLED, signal=9, name=c.name))
        wait_for("the kill's pass", lambda: engine.calls.count("list") >= 2, 5, 0.01)
        failing.set()
        mark = len(engine.calls)
        clock.advance(0.1)
        ctrl.reconcile_now("db")  # another service's pass finds the engine cannot list
        wait_for("db's failed list", lambda: "list" in engine.calls[mark:], 5, 0.01)
        engine.kill(cid, exit_code=137)
        ctrl.on_event(EngineEvent("web", cid, EngineAction.DIED, exit_code=137, name=c.name))

        def death_passed() -> bool:
            clock.advance(0.05)  # the failed passes' backoff goes by
            return engine.calls[mark:].count("list") >= 3 or "start" in engine.calls[mark:]

        wait_for("the death's pass", death_passed, 5, 0.01)
        assert "start" not in engine.calls[mark:] and not engine.containers[cid].running
        failing.clear()

        def started() -> bool:
            clock.advance(0.05)
            return engine.containers[cid].running

        wait_for("started in place", started, 5, 0.01)
    finally:
        stop.set()
        loop.join(5)
        ctrl.shutdown()
