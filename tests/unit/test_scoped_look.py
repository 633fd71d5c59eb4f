"""A lone key's pass lists its own service only (at 10 services of 100, a tenth of the
rows): what each layer keeps of the services that list did not show."""

from __future__ import annotations

import dataclasses

from healerd.core.admission import Claim
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller
from healerd.core.observe import Memory, observe
from healerd.core.signing import Unverified, sign
from healerd.core.timings import Timings
from healerd.engine.docker.listing import RowCache
from healerd.host import HostSample
from healerd.model import LABEL_SERVICE, ContainerState, Dependency, EngineAction, EngineEvent
from tests.unit.harness.builders import KEY, container, row, signed, spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine
from tests.unit.harness.loop import desired, drive, make
from tests.unit.harness.node import Gi, Mi, admission, host, loop
from tests.unit.harness.node import drive as node_drive


def _heal_one(name: str = "a") -> tuple[list[str | None], FakeEngine]:
    """Three converged services; one of `name`'s containers dies: the scopes of the
    list calls until all is converged again."""
    ctrl, engine, clock = make()
    ctrl.set_desired(
        desired(
            spec("a", 2),
            spec("b", 2),
            spec("c", 2, depends_on=(Dependency("b"),)),
        )
    )
    drive(ctrl, clock)
    engine.list_scopes.clear()
    victim = engine.running(name)[0]
    engine.kill(victim.id, exit_code=137)
    ctrl.on_event(EngineEvent(name, victim.id, EngineAction.DIED))
    drive(ctrl, clock)
    assert len(engine.running(name)) == 2
    ctrl.shutdown()
    return engine.list_scopes, engine


def test_a_lone_heal_lists_only_its_service() -> None:
    scopes, engine = _heal_one("a")
    assert scopes and set(scopes) == {"a"}
    assert engine.calls.count("create") >= 1


def test_a_service_that_reads_another_lists_everything() -> None:
    # c depends on b: its pass needs b's containers (ready? replaced since?).
    scopes, _ = _heal_one("c")
    assert scopes and set(scopes) == {None}


def test_the_first_look_a_resync_and_a_discovery_list_everything() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1)))
    ctrl.process_once()
    assert engine.list_scopes == [None]  # the first look (which a lone key began)
    drive(ctrl, clock)
    engine.list_scopes.clear()
    ctrl.enqueue_all()  # a and the discovery pass
    ctrl.process_once()
    assert engine.list_scopes == [None]
    ctrl.shutdown()


def test_a_scoped_look_is_never_reused_for_another_service() -> None:
    ctrl, _, clock = make()
    ctrl.set_desired(desired(spec("a", 1), spec("b", 1)))
    drive(ctrl, clock)
    ctrl.queue.add("a")
    ctrl.queue.add("b")
    clock.advance(0.1)
    assert ctrl.parts.looks.observe(["a"]) is not None
    assert ctrl.parts.looks.reused(["a"]) is not None  # a was queued before it began
    assert ctrl.parts.looks.reused(["b"]) is None
    assert ctrl.parts.looks.reused(["a", "b"]) is None
    ctrl.shutdown()


def test_readers_are_not_shown_a_look_at_one_service() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1), spec("b", 1)))
    drive(ctrl, clock)
    clock.advance(5)  # the last full look is too old for readers
    assert ctrl.parts.looks.observe(["a"]) is not None
    engine.list_scopes.clear()
    assert {c.service for c in ctrl.container_statuses()} == {"a", "b"}
    assert engine.list_scopes == [None]  # a list of their own, not a's
    ctrl.shutdown()


def test_observe_scoped_keeps_the_other_services_memory() -> None:
    a, b = spec("a", 1), spec("b", 1)
    a1, b1 = container(a), container(b, ContainerState.EXITED)
    b2 = dataclasses.replace(container(b), replaces=b1.id)
    mem = Memory()
    observe(mem, [a1, b1, b2], 10.0, 1000.0, engine_back=True)
    assert b1.id in mem.dead_since and b1.id in mem.forgiven and b1.id in mem.history
    gone = {b1.id: mem.dead_since[b1.id]}
    observe(mem, [a1], 11.0, 1001.0, scoped=True)
    assert {b1.id: mem.dead_since[b1.id]} == gone
    assert b1.id in mem.forgiven and b1.id in mem.history and b1.id in mem.first_seen
    # A full list prunes what it no longer shows.
    observe(mem, [a1], 12.0, 1002.0)
    assert b1.id not in mem.dead_since and b1.id not in mem.history
    assert b1.id not in mem.forgiven and b1.id not in mem.first_seen


def test_row_cache_scoped_keeps_the_other_services_rows() -> None:
    cache = RowCache()
    other = row("b", Labels={LABEL_SERVICE: "other"})
    first = cache.parse([row("a"), other])
    cache.parse([row("a")], "web")
    again = cache.parse([row("a"), other])
    assert again[0] is first[0] and again[1] is first[1]
    cache.parse([], "web")  # web's container is gone: the cache drops it
    assert cache.parse([row("a"), other])[0] is not first[0]


def test_signed_engine_scoped_keeps_the_other_services_unverified() -> None:
    engine = FakeEngine(FakeClock(), allow=LOOP_CALLS)
    told: list[Unverified] = []
    signer = sign(engine, KEY, lambda: KEY.born + 10, told.append)
    a, b = spec("a", 1), spec("b", 1)
    young = KEY.born + 5  # made after the key: only a signature makes them healerd's
    forged_a = dataclasses.replace(container(a, created=young), name="a-forged")
    forged_b = dataclasses.replace(container(b, created=young), name="b-forged")
    good = signed(container(a, created=young))
    for c in (forged_a, forged_b, good):
        engine.containers[c.id] = c
    assert [c.id for c in engine.list_managed()] == [good.id]
    del engine.containers[forged_a.id]
    assert [c.id for c in engine.list_managed("a")] == [good.id]
    assert [u.name for u in signer.unverified()] == ["b-forged"]
    assert sorted(u.name for u in told) == ["a-forged", "b-forged"]  # each told once


def test_claims_from_a_scoped_look_replace_only_that_service() -> None:
    adm, _, _ = admission(HostSample())
    adm.set_claims({"a": Claim(0, 1, 10), "b": Claim(5, 2, 10)})
    adm.set_claims({}, only="a")  # a is whole again; b's claim stands
    assert adm._claims == {"b": Claim(5, 2, 10)}
    adm.set_claims({"b": Claim(5, 1, 10), "c": Claim(1, 1, 1)}, only="b")
    assert adm._claims == {"b": Claim(5, 1, 10)}  # c's is not b's look to say


def _both_killed(mem_avail: int) -> tuple[FakeEngine, Controller]:
    """cache (priority 0) and db (priority 10), 64 MiB a container, both killed; then
    cache's lone pass with `mem_avail` on the host (its threshold is 100 MiB)."""
    ctrl, engine, clock, probe = loop(host(), container_memory=64 * Mi)
    ctrl.set_desired(desired(spec("cache", 1), spec("db", 1, priority=10)))
    node_drive(ctrl, clock, 10)
    probe.host = host(mem_avail=mem_avail)
    clock.advance(Timings().host_sample_ttl)
    for c in engine.running("cache") + engine.running("db"):
        engine.kill(c.id)
    engine.list_scopes.clear()
    ctrl.queue.add("cache")
    ctrl.process_once()
    return engine, ctrl


def test_with_little_room_a_lone_low_priority_pass_looks_at_everything() -> None:
    # Room for one: db's claim must be seen (in the full look), so cache waits.
    engine, ctrl = _both_killed(200 * Mi)
    assert engine.list_scopes == [None]
    assert engine.running("cache") == []
    ctrl.shutdown()


def test_with_room_for_all_a_lone_low_priority_pass_lists_its_own() -> None:
    engine, ctrl = _both_killed(4 * Gi)
    assert engine.list_scopes == ["cache"]
    assert len(engine.running("cache")) == 1
    ctrl.shutdown()


def test_a_lone_look_that_finds_the_engine_back_is_a_full_first_look() -> None:
    # The engine restarted (every container stopped) while only a was retrying.
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1), spec("b", 1)))
    drive(ctrl, clock)
    engine.down = True
    before = set(engine.containers)
    for cid in before:
        engine.kill(cid)
    ctrl.queue.add("a")
    ctrl.process_once()
    assert ctrl.engine_ok is False
    engine.down = False
    engine.calls.clear()
    clock.advance(ctrl.queue.next_delay() or 0.0)
    drive(ctrl, clock, max_seconds=1.0)
    # b's stopped container is no crash either: started in place, not replaced.
    assert {c.id for c in engine.running("a") + engine.running("b")} == before
    assert "create" not in engine.calls
    ctrl.shutdown()
