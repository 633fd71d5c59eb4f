"""Lifecycle hooks at run time (issue 33, point 5), on the fake engine: post_start after
healerd's starts (once reported), pre_stop before its stops and removes of a running
container (never for a crash), both told when they fail, neither holding anything
back; pre_update before an update."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from healerd.core.clock import FakeClock
from healerd.core.controller import Controller
from healerd.core.events import EventLog
from healerd.core.hooks import Hooks, pre_stop_bound, pre_update
from healerd.engine import HookRun
from healerd.model import (
    HOOK_TIMEOUT,
    ContainerState,
    EngineAction,
    EngineEvent,
    Hook,
    ServiceSpec,
)
from tests.unit.harness.builders import container, spec
from tests.unit.harness.fake_engine import FakeEngine
from tests.unit.harness.loop import desired, drive, make

WARM, DRAIN = Hook(("warm",)), Hook(("drain", "--now"))


def _kinds(ctrl: Controller, service: str = "web") -> list[str]:
    return [e.kind.value for e in ctrl.events.since(0) if e.service == service]


def _die(ctrl: Controller, engine: FakeEngine, cid: str) -> None:
    c = engine.containers[cid]
    engine.kill(cid, exit_code=1)
    ctrl.on_event(EngineEvent(c.service, cid, EngineAction.DIED, exit_code=1, name=c.name))


def test_post_start_runs_after_a_create_and_a_start_in_place_were_reported() -> None:
    ctrl, engine, clock = make()
    seen: list[tuple[str, list[str]]] = []
    engine.on_hook = lambda cid, hook: seen.append((cid, _kinds(ctrl)))
    ctrl.set_desired(desired(spec("web", post_start=(WARM,), pre_stop=(DRAIN,))))
    drive(ctrl, clock)
    (cid,) = engine.containers
    assert seen == [(cid, ["created"])]  # the create was told before the hook ran
    _die(ctrl, engine, cid)
    drive(ctrl, clock)
    assert engine.containers[cid].running
    assert seen[1] == (cid, ["created", "restarted"])
    # No pre_stop for a container that died by itself; post_start within its bound.
    assert [(c, h) for c, h, _ in engine.hooks_run] == [(cid, WARM)] * 2
    assert [t for _, _, t in engine.hooks_run] == [pytest.approx(HOOK_TIMEOUT, abs=1.0)] * 2


def test_pre_stop_runs_before_a_scale_down_and_a_rollout_removes_a_container() -> None:
    ctrl, engine, clock = make()
    web = spec("web", 2, pre_stop=(DRAIN,), stop_grace_period=7.0)
    ctrl.set_desired(desired(web))
    drive(ctrl, clock)
    assert engine.hooks_run == []
    engine.calls.clear()
    ctrl.set_desired(desired(dataclasses.replace(web, replicas=1)))
    drive(ctrl, clock)
    assert engine.calls.index("exec_hook") < engine.calls.index("remove")
    ((gone, hook, bound),) = engine.hooks_run
    assert gone not in engine.containers and hook == DRAIN
    assert bound == pytest.approx(7.0, abs=0.5)  # the service's stop_grace_period
    (kept,) = engine.containers
    ctrl.set_desired(desired(dataclasses.replace(web, replicas=1, environment=(("V", "2"),))))
    drive(ctrl, clock)
    assert kept not in engine.containers
    assert [c for c, _, _ in engine.hooks_run] == [gone, kept]
    assert "hook-failed" not in _kinds(ctrl)


def test_a_pre_stop_that_fails_or_passes_its_time_is_told_masked_and_the_stop_goes_on() -> None:
    ctrl, engine, clock = make()
    web = spec(
        "web",
        2,
        environment=(("DB_PASSWORD", "s3cret-value"),),
        pre_stop=(dataclasses.replace(DRAIN, environment=(("TOKEN", "hook-token"),)), WARM),
    )
    engine.hook_answers["drain"] = HookRun(None, "draining with s3cret-value hook-token")
    ctrl.set_desired(desired(web))
    drive(ctrl, clock)
    ctrl.set_desired(desired(dataclasses.replace(web, replicas=1)))
    drive(ctrl, clock)
    assert len(engine.containers) == 1  # removed all the same
    assert [h for _, h, _ in engine.hooks_run] == [web.pre_stop[0]]  # not the second one
    (event,) = [e for e in ctrl.events.since(0) if e.kind == "hook-failed"]
    assert event.message == (
        "pre_stop[0] passed its 10s and was left running; output: draining with "
        "[DB_PASSWORD] [TOKEN]; the stop goes on"
    )
    engine.hook_answers["drain"] = HookRun(3, "no\nupstream")
    ctrl.set_desired(desired(dataclasses.replace(web, replicas=0)))
    drive(ctrl, clock)
    assert engine.containers == {}
    messages = [e.message for e in ctrl.events.since(0) if e.kind == "hook-failed"]
    assert messages[-1] == "pre_stop[0] exited with code 3; output: no\nupstream; the stop goes on"


def test_a_failing_post_start_is_told_and_the_container_keeps_running() -> None:
    ctrl, engine, clock = make()
    engine.hook_answers["warm"] = HookRun(2, "cache cold")
    ctrl.set_desired(desired(spec("web", post_start=(WARM, DRAIN))))
    drive(ctrl, clock)
    (c,) = engine.containers.values()
    assert c.running and [h for _, h, _ in engine.hooks_run] == [WARM]
    (event,) = [e for e in ctrl.events.since(0) if e.kind == "hook-failed"]
    assert event.message == (
        "post_start[0] exited with code 2; output: cache cold; the container keeps running"
    )
    assert event.container == c.name
    assert _kinds(ctrl).count("created") == 1  # nothing more was done about it


def test_pre_stop_is_not_run_in_a_container_that_is_not_running() -> None:
    ctrl, engine, clock = make()
    web = spec("web", 2, pre_stop=(DRAIN,))
    ctrl.set_desired(desired(web))
    drive(ctrl, clock)
    engine.pause(sorted(engine.containers)[0])
    ctrl.set_desired(desired(dataclasses.replace(web, replicas=0)))
    drive(ctrl, clock)
    assert engine.containers == {}
    assert len(engine.hooks_run) == 1  # the running one's only


def test_the_pre_stop_bound_is_the_stop_grace_period_with_a_floor() -> None:
    assert pre_stop_bound(spec(stop_grace_period=30.0)) == 30.0
    assert pre_stop_bound(spec(stop_grace_period=0.0)) == 1.0


def _update_engine() -> FakeEngine:
    return FakeEngine(allow={"exec_hook"})


def test_pre_update_runs_in_the_oldest_running_container() -> None:
    engine = _update_engine()
    web = spec("web", 3, pre_update=(Hook(("backup",)),))
    old, older, stopped = (
        container(web, created=20.0),
        container(web, created=10.0),
        container(web, ContainerState.EXITED, created=1.0),
    )
    engine.containers = {c.id: c for c in (old, older, stopped)}
    assert pre_update(engine, web, [old, older, stopped]).ok
    assert [c for c, _, _ in engine.hooks_run] == [older.id]
    assert engine.hooks_run[0][2] == pytest.approx(HOOK_TIMEOUT, abs=1.0)
    assert pre_update(engine, spec("web"), [old]).ok  # none declared: nothing run
    assert len(engine.hooks_run) == 1


def test_a_failing_pre_update_postpones_with_its_reason() -> None:
    engine = _update_engine()
    events = EventLog(FakeClock())
    web = spec("web", pre_update=(Hook(("backup",)),), environment=(("KEY", "abcdefgh"),))
    c = container(web)
    engine.containers = {c.id: c}
    engine.hook_answers["backup"] = HookRun(1, "disk full writing abcdefgh")
    answer = pre_update(engine, web, [c], events)
    assert not answer.ok and answer.container == c.name
    assert answer.reason == "pre_update[0] exited with code 1; output: disk full writing [KEY]"
    (event,) = events.since(0)
    assert event.kind == "hook-failed" and event.message.endswith(
        "the update waits for the next check"
    )
    stopped = dataclasses.replace(c, state=ContainerState.EXITED)
    none = pre_update(engine, web, [stopped])
    assert none.ok, "nothing runs to ask (a crash loop): the update is not held for it"


def test_pre_update_of_a_container_the_engine_refuses_is_not_ok() -> None:
    engine = _update_engine()
    web: ServiceSpec = spec("web", pre_update=(Hook(("backup",)),))
    c = container(web)  # listed running, gone from the engine since
    answer = pre_update(engine, web, [c])
    assert not answer.ok and "could not run" in answer.reason


def test_a_post_start_under_way_holds_neither_the_caller_nor_the_exit() -> None:
    engine = _update_engine()
    web = spec("web", post_start=(WARM,))
    c = container(web)
    engine.containers = {c.id: c}
    began, release = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []

    def hold(cid: str, hook: Hook) -> None:
        threads.append(threading.current_thread())
        began.set()
        release.wait(10)

    engine.on_hook = hold
    hooks = Hooks(engine, parallel=1)
    hooks.post_start(web, c.id, c.name)  # returns at once
    assert began.wait(5)
    assert threads[0].daemon  # the interpreter's exit does not join it
    hooks.shutdown()  # returns while the hook still runs
    release.set()
    hooks.drain(5)
    assert len(engine.hooks_run) == 1
