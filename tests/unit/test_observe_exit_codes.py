"""How the run healerd stopped ended: an unhealthy container restarted in place says its
exit code, whichever order its `die`, its `start` and the pass's note come in."""

from __future__ import annotations

from healerd.core.observe import Memory, note_event, note_started, observe
from healerd.core.planner import IN_PLACE
from healerd.model import Action, ActionKind, EngineAction, EngineEvent, ObservedContainer
from tests.unit.harness.builders import container, spec


def _restart(mem: Memory, row: ObservedContainer) -> None:
    a = Action(ActionKind.START, "web", IN_PLACE + "unhealthy past its grace", container=row)
    note_started(mem, a, mono=20.0, wall=1_700_000_020.0)


def test_the_stopped_runs_code_survives_the_start_event_before_the_note() -> None:
    """CI: `healerctl logs --previous` said "unhealthy past its grace" without "exit
    code 3": the start event of healerd's own restart came before the pass noted it,
    and had dropped the death's code."""
    row = container(spec("web", 1))  # listed running (unhealthy): no exit code
    mem = Memory(first_seen={row.id: 1.0})
    note_event(mem, EngineEvent("web", row.id, EngineAction.DIED, exit_code=3), 10.0)
    note_event(mem, EngineEvent("web", row.id, EngineAction.STARTED), 10.1)
    _restart(mem, row)
    last = mem.runs[row.id].last
    assert last is not None and last.exit_code == 3
    assert row.id not in mem.exit_codes, "a code is used by one note only"


def test_the_code_is_the_died_ones_when_the_note_comes_first() -> None:
    row = container(spec("web", 1))
    mem = Memory(first_seen={row.id: 1.0})
    note_event(mem, EngineEvent("web", row.id, EngineAction.DIED, exit_code=3), 10.0)
    _restart(mem, row)
    last = mem.runs[row.id].last
    assert last is not None and last.exit_code == 3


def test_a_list_that_shows_a_start_in_place_before_its_end_keeps_the_death_time() -> None:
    """CI, 20 replicas killed at once: a pass listed one container running while its
    start's answer was still on its way, and dropped when it died; the start's end found
    no death, and the heal went uncounted (no heal notice, no latency sample)."""

    row = container(spec("web", 1))
    mem = Memory(first_seen={row.id: 1.0}, dead_since={row.id: 10.0}, starting={row.id: 10.2})
    observe(mem, [row], 10.3, 1_700_000_010.3)  # the engine has started it: running
    assert mem.dead_since.get(row.id) == 10.0
    _restart(mem, row)  # the start's end: the death is read, then forgotten
    assert row.id not in mem.dead_since
    mem.starting.clear()
    mem.dead_since[row.id] = 30.0
    observe(mem, [row], 31.0, 1_700_000_031.0)  # no start on its way: running again
    assert row.id not in mem.dead_since
