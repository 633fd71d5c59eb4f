"""The executor's order (healerd.core.executor.Executor.apply): stops first, and nothing
takes the place of a container whose stop failed, for it still runs on its anonymous
volumes and holds its ports."""

from __future__ import annotations

from healerd.core.clock import FakeClock
from healerd.core.echoes import OwnActions
from healerd.core.executor import Executor
from healerd.core.planner import PlanContext, plan
from healerd.engine import EngineError, NameConflict
from healerd.model import ActionKind, ObservedContainer
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine


class StuckStop(FakeEngine):
    """A process in D state: `cannot stop container` (Docker's words)."""

    stuck: frozenset[str] = frozenset()

    def stop(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        if container.id in self.stuck:
            self.calls.append("stop")
            raise EngineError(
                f"stop {container.name}: cannot stop container: tried to kill container, "
                "but did not receive an exit event"
            )
        super().stop(container, stop_timeout)


def test_a_replacement_waits_for_the_stop_of_the_container_whose_volumes_it_takes() -> None:
    """Review: the create ran after a failed stop, on the volume the old container still
    wrote to: two processes on one data directory."""
    clock = FakeClock()
    engine = StuckStop(clock, allow=LOOP_CALLS)
    engine.image_volumes = True  # VOLUME /data: a rollout of it is stop-first
    ex = Executor(engine, 4)
    (made,) = ex.apply(plan("db", spec("db", 1), [], PlanContext(now=clock.time())).actions)
    old = engine.containers[made.container_id or ""]
    engine.stuck = frozenset({old.id})
    p = plan("db", spec("db", 1, image="img:2"), [old], PlanContext(now=clock.time() + 100))
    assert [a.kind for a in p.actions] == [ActionKind.STOP, ActionKind.CREATE, ActionKind.REMOVE]
    engine.calls.clear()
    results = ex.apply(p.actions)
    assert engine.calls == ["stop"], "neither created on its volume nor removed"
    assert set(engine.containers) == {old.id} and engine.containers[old.id].running
    errors = [r.error for r in results if not r.ok]
    assert len(errors) == 2 and f"not done: the stop of {old.name} failed" in str(errors[1])
    # Stopped at the next try: the replacement takes the volume over.
    engine.stuck = frozenset()
    results = ex.apply(p.actions)
    assert all(r.ok for r in results)
    (new,) = [c for c in engine.containers.values() if c.id != old.id]
    assert new.running and new.anon_volumes == old.anon_volumes
    assert old.id not in engine.containers


class TakenOnce(FakeEngine):
    """The generated name another container has (a name digit collision)."""

    taken = 1

    def create_and_start(self, spec, name, labels, inherit=()):  # type: ignore[no-untyped-def]
        if self.taken:
            self.taken -= 1
            raise NameConflict(f"name {name} is taken")
        return super().create_and_start(spec, name, labels, inherit)


def test_a_name_another_container_has_is_not_taken_for_one_on_its_way() -> None:
    """Review: after a NameConflict the name stayed announced as being created, so the
    other container of that name counted as this healerd's, on its way to start."""
    clock = FakeClock()
    engine, own = TakenOnce(clock, allow=LOOP_CALLS), OwnActions(clock)
    ex = Executor(engine, 4, own=own)
    (made,) = ex.apply(plan("db", spec("db", 1), [], PlanContext(now=clock.time())).actions)
    assert made.ok and engine.taken == 0
    assert own.creating_names() == {made.container_name}
