"""A pass plans once (issue 30): the host's room and a dependency's hold are known before
the plan (PlanContext.room, extras_allowed, hold), so the planner fits its one plan into
them instead of being run again with what is granted."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from healerd.core import planner
from healerd.core.planner import Plan, PlanContext, plan
from healerd.model import ActionKind, ContainerState, Dependency, HealthcheckSpec, ServiceSpec
from healerd.vocabulary import Condition
from tests.unit.harness.builders import container, spec
from tests.unit.harness.loop import desired, make
from tests.unit.harness.loop import drive as drive_loop
from tests.unit.harness.node import Mi, drive, host, loop

NOW = 100.0


def kinds(p: Plan) -> list[ActionKind]:
    return [a.kind for a in p.actions]


# -- the planner under a dependency's hold -------------------------------------------------


def test_a_hold_makes_no_create_and_says_it_held_them_back() -> None:
    s = spec("app", 2)
    p = plan("app", s, [], PlanContext(now=NOW, hold="waiting for db"))
    assert p.actions == () and p.waiting == 2 and p.held_back and not p.converged


def test_a_hold_on_a_converged_service_holds_nothing_back() -> None:
    s = spec("app", 2)
    mine = [container(s, created=0.0) for _ in range(2)]
    p = plan("app", s, mine, PlanContext(now=NOW, hold="waiting for db"))
    assert p.actions == () and not p.held_back and p.converged


def test_a_hold_keeps_a_crashed_container_stopped_and_removes_what_is_not_needed() -> None:
    s = spec("app", 1)
    dead = container(s, ContainerState.EXITED, created=0.0)
    alive = container(s, created=1.0)
    extra = container(s, created=2.0)
    p = plan("app", s, [dead, alive, extra], PlanContext(now=NOW, hold="waiting for db"))
    # Scaling down is no create: it goes on; nothing would have started.
    assert ActionKind.START not in kinds(p) and ActionKind.CREATE not in kinds(p)
    assert p.removes >= 1 and not p.held_back


def test_a_hold_notes_a_rollout_batch_it_held_back() -> None:
    old = spec("app", 2)
    new = dataclasses.replace(old, image="img:2")
    mine = [container(old, created=0.0) for _ in range(2)]
    free = plan("app", new, mine, PlanContext(now=NOW))
    assert free.creates == 1 and free.rollout_step
    held = plan("app", new, mine, PlanContext(now=NOW, hold="waiting for db"))
    assert held.actions == () and held.held_back and not held.rollout_step and held.stale == 2


def test_a_hold_notes_a_recreate_it_held_back() -> None:
    s = spec("app", 1)
    (c,) = mine = [container(s, created=0.0)]
    why = {c.id: "db was replaced"}
    assert plan("app", s, mine, PlanContext(now=NOW, recreate=why)).creates == 1
    held = plan("app", s, mine, PlanContext(now=NOW, recreate=why, hold="waiting for db"))
    assert held.actions == () and held.held_back


# -- the planner within the room offered -----------------------------------------------------


def test_a_swap_needs_no_room_but_a_stopped_container_does() -> None:
    s = spec("web", 2)
    sick = container(s, created=0.0)  # running, unhealthy past its grace
    dead = container(s, ContainerState.EXITED, created=1.0)
    ctx = PlanContext(now=NOW, room=0, failed_running=frozenset({sick.id}))
    p = plan("web", s, [sick, dead], ctx)
    assert [(a.kind, a.container) for a in p.actions] == [
        (ActionKind.STOP, sick),
        (ActionKind.START, sick),
    ]
    assert p.waiting == 1


def test_under_pressure_only_replacements_start() -> None:
    s = spec("web", 3)
    dead = container(s, ContainerState.EXITED, created=0.0)
    p = plan("web", s, [dead], PlanContext(now=NOW, extras_allowed=False))
    assert kinds(p) == [ActionKind.START] and p.waiting == 2


def test_a_rollout_surge_takes_the_room_left_after_the_heal() -> None:
    old = spec("web", 3)
    new = dataclasses.replace(old, image="img:2")
    mine = [container(old, created=0.0) for _ in range(3)]
    assert plan("web", new, mine, PlanContext(now=NOW, room=0)).actions == ()
    p = plan("web", new, mine, PlanContext(now=NOW, room=1))
    assert p.creates == 1 and p.rollout_step


# -- one plan per pass, in the loop ----------------------------------------------------------


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The service of every plan made (whichever module calls the planner)."""
    made: list[str] = []
    real = planner._Planning.__init__

    def counting(self: planner._Planning, service: str, *args: Any) -> None:
        made.append(service)
        real(self, service, *args)

    monkeypatch.setattr(planner._Planning, "__init__", counting)
    yield made


def test_a_pass_whose_dependency_is_not_ready_plans_once(plans: list[str]) -> None:
    ctrl, engine, clock = make()
    db = spec("db", 1, healthcheck=HealthcheckSpec(test=("CMD", "true")))
    app = spec("app", 2, depends_on=(Dependency("db", Condition.HEALTHY),))
    ctrl.set_desired(desired(db, app))
    drive_loop(ctrl, clock, max_seconds=5)
    assert engine.running("app") == [], "db is not healthy yet"
    before = plans.count("app")
    ctrl.reconcile_now("app")
    assert ctrl.process_once()
    assert plans.count("app") - before == 1
    status = {s.name: s for s in ctrl.statuses()}["app"]
    assert status.reason == "waiting for db to be healthy (depends_on)"


def test_a_pass_with_room_for_less_than_its_plan_plans_once(plans: list[str]) -> None:
    # 100 MiB above the threshold, 64 MiB a container: room for one of three.
    ctrl, engine, clock, _ = loop(host(mem_avail=164 * Mi), container_memory=64 * Mi)
    web: ServiceSpec = spec("web", 3)
    ctrl.set_desired(desired(web))
    before = len(plans)
    ctrl.reconcile_now("web")
    assert ctrl.process_once()
    assert len(plans) - before == 1
    drive(ctrl, clock, 1)
    assert len(engine.running("web")) == 1
    (st,) = ctrl.statuses()
    assert st.reason.startswith("2 container(s) wait for resources"), st.reason
