"""States are chosen in one place (issue 30, point 3): `decide` (healerd.core.outcome)
picks every state a status shows, the loop's own cases too (no list, a failed pass, a
pull under way, a pause, a new replica count); the read model never rewrites one."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from healerd.config import DesiredState
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.lifecycle import ServiceState
from healerd.core.memdelta import MemoryDelta
from healerd.core.observe import Memory
from healerd.core.outcome import Outcome
from healerd.core.readmodel import complete
from healerd.core.reconcile import Observation
from healerd.core.status import ServiceStatus, is_converged
from healerd.core.wiring import build_loop
from healerd.model import ServiceSpec
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine

REPO = Path(__file__).resolve().parents[2]
# Where a state may be named other than in a comparison: defined, and decided.
CHOOSERS = {"healerd/core/lifecycle.py", "healerd/core/outcome.py"}


def chosen_states(tree: ast.AST) -> list[int]:
    """Lines naming a ServiceState member outside a comparison (`is`, `==`, `in`).
    Pending is no choice: it is a status's first state, before any pass."""
    compared: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            compared |= {id(n) for n in ast.walk(node)}
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "ServiceState"
        and node.attr != "PENDING"
        and id(node) not in compared
    ]


def test_only_decide_chooses_a_state() -> None:
    found = {
        rel: lines
        for path in (REPO / "healerd").rglob("*.py")
        if (rel := path.relative_to(REPO).as_posix()) not in CHOOSERS
        and (lines := chosen_states(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}


def test_the_read_model_never_rewrites_a_state() -> None:
    """It fills in what no pass looked at yet (a service just declared is Pending) and
    the paused flag, and nothing else."""
    converged = ServiceStatus("db", desired=1, running=1, available=1, up_to_date=1)
    converged.state = ServiceState.CONVERGED
    (shown, new) = complete([converged], {"db": spec("db", 3), "new": spec("new")}, {"db"})
    assert (shown.state, shown.desired, shown.paused) == (ServiceState.CONVERGED, 1, True)
    assert not is_converged(shown)
    assert (new.name, new.state, new.desired) == ("new", ServiceState.PENDING, 1)


def declared(*specs: ServiceSpec) -> DesiredState:
    return DesiredState({s.name: s for s in specs}, (), hold_orphans=False, broken_files=())


def running(service: str = "web", replicas: int = 1) -> tuple[Controller, FakeEngine]:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS)
    ctrl = build_loop(engine, clock, LoopSettings(workers=1))
    ctrl.set_desired(declared(spec(service, replicas)))
    for _ in range(5):
        ctrl.process_once()
        clock.advance(10.0)  # past min_ready_seconds
    assert status(ctrl, service).state is ServiceState.CONVERGED
    return ctrl, engine


def status(ctrl: Controller, name: str) -> ServiceStatus:
    return {s.name: s for s in ctrl.statuses()}[name]


def while_a_pass_runs(
    ctrl: Controller, change: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass that reconciles on the look and declaration of before `change`, which
    comes while it runs, and settles after it (a reload or a pause mid-pass)."""
    obs = ctrl.parts.looks.observe(["web"])
    reconcile = ctrl.parts.reconciler.reconcile

    def racing(key: str, o: Observation, memory: Memory) -> tuple[Outcome, MemoryDelta]:
        done = reconcile(key, o, memory)
        change()
        return done

    with monkeypatch.context() as m:
        m.setattr(ctrl.parts.reconciler, "reconcile", racing)
        ctrl.parts.dispatcher.handle("web", obs)


def test_a_pause_shows_at_once_and_no_pass_begun_before_it_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctrl, _ = running()
    ctrl.pause("web")
    st = status(ctrl, "web")
    assert (st.state, st.reason, st.paused) == (ServiceState.PAUSED, "paused by operator", True)
    ctrl.resume("web")
    ctrl.process_once()
    assert status(ctrl, "web").state is ServiceState.CONVERGED
    while_a_pass_runs(ctrl, lambda: ctrl.pause("web"), monkeypatch)
    assert status(ctrl, "web").state is ServiceState.PAUSED


def test_a_new_replica_count_is_not_converged_until_its_pass() -> None:
    """`healerctl reload && healerctl wait` must not return on the old count."""
    ctrl, _ = running()
    ctrl.set_desired(declared(spec("web", 3)))
    st = status(ctrl, "web")
    assert (st.state, st.desired) == (ServiceState.PROGRESSING, 3) and not is_converged(st)
    assert st.reason == "replicas changed from 1 to 3; pass pending"


def test_a_pass_on_the_old_replica_count_does_not_say_converged_after_the_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctrl, _ = running()
    while_a_pass_runs(ctrl, lambda: ctrl.set_desired(declared(spec("web", 3))), monkeypatch)
    st = status(ctrl, "web")
    assert (st.state, st.desired) == (ServiceState.PROGRESSING, 3) and not is_converged(st)
