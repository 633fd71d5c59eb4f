"""Faults the fault matrix found in the loop, reproduced without threads (see FAULTS.md)."""

from __future__ import annotations

import pytest

from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.wiring import build_loop
from healerd.engine import EngineError
from healerd.model import ContainerState, EngineAction, EngineEvent, ObservedContainer
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import FakeEngine
from tests.unit.harness.loop import desired, drive, make


def test_a_failed_replacement_keeps_the_dead_container_and_its_restart_count() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (c,) = engine.running("web")
    engine.kill(c.id, exit_code=1)
    engine.unstartable[c.id] = "network 9cb4 not found"  # only a new container heals it
    ctrl.on_event(EngineEvent("web", c.id, EngineAction.DIED))
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

    def broken(service: str | None = None) -> list[ObservedContainer]:
        raise EngineError("list containers: 500 Server Error: disk I/O error")

    monkeypatch.setattr(engine, "list_managed", broken)
    ctrl.reconcile_now("web")
    ctrl.process_once()
    st = {s.name: s for s in ctrl.statuses()}["web"]
    assert st.state == "EngineUnreachable"
    assert "disk I/O error" in st.reason


def test_a_paused_container_is_stopped_before_its_replacement_starts() -> None:
    # Paused, it still holds its fixed host port: the replacement could not bind it.
    from healerd.model import ContainerState, PortSpec

    ctrl, engine, clock = make()
    s = spec("edge", 1, ports=(PortSpec(8080, host_ip="127.0.0.1", host_port=18080),))
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    (c,) = engine.running("edge")
    engine.set(c.id, state=ContainerState.PAUSED)
    engine.calls.clear()
    ctrl.reconcile_now("edge")
    ctrl.process_once()
    # Stopped (the engine unpauses it first), then started again in place (issue 28).
    calls = [x for x in engine.calls if x in ("create", "remove", "stop", "start")]
    assert calls == ["stop", "start"] and engine.running("edge")[0].id == c.id


def test_containers_found_stopped_at_start_are_no_crash() -> None:
    # An engine restart (or a reboot) stopped them while healerd was not running: they
    # are started again in place at once (issue 14), keeping id, crash streak and count.
    from dataclasses import replace as dc_replace

    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (c,) = engine.running("web")
    engine.containers[c.id] = dc_replace(c, crash_streak=1)
    engine.kill(c.id, exit_code=0)
    # A new healerd on the same engine.
    fresh = build_loop(engine, clock, LoopSettings(workers=1, parallel_actions=1))
    fresh.set_desired(desired(spec("web", 1)))
    fresh.process_once()
    (new,) = engine.running("web")
    assert new.crash_streak == 1 and new.restarts == 0 and new.id == c.id
    assert "create" not in engine.calls[-3:]


def test_a_successful_pass_ends_the_error_backoff_so_hints_are_not_held_back() -> None:
    # Found by the chaos soak: after 18 failed creates (engine restarting) the service
    # healed, but its failure count stayed, and every later hint (health events, the
    # resync) was dropped behind a 10-minute progress-deadline timer.
    ctrl, engine, clock = make()
    engine.fail_creates = 5
    ctrl.set_desired(desired(spec("web", 1)))
    while not engine.running("web"):
        ctrl.process_once()
        clock.advance(ctrl.queue.next_delay() or 0.0)
    ctrl.process_once()  # the look after the create: not ready yet, a timer is pending
    assert "web" in ctrl.queue.pending()
    ctrl.on_event(EngineEvent("web", engine.running("web")[0].id, EngineAction.HEALTH))
    assert ctrl.process_once() == ["web"]


def _killed_and_replaced() -> tuple[
    Controller, FakeEngine, FakeClock, ObservedContainer, ObservedContainer
]:
    """One replica of "web", killed and replaced: (..., the old one as history, the new)."""
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (old,) = engine.running("web")
    engine.kill(old.id)
    engine.unstartable[old.id] = "network 9cb4 not found"  # replaced, not started in place
    ctrl.on_event(EngineEvent("web", old.id, EngineAction.DIED))
    drive(ctrl, clock, max_seconds=1)
    (new,) = engine.running("web")
    assert new.replaces == old.id
    return ctrl, engine, clock, old, new


def test_history_found_at_start_is_not_started_again_when_its_replacement_goes() -> None:
    # Found by the chaos soak: a killed container kept as history, healerd restarted, then
    # the replacement removed (`docker rm -f`): the old container is replaced again (on
    # its volumes), never started again in place.
    _ctrl, engine, clock, old, new = _killed_and_replaced()
    fresh = build_loop(engine, clock, LoopSettings(workers=1, parallel_actions=1))
    fresh.set_desired(desired(spec("web", 1)))
    fresh.process_once()
    del engine.containers[new.id]  # docker rm -f of the replacement
    fresh.reconcile_now("web")
    fresh.process_once()
    (newer,) = engine.running("web")
    assert newer.id not in (old.id, new.id) and newer.replaces == old.id
    assert engine.containers[old.id].state is not ContainerState.RUNNING


def test_history_whose_replacement_goes_during_an_engine_outage_is_not_started_again() -> None:
    # Found by the chaos soak (seed 845508): a killed container kept as history, its
    # replacement removed (`docker rm -f`) and the engine restarted: at the first look
    # after the outage the old one was no longer anyone's history and was started in
    # place as if the engine had stopped it.
    ctrl, engine, clock, old, new = _killed_and_replaced()
    engine.down = True
    del engine.containers[new.id]  # docker rm -f of the replacement, then the restart
    ctrl.enqueue_all()
    for _ in range(3):
        ctrl.process_once()
        clock.advance(ctrl.queue.next_delay() or 0.0)
    assert ctrl.engine_ok is False
    engine.down = False
    ctrl.queue.add("web", force=True)
    drive(ctrl, clock, max_seconds=1)
    (newer,) = engine.running("web")
    assert newer.id not in (old.id, new.id) and newer.replaces == old.id
    assert engine.containers[old.id].state is not ContainerState.RUNNING


def test_after_an_engine_restart_what_it_stopped_takes_the_slot_before_an_old_failure() -> None:
    # Found by the chaos soak (seed 845508): a failed container that had been history
    # (its replacement removed meanwhile) and a replica the engine's restart stopped: the
    # oldest-first order gave the slot to the failed one (a create) and removed the
    # stopped replica as "not needed". The stopped one is started in place instead.
    from dataclasses import replace as dc_replace

    from healerd.core.context import Recall, plan_context
    from healerd.core.planner import plan
    from healerd.model import ActionKind
    from tests.unit.harness.builders import container

    s = spec("checked", 1)
    failed = dc_replace(container(s, ContainerState.EXITED, created=100.0), exit_code=137)
    stopped = dc_replace(container(s, ContainerState.EXITED, created=200.0), exit_code=0)
    recall = Recall(
        dead_since={failed.id: 150.0, stopped.id: 300.0},
        forgiven=frozenset({failed.id, stopped.id}),
        engine_stopped=frozenset({stopped.id}),
    )
    ctx, _, _ = plan_context(s, [failed, stopped], 301.0, recall)
    actions = plan("checked", s, [failed, stopped], ctx).actions
    kinds = sorted((a.kind.value, a.container.id if a.container else "") for a in actions)
    assert kinds == sorted(
        [(ActionKind.START.value, stopped.id), (ActionKind.REMOVE.value, failed.id)]
    )


def test_a_container_started_in_place_and_then_killed_is_a_death_of_its_own() -> None:
    # Found by the chaos soak (seed 845508): healerd started a container in place after
    # an engine restart; `docker kill` came before any list saw it running, so it was
    # still remembered as stopped by the engine and started in place once more.
    from healerd.core.observe import Memory, note_event, observe
    from tests.unit.harness.builders import container

    s = spec("solo", 1)
    c = container(s, ContainerState.EXITED, created=100.0)
    mem = Memory()
    observe(mem, [c], 10.0, 1010.0, engine_back=True)
    assert c.id in mem.engine_stopped
    # healerd's start in place
    note_event(mem, EngineEvent("solo", c.id, EngineAction.STARTED), 10.5)
    note_event(mem, EngineEvent("solo", c.id, EngineAction.KILLED, signal=9), 11.0)
    note_event(mem, EngineEvent("solo", c.id, EngineAction.DIED, exit_code=137), 11.0)
    observe(mem, [c], 11.2, 1011.2)
    assert c.id not in mem.engine_stopped


def test_a_failed_container_of_another_spec_is_replaced_at_once_with_a_new_streak() -> None:
    # Found by the chaos soak (seed 655584): a container with the service's labels but
    # another spec hash, seen before it started, was replaced as a crash, so the current
    # spec's container began with crash streak 1. A config fix must not wait out the old
    # spec's backoff either.
    from dataclasses import replace as dc_replace

    from healerd.core.context import Recall, plan_context
    from healerd.core.planner import plan
    from healerd.model import ActionKind
    from tests.unit.harness.builders import container

    s = spec("edge", 1)
    old = dc_replace(
        container(s, ContainerState.EXITED, created=100.0, spec_hash="0" * 16), crash_streak=4
    )
    same = dc_replace(container(s, ContainerState.EXITED, created=100.0), crash_streak=4)
    recall = Recall(dead_since={old.id: 101.0, same.id: 101.0})
    ctx, _, _ = plan_context(s, [old], 102.0, recall)
    (create,) = [a for a in plan("edge", s, [old], ctx).actions if a.kind is ActionKind.CREATE]
    assert create.crash_streak == 0 and create.container == old  # its volumes still go over
    # The same death of a container of the current spec waits and carries the streak on.
    ctx, wake, _ = plan_context(s, [same], 102.0, recall)
    assert not [a for a in plan("edge", s, [same], ctx).actions if a.kind is ActionKind.CREATE]
    assert wake and min(wake) > 102.0


def test_project_networks_are_pruned_once_their_services_are_gone() -> None:
    from healerd.model import NetworkDecl

    ctrl, engine, clock = make()
    net = NetworkDecl("p_default", "p", "default")
    a = spec("a", 1, networks_to_create=(net,))
    b = spec("b", 1)
    ctrl.set_desired(desired(a, b))
    drive(ctrl, clock)
    assert engine.networks_kept == {"p_default"}
    ctrl.set_desired(desired(b, hold=True))  # a file is broken: nothing goes
    drive(ctrl, clock)
    assert engine.networks_kept == {"p_default"} and engine.running("a")
    ctrl.set_desired(desired(b))
    drive(ctrl, clock)
    assert not engine.running("a")
    assert engine.networks_kept == set()  # asked to remove p_default, after a's containers
    calls = engine.calls.count("prune_networks")
    ctrl.reconcile_now()
    drive(ctrl, clock)
    assert engine.calls.count("prune_networks") == calls  # nothing changed: no call
