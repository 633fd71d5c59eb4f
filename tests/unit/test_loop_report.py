"""What the loop says about its work (issue 28, point 7): the words of its events and how
many log lines an outage costs."""

from __future__ import annotations

import pytest

from healerd.config import DesiredState
from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.model import EngineEvent, ServiceSpec
from tests.unit.builders import spec
from tests.unit.fake_engine import LOOP_CALLS, FakeEngine


def desired(*specs: ServiceSpec) -> DesiredState:
    return DesiredState({s.name: s for s in specs}, (), False, ())


def make() -> tuple[Controller, FakeEngine, FakeClock]:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS)
    settings = LoopSettings(workers=2, parallel_actions=4, backoff=Backoff(0.5, 8.0))
    return Controller(engine, clock, settings), engine, clock


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
    """`docker rm -f` sends kill (SIGKILL), die, then destroy; the pass that the kill
    wakes plans on a list that still shows the container, dead: its replacement was
    "replace NAME exited", although the container was removed."""
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    settle(ctrl, clock)
    (victim,) = engine.running("web")
    engine.kill(victim.id)
    ctrl.on_event(EngineEvent("web", victim.id, "kill", signal="9", name=victim.name))
    ctrl.on_event(EngineEvent("web", victim.id, "die", exit_code=137, name=victim.name))
    create = engine.create_and_start

    def create_while_the_removal_ends(*args: object, **kwargs: object) -> str:
        # The destroy event arrives while the replacement is being created.
        if engine.containers.pop(victim.id, None) is not None:
            ctrl.on_event(EngineEvent("web", victim.id, "destroy", name=victim.name))
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
    ctrl.on_event(EngineEvent("web", victim.id, "destroy", name=victim.name))
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
    ctrl.on_event(EngineEvent("web", removed, "destroy", name="web-x"))  # healerd's own
    ctrl.on_event(EngineEvent("web", "f" * 64, "destroy", name="web-lookalike"))  # never listed
    assert "gone" not in [k for k, _ in messages(ctrl)]
