"""The pass as a value (issue 30, point 1): the Reconciler reads a snapshot of the loop's
memory and returns its changes as a MemoryDelta, which the loop's owner of the memory
applies under its own lock; no lock and no None collaborator is handed to it; a pass
plans once, even when a failed digest's rollback moves the pin (point 2)."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from healerd.config import DesiredState
from healerd.core import planner
from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.memdelta import MemoryDelta, Recorder, apply, snapshot
from healerd.core.observe import Memory, as_dead
from healerd.core.reconcile import Reconciler
from healerd.core.runs import NoRunBook
from healerd.core.timings import Timings
from healerd.core.updates import pinned_ref
from healerd.core.wiring import build_loop
from healerd.model import (
    ContainerState,
    EngineAction,
    EngineEvent,
    ServiceSpec,
    UpdateConfig,
    UpdateOrder,
)
from healerd.vocabulary import AutoUpdate
from tests.unit.harness.builders import container, spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine

TAG = "reg.local:5000/app:stable"
V1, V3 = (f"sha256:{c * 64}" for c in "13")


def _desired(*specs: ServiceSpec) -> DesiredState:
    services = {s.name: s for s in specs}
    return DesiredState(services=services, errors=(), hold_orphans=False, broken_files=())


def _drive(ctrl: Controller, clock: FakeClock, max_seconds: float = 120.0) -> None:
    start = clock.monotonic()
    for _ in range(10_000):
        if ctrl.process_once():
            continue
        delay = ctrl.queue.next_delay()
        if delay is None or clock.monotonic() + delay - start > max_seconds:
            return
        clock.advance(delay)


def test_the_reconciler_takes_no_lock_and_no_optional_collaborator() -> None:
    params = inspect.signature(Reconciler.__init__).parameters.values()
    annotations = {p.name: str(p.annotation) for p in params if p.name != "self"}
    optional = [n for n, a in annotations.items() if a.endswith("None") or a.startswith("None")]
    assert not optional, annotations
    assert not [n for n, a in annotations.items() if "Lock" in a], annotations


def test_a_pass_changes_the_loops_memory_only_when_its_delta_is_applied() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS)
    ctrl = build_loop(engine, clock, LoopSettings(workers=1))
    web = spec("web", 1)
    ctrl.set_desired(_desired(web))
    _drive(ctrl, clock)
    (cid,) = engine.containers
    ctrl.on_event(EngineEvent("web", cid, EngineAction.DIED, exit_code=3))
    obs = ctrl.parts.looks.observe(["web"])
    assert obs is not None
    memory = ctrl.parts.memory.snapshot("web", [c.id for c in obs.of("web")])
    _, delta = ctrl.parts.reconciler.reconcile("web", obs, memory)
    # The pass saw the death (its snapshot) and planned a start in place: the loop's
    # memory does not say so, and the start is not handed over, until the delta is applied.
    assert cid in memory.starting and cid not in ctrl.parts.memory.mem.starting
    assert "start" not in engine.calls
    ctrl.parts.reconciler.share(delta)
    ctrl.parts.executor.drain()
    assert "start" in engine.calls
    assert ctrl.parts.memory.mem.runs[cid].restarts == 1, (
        "the start's end came back through the owner"
    )


def test_a_replayed_step_keeps_what_came_meanwhile() -> None:
    """A pass's steps are replayed on the shared memory: a death an event told of
    after the pass's snapshot is not dropped by the pass's expiry of the older one."""
    row = container(spec("web", 1))
    shared = Memory(died={row.id: (0.0, 1)})
    rec = Recorder(snapshot(shared, "web", [row.id]))
    assert rec.do(lambda m: as_dead(m, row, 100.0, 5.0)) == row  # expired: running
    assert row.id not in rec.memory.died
    shared.died[row.id] = (99.0, 137)  # a new death meanwhile
    lock = threading.Lock()
    seen: list[bool] = []
    rec.then(lambda: seen.append(lock.locked()))
    apply(lock, shared, NoRunBook(), rec.delta())
    assert shared.died[row.id] == (99.0, 137)
    assert seen == [False], "`then` runs after the steps, outside the lock"


def test_a_snapshot_holds_the_service_entries_only() -> None:
    web, db = container(spec("web", 1)), container(spec("db", 1))
    mem = Memory(dead_since={web.id: 1.0, db.id: 2.0}, suspects={"db": {db.id: 1.0}})
    mem.start_rows["c-late"] = container(spec("web", 1), ContainerState.EXITED)
    mem.starting["c-late"] = 3.0
    part = snapshot(mem, "web", [web.id])
    assert (part.dead_since, part.suspects, set(part.starting)) == ({web.id: 1.0}, {}, {"c-late"})
    part.dead_since.clear()
    assert mem.dead_since == {web.id: 1.0, db.id: 2.0}, "a copy"
    apply(threading.Lock(), mem, NoRunBook(), MemoryDelta())


@contextmanager
def _plans_per_pass(ctrl: Controller, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    counts: list[int] = []
    made = planner._Planning.__init__
    reconcile = ctrl.parts.reconciler.reconcile

    def counted(self: planner._Planning, *args: object, **kw: object) -> None:
        counts[-1] += 1
        made(self, *args, **kw)  # type: ignore[arg-type]

    def one_pass(*args: object) -> object:
        counts.append(0)
        return reconcile(*args)  # type: ignore[arg-type]

    with monkeypatch.context() as m:
        m.setattr(planner._Planning, "__init__", counted)
        m.setattr(ctrl.parts.reconciler, "reconcile", one_pass)
        yield counts


def test_a_pass_plans_once_when_a_rollback_moves_the_pin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"pull", "registry_digest", "local_digests"})
    engine.registry[TAG] = V1
    engine.repo_digests[TAG] = (f"reg.local:5000/app@{V1}",)
    engine.pullable = {f"reg.local:5000/app@{d}" for d in (V1, V3)}
    timings = Timings(backoff=Backoff(0.5, 8.0), pull_backoff=Backoff(2.0, 8.0))
    ctrl = build_loop(engine, clock, LoopSettings(workers=2, timings=timings))
    update = UpdateConfig(order=UpdateOrder.START_FIRST, progress_deadline=60.0)
    app = spec("app", 2, TAG, auto_update=AutoUpdate.REGISTRY, update_config=update)
    ctrl.set_desired(_desired(app))
    _drive(ctrl, clock)
    engine.crash_images.add(pinned_ref(TAG, V3))
    engine.registry[TAG] = V3
    assert ctrl.check_updates() == ["app"]
    with _plans_per_pass(ctrl, monkeypatch) as plans:
        _drive(ctrl, clock)
    assert any(e.kind == "image-rollback" for e in ctrl.events.since(0))
    assert plans and set(plans) == {1}, plans
