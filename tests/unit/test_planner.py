"""The planner is pure: these tests build inputs and assert on the actions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from healerd.core.planner import plan
from healerd.model import ActionKind, ContainerState, ObservedContainer, PortSpec
from tests.unit.builders import container, spec

RUNNING = ContainerState.RUNNING
EXITED = ContainerState.EXITED


def kinds(p_actions: object) -> list[str]:
    return [a.kind.value for a in p_actions]  # type: ignore[attr-defined]


def removed(p) -> set[str]:  # type: ignore[no-untyped-def]
    return {a.container.id for a in p.actions if a.kind is ActionKind.REMOVE}


def test_converged_service_needs_nothing() -> None:
    s = spec(replicas=2)
    p = plan("web", s, [container(s), container(s)])
    assert p.actions == () and p.converged


def test_too_few_running_creates_the_difference() -> None:
    s = spec(replicas=3)
    p = plan("web", s, [container(s)])
    assert kinds(p.actions) == ["create", "create"]
    assert all(a.spec == s for a in p.actions)
    assert not p.converged and p.heals == 0


def test_zero_replicas_removes_everything() -> None:
    s = spec(replicas=0)
    cs = [container(s), container(s, EXITED)]
    p = plan("web", s, cs)
    assert removed(p) == {c.id for c in cs}
    assert p.creates == 0


def test_too_many_removes_newest_first() -> None:
    s = spec(replicas=1)
    old, mid, new = container(s, created=1), container(s, created=2), container(s, created=3)
    p = plan("web", s, [new, old, mid])
    assert removed(p) == {new.id, mid.id}


def test_scale_down_removes_not_running_before_running() -> None:
    s = spec(replicas=2)
    a, b = container(s, created=1), container(s, created=2)
    dead = container(s, EXITED, created=0)
    p = plan("web", s, [a, b, dead])
    assert removed(p) == {dead.id}
    assert p.creates == 0


def test_stopped_containers_are_replaced_and_removed() -> None:
    s = spec(replicas=2)
    ok = container(s)
    for state in (EXITED, ContainerState.DEAD, ContainerState.CREATED, ContainerState.PAUSED):
        bad = container(s, state)
        p = plan("web", s, [ok, bad])
        assert p.creates == 1 and removed(p) == {bad.id}, state
        assert p.heals == 1


def test_removed_container_is_recreated_without_counting_as_heal() -> None:
    s = spec(replicas=2)
    p = plan("web", s, [container(s)])
    assert p.creates == 1 and p.heals == 0


def test_crash_backoff_holds_replacements_and_keeps_dead_ones() -> None:
    s = spec(replicas=2)
    dead = container(s, EXITED)
    p = plan("web", s, [dead], allow_heal=False)
    # One is missing without trace (created fresh), one is dead (held back).
    assert p.creates == 1 and p.heals_held == 1 and removed(p) == set()
    assert not p.converged


def test_stale_hash_is_replaced_start_first_one_at_a_time() -> None:
    s = spec(replicas=2)
    old1 = container(s, spec_hash="old", created=1)
    old2 = container(s, spec_hash="old", created=2)
    p = plan("web", s, [old1, old2])
    assert kinds(p.actions) == ["create"]
    new = container(s, created=3)
    p2 = plan("web", s, [old1, old2, new])
    assert removed(p2) == {old1.id} and p2.creates == 0
    p3 = plan("web", s, [old2, new])
    assert kinds(p3.actions) == ["create"]
    p4 = plan("web", s, [old2, new, container(s, created=4)])
    assert removed(p4) == {old2.id}


def test_fixed_host_port_replaces_stop_first() -> None:
    s = spec(replicas=1, ports=(PortSpec(container_port=80, host_port=8080),))
    old = container(s, spec_hash="old")
    p = plan("web", s, [old])
    assert kinds(p.actions) == ["remove"] and removed(p) == {old.id}
    p2 = plan("web", s, [])
    assert kinds(p2.actions) == ["create"]


def test_missing_replicas_with_stale_ones_create_current_spec() -> None:
    s = spec(replicas=3)
    p = plan("web", s, [container(s, spec_hash="old")])
    assert p.creates == 2 and all(a.spec == s for a in p.actions)


def test_undeclared_service_is_removed() -> None:
    s = spec()
    cs = [container(s), container(s, EXITED)]
    p = plan("web", None, cs)
    assert removed(p) == {c.id for c in cs}


def test_undeclared_service_is_held_while_a_config_file_is_broken() -> None:
    s = spec()
    p = plan("web", None, [container(s)], hold_orphans=True)
    assert p.actions == () and not p.converged and "broken" in p.note


def test_other_services_containers_are_never_touched() -> None:
    web, db = spec("web", replicas=0), spec("db")
    other = container(db)
    p = plan("web", web, [other])
    assert p.actions == () and p.converged
    assert plan("web", None, [other]).actions == ()


# -- properties ----------------------------------------------------------------

STATES = list(ContainerState)


@st.composite
def scenario(draw):  # type: ignore[no-untyped-def]
    replicas = draw(st.integers(0, 8))
    fixed_port = draw(st.booleans()) and replicas <= 1
    ports = (PortSpec(container_port=80, host_port=8080),) if fixed_port else ()
    s = spec(replicas=replicas, ports=ports)
    n = draw(st.integers(0, 12))
    cs = [
        container(
            s,
            draw(st.sampled_from(STATES)),
            created=float(draw(st.integers(0, 50))),
            spec_hash=draw(st.sampled_from([s.spec_hash, "old1", "old2"])),
        )
        for _ in range(n)
    ]
    declared = draw(st.booleans())
    return s if declared else None, cs, draw(st.booleans()), draw(st.booleans())


def simulate(s, cs: list[ObservedContainer], allow: bool, hold: bool):  # type: ignore[no-untyped-def]
    """Apply plans as a perfect engine would until nothing is left to do."""
    created = 0
    for step in range(60):
        p = plan("web", s, cs, allow_heal=allow, hold_orphans=hold)
        if not p.actions:
            return cs, created, step
        gone = removed(p)
        cs = [c for c in cs if c.id not in gone]
        for _ in range(p.creates):
            cs.append(container(s, created=100.0 + step))
            created += 1
    raise AssertionError("plan did not settle in 60 steps")


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_plans_settle_on_the_desired_state(sc) -> None:  # type: ignore[no-untyped-def]
    s, cs, _allow, hold = sc
    final, created, _ = simulate(s, list(cs), True, hold)
    if s is None:
        assert final == [] or (hold and final == cs)
        return
    assert len(final) == s.replicas
    assert all(c.running and c.spec_hash == s.spec_hash for c in final)
    # Never more creates than the desired count plus one start-first surge per stale one.
    assert created <= s.replicas + len(cs)


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_a_plan_never_removes_more_running_current_than_the_surplus(sc) -> None:  # type: ignore[no-untyped-def]
    s, cs, allow, hold = sc
    if s is None:
        return
    p = plan("web", s, cs, allow_heal=allow, hold_orphans=hold)
    current = [c for c in cs if c.running and c.spec_hash == s.spec_hash]
    removed_current = [c for c in current if c.id in removed(p)]
    assert len(removed_current) <= max(0, len(current) - s.replicas)
    # Availability during a rollout: running containers after the pass >= min(desired, before).
    running_before = sum(1 for c in cs if c.running)
    running_removed = sum(1 for c in cs if c.running and c.id in removed(p))
    if not s.has_fixed_host_port:
        assert running_before - running_removed + p.creates >= min(s.replicas, running_before)


@settings(max_examples=200, deadline=None)
@given(scenario())
def test_plans_only_touch_their_own_service(sc) -> None:  # type: ignore[no-untyped-def]
    s, cs, allow, hold = sc
    other = spec("other")
    foreign = [container(other), container(other, EXITED)]
    p = plan("web", s, cs + foreign, allow_heal=allow, hold_orphans=hold)
    assert not removed(p) & {c.id for c in foreign}


@settings(max_examples=200, deadline=None)
@given(scenario())
def test_a_converged_plan_is_a_fixed_point(sc) -> None:  # type: ignore[no-untyped-def]
    s, cs, _allow, hold = sc
    final, _, _ = simulate(s, list(cs), True, hold)
    again = plan("web", s, final, hold_orphans=hold)
    assert again.actions == ()
