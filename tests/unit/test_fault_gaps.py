"""Faults the fault matrix found in the loop, reproduced without threads (see FAULTS.md)."""

from __future__ import annotations

import pytest

from healerd.engine import EngineError
from healerd.model import EngineEvent, ObservedContainer
from tests.unit.builders import spec
from tests.unit.test_controller import desired, drive, make


def test_a_failed_replacement_keeps_the_dead_container_and_its_restart_count() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (c,) = engine.running("web")
    engine.kill(c.id, exit_code=1)
    ctrl.on_event(EngineEvent("web", c.id, "die"))
    engine.fail_creates = 1
    ctrl.process_once()  # the replacement's create fails
    drive(ctrl, clock, max_seconds=30)
    (new,) = engine.running("web")
    assert new.restarts == 1, "the replacement carries the restart count on"


def test_a_failing_list_call_puts_the_engines_error_in_the_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)

    def broken() -> list[ObservedContainer]:
        raise EngineError("list containers: 500 Server Error: disk I/O error")

    monkeypatch.setattr(engine, "list_managed", broken)
    ctrl.reconcile_now("web")
    ctrl.process_once()
    st = {s.name: s for s in ctrl.statuses()}["web"]
    assert st.state == "EngineUnreachable"
    assert "disk I/O error" in st.reason
