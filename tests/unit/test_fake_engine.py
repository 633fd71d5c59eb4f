"""The FakeEngine refuses calls a test did not allow, even when the loop swallows the
error: tests/conftest.py then fails the test."""

from __future__ import annotations

import pytest

from healerd.config import DesiredState
from healerd.core.clock import FakeClock
from healerd.core.controller import LoopSettings
from healerd.core.wiring import build_loop
from healerd.model import PullPolicy, ServiceSpec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine, new_refusals


def test_a_call_outside_the_allowed_set_raises_and_is_recorded() -> None:
    engine = FakeEngine(FakeClock(), allow={"list"})
    with pytest.raises(AssertionError, match="must not be called"):
        engine.pull("img:1")
    assert engine.refused and new_refusals()  # taken here, so this test itself passes


def test_a_refusal_the_loop_swallowed_is_still_seen() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS)  # no pull allowed
    engine.pullable.add("img:1")
    ctrl = build_loop(engine, clock, LoopSettings(workers=1, parallel_actions=1))
    spec = ServiceSpec(name="web", image="img:1", pull_policy=PullPolicy.ALWAYS)
    try:
        ctrl.set_desired(DesiredState({"web": spec}, (), hold_orphans=False, broken_files=()))
        ctrl.process_once()  # the pass catches the AssertionError of the refused pull
    finally:
        ctrl.shutdown()
    assert "pull" in " ".join(engine.refused)
    assert new_refusals()  # consumed: without this, tests/conftest.py fails the test


def test_an_unknown_call_name_is_a_typo() -> None:
    with pytest.raises(ValueError):
        FakeEngine(allow={"lsit"})
