"""The planner is pure: these tests build inputs and assert on the actions."""

from __future__ import annotations

import dataclasses

from hypothesis import example, given, settings
from hypothesis import strategies as st

from healerd.core.backoff import Backoff
from healerd.core.planner import (
    Plan,
    PlanContext,
    Replacement,
    min_available,
    plan,
    replacement_verdict,
)
from healerd.core.readiness import available
from healerd.model import (
    Action,
    ActionKind,
    ContainerState,
    Health,
    ObservedContainer,
    PortSpec,
    RestartPolicy,
    UpdateConfig,
)
from tests.unit.harness.builders import apply_plan, container, live, spec

RUNNING = ContainerState.RUNNING
EXITED = ContainerState.EXITED
NOW = PlanContext(now=1000.0)


def kinds(p: Plan) -> list[str]:
    return [a.kind.value for a in p.actions]


def removed(p: Plan) -> set[str]:
    return {a.container.id for a in p.actions if a.kind is ActionKind.REMOVE and a.container}


def stopped(p: Plan) -> set[str]:
    return {a.container.id for a in p.actions if a.kind is ActionKind.STOP and a.container}


def test_converged_service_needs_nothing() -> None:
    s = spec(replicas=2)
    p = plan("web", s, [container(s), container(s)], NOW)
    assert p.actions == () and p.converged and p.available == 2


def test_too_few_running_creates_the_difference() -> None:
    s = spec(replicas=3)
    p = plan("web", s, [container(s)], NOW)
    assert kinds(p) == ["create", "create"]
    assert all(a.spec == s and a.container is None and a.restarts == 0 for a in p.actions)
    assert not p.converged


def test_zero_replicas_removes_everything() -> None:
    s = spec(replicas=0)
    cs = [container(s), container(s, EXITED)]
    p = plan("web", s, cs, NOW)
    assert removed(p) == {c.id for c in cs} and p.creates == 0


def test_too_many_removes_newest_first() -> None:
    s = spec(replicas=1)
    old, mid, new = container(s, created=1), container(s, created=2), container(s, created=3)
    p = plan("web", s, [new, old, mid], NOW)
    assert removed(p) == {new.id, mid.id}


def test_scale_down_removes_not_running_before_running() -> None:
    s = spec(replicas=2)
    a, b = container(s, created=1), container(s, created=2)
    dead = container(s, EXITED, created=0)
    p = plan("web", s, [a, b, dead], NOW)
    assert removed(p) == {dead.id} and p.creates == 0


def started(p: Plan) -> set[str]:
    return {a.container.id for a in p.actions if a.kind is ActionKind.START and a.container}


def test_failed_containers_are_restarted_in_place_with_their_counts_carried_on() -> None:
    s = spec(replicas=2)
    ok = container(s)
    for state in (EXITED, ContainerState.CREATED, ContainerState.PAUSED):
        bad = dataclasses.replace(container(s, state), restarts=4)
        ctx = dataclasses.replace(NOW, replacements={bad.id: Replacement(True, 3)})
        p = plan("web", s, [ok, bad], ctx)
        # The same container again (issue 28): no create, nothing removed. A paused one
        # is stopped first (a start of a paused container does nothing).
        assert p.creates == 0 and removed(p) == set() and started(p) == {bad.id}, state
        assert stopped(p) == ({bad.id} if state is ContainerState.PAUSED else set()), state
        (start,) = [a for a in p.actions if a.kind is ActionKind.START]
        assert start.container == bad and start.restarts == 5 and start.crash_streak == 3
        assert start.reason.startswith("restarted in place: ")


def test_what_a_start_cannot_serve_is_replaced_and_kept_as_history() -> None:
    s = spec(replicas=2)
    ok = container(s)
    dead = dataclasses.replace(container(s, ContainerState.DEAD), restarts=4)
    old = dataclasses.replace(container(s, EXITED, spec_hash="old"), restarts=4)
    going = dataclasses.replace(container(s, ContainerState.REMOVING), restarts=4)
    told = dataclasses.replace(container(s, EXITED), restarts=4)
    for bad, extra in ((dead, {}), (old, {}), (going, {}), (told, {told.id: "why"})):
        ctx = dataclasses.replace(NOW, replacements={bad.id: Replacement(True, 3)}, replace=extra)
        p = plan("web", s, [ok, bad], ctx)
        # A dead container (its removal failed), one of an old spec (its replacement
        # takes the new one), one being removed, one the loop says a start cannot serve:
        # a new container, carrying the counts; the failed one stays as history.
        assert p.creates == 1 and removed(p) == set() and started(p) == set(), bad.state
        (create,) = [a for a in p.actions if a.kind is ActionKind.CREATE]
        assert create.container == bad and create.restarts == 5 and create.crash_streak == 3


def test_in_place_reasons_say_what_ended_the_run() -> None:
    s = spec(replicas=1)
    killed = dataclasses.replace(container(s, EXITED), exit_code=137)
    oom = dataclasses.replace(container(s, EXITED), exit_code=137, oom_killed=True)
    crashed = dataclasses.replace(container(s, EXITED), exit_code=3)
    engine = dataclasses.replace(container(s, EXITED), exit_code=143)
    outside = dataclasses.replace(container(s, EXITED), exit_code=143)
    ctx = dataclasses.replace(
        NOW, engine_stopped=frozenset({engine.id}), stopped_outside=frozenset({outside.id})
    )
    reasons = {
        c.id: next(a.reason for a in plan("web", s, [c], ctx).actions)
        for c in (killed, oom, crashed, engine, outside)
    }
    assert reasons == {
        killed.id: "restarted in place: exited with code 137 (killed)",
        oom.id: "restarted in place: killed by the kernel's OOM killer (exit code 137)",
        crashed.id: "restarted in place: exited with code 3",
        engine.id: "restarted in place: stopped while the engine was away",
        outside.id: "restarted in place: stopped from outside (exited with code 143 (SIGTERM))",
    }


def test_crash_backoff_holds_the_replacement_and_keeps_the_dead_one() -> None:
    s = spec(replicas=2)
    dead = container(s, EXITED)
    ctx = dataclasses.replace(NOW, replacements={dead.id: Replacement(False, 2)})
    p = plan("web", s, [dead], ctx)
    # One replica is missing without trace (made at once); the dead one keeps its slot.
    assert p.creates == 1 and p.held == 1 and removed(p) == set()
    assert not p.converged


def test_unhealthy_past_grace_is_restarted_in_place_then_replaced() -> None:
    s = spec(replicas=1)
    sick = dataclasses.replace(container(s), health=Health.UNHEALTHY)
    assert plan("web", s, [sick], NOW).actions == ()
    failed = dataclasses.replace(NOW, failed_running=frozenset({sick.id}))
    p = plan("web", s, [sick], failed)
    # As the kubelet does on a failed liveness probe: the same container, stopped and
    # started again.
    assert kinds(p) == ["stop", "start"] and started(p) == {sick.id} and p.creates == 0
    # Still unhealthy after that: a new container. Stopped, not removed: it stays as
    # history once its replacement runs (issue 14).
    again = dataclasses.replace(failed, replace={sick.id: "still unhealthy"})
    p = plan("web", s, [sick], again)
    assert stopped(p) == {sick.id} and removed(p) == set() and p.creates == 1
    assert started(p) == set()


def test_start_first_rollout_keeps_every_replica_available() -> None:
    s = spec(replicas=2)
    old1 = container(s, spec_hash="old", created=1)
    old2 = container(s, spec_hash="old", created=2)
    p = plan("web", s, [old1, old2], NOW)
    assert kinds(p) == ["create"] and p.rollout_step
    new = container(s, created=3)
    p2 = plan("web", s, [old1, old2, new], NOW)
    assert removed(p2) == {old1.id} and p2.creates == 0
    p3 = plan("web", s, [old2, new], NOW)
    assert kinds(p3) == ["create"]
    p4 = plan("web", s, [old2, new, container(s, created=4)], NOW)
    assert removed(p4) == {old2.id}


def test_rollout_waits_for_the_new_container_to_be_available() -> None:
    s = spec(replicas=2, update_config=UpdateConfig(min_ready_seconds=30))
    old1 = container(s, spec_hash="old", created=1)
    old2 = container(s, spec_hash="old", created=2)
    young = container(s, created=NOW.now - 5)
    p = plan("web", s, [old1, old2, young], NOW)
    # The surge container is not yet available: no old one may go.
    assert p.actions == () and p.stale == 2
    grown = dataclasses.replace(young, created=NOW.now - 31)
    assert removed(plan("web", s, [old1, old2, grown], NOW)) == {old1.id}


def test_rollout_halted_creates_no_new_batch() -> None:
    s = spec(replicas=2)
    olds = [container(s, spec_hash="old"), container(s, spec_hash="old")]
    p = plan("web", s, olds, dataclasses.replace(NOW, rollout_allowed=False))
    assert p.actions == () and p.stale == 2 and not p.converged


def test_fixed_host_port_replaces_stop_first() -> None:
    s = spec(replicas=1, ports=(PortSpec(container_port=80, host_port=8080),))
    assert s.update_order == "stop-first" and min_available(s) == 0
    old = container(s, spec_hash="old")
    p = plan("web", s, [old], NOW)
    assert kinds(p) == ["remove"] and removed(p) == {old.id}
    assert kinds(plan("web", s, [], NOW)) == ["create"]


def test_missing_replicas_with_stale_ones_create_current_spec() -> None:
    s = spec(replicas=3)
    p = plan("web", s, [container(s, spec_hash="old")], NOW)
    assert p.creates == 2 and all(a.spec == s for a in p.actions)


def test_undeclared_service_is_removed() -> None:
    s = spec()
    cs = [container(s), container(s, EXITED)]
    assert removed(plan("web", None, cs, NOW)) == {c.id for c in cs}


def test_undeclared_service_is_held_while_a_config_file_is_broken() -> None:
    s = spec()
    p = plan("web", None, [container(s)], dataclasses.replace(NOW, hold_orphans=True))
    assert p.actions == () and not p.converged and "broken" in p.note


def test_other_services_containers_are_never_touched() -> None:
    web, db = spec("web", replicas=0), spec("db")
    other = container(db)
    p = plan("web", web, [other], NOW)
    assert p.actions == () and p.converged
    assert plan("web", None, [other], NOW).actions == ()


# -- crash-loop backoff verdicts -------------------------------------------------------

POLICY = RestartPolicy(delay=10, max_delay=300, window=600)


def test_backoff_first_crash_at_once_then_doubling_to_the_cap() -> None:
    s = spec()
    waits = []
    for streak in range(8):
        c = dataclasses.replace(container(s, EXITED, created=0), crash_streak=streak)
        ready_at, next_streak = replacement_verdict(c, 5.0, POLICY, forgiven=False)
        waits.append(ready_at - 5.0)
        assert next_streak == streak + 1
    assert waits == [0, 10, 20, 40, 80, 160, 300, 300]


@given(
    st.integers(0, 200),
    st.floats(0.0, 100.0),
    st.floats(0.0, 1e9),
)
# The formula of its own stopped doubling at 2**32 * delay, short of a far cap.
@example(40, 1e-6, 1e6)
def test_the_crash_loop_wait_is_a_backoff(streak: int, delay: float, max_delay: float) -> None:
    """The crash-loop wait is what `Backoff` says for the streak (one formula for every
    backoff of healerd's), however long the streak and the policy's cap."""
    policy = RestartPolicy(delay=delay, max_delay=max_delay, window=1e12)
    c = dataclasses.replace(container(spec(), EXITED, created=0), crash_streak=streak)
    ready_at, _ = replacement_verdict(c, 5.0, policy, forgiven=False)
    assert ready_at == 5.0 + Backoff(delay, max_delay).delay(streak)


def test_backoff_resets_after_a_long_run_and_ignores_operator_stops() -> None:
    s = spec()
    c = dataclasses.replace(container(s, EXITED, created=0), crash_streak=5)
    assert replacement_verdict(c, 601.0, POLICY, forgiven=False) == (601.0, 1)
    assert replacement_verdict(c, 5.0, POLICY, forgiven=True) == (5.0, 5)


# -- properties ----------------------------------------------------------------------

STATES = list(ContainerState)


@st.composite
def scenario(draw):  # type: ignore[no-untyped-def]
    replicas = draw(st.integers(0, 6))
    fixed_port = draw(st.booleans()) and replicas <= 1
    ports = (PortSpec(container_port=80, host_port=8080),) if fixed_port else ()
    parallelism = draw(st.integers(1, 3))
    s = spec(replicas=replicas, ports=ports, update_config=UpdateConfig(parallelism=parallelism))
    n = draw(st.integers(0, 10))
    cs = [
        container(
            s,
            draw(st.sampled_from(STATES)),
            created=float(draw(st.integers(0, 50))),
            spec_hash=draw(st.sampled_from([s.spec_hash, "old1", "old2"])),
        )
        for _ in range(n)
    ]
    cs = [
        dataclasses.replace(c, health=draw(st.sampled_from([None, "healthy", "starting"])))
        for c in cs
    ]
    declared = draw(st.booleans())
    return s if declared else None, cs, draw(st.booleans())


def simulate(s, cs: list[ObservedContainer], hold: bool):  # type: ignore[no-untyped-def]
    """Apply plans as a perfect engine would until nothing is left to do; return the
    end state, the creates, and the least availability seen after any step."""
    created, floor_seen = 0, None
    engine = {c.id: c for c in cs}
    for step in range(80):
        ctx = PlanContext(now=1000.0, hold_orphans=hold)
        p = plan("web", s, list(engine.values()), ctx)
        if not p.actions:
            # A "starting" health check passes eventually.
            if any(c.health == "starting" for c in engine.values()):
                engine = {
                    i: dataclasses.replace(c, health=Health.HEALTHY) for i, c in engine.items()
                }
                continue
            # The end state: the service's containers, its history (replaced failed
            # containers kept for their logs) apart.
            return live(engine.values()), created, floor_seen
        if s is not None:
            # Availability right after the stops and removes, before any create.
            down = stopped(p) | removed(p)
            alive = [c for c in engine.values() if c.id not in down]
            after_removals = sum(1 for c in alive if available(c, s, 1000.0))
            floor_seen = after_removals if floor_seen is None else min(floor_seen, after_removals)

        def make(a: Action, step: int = step) -> ObservedContainer:
            nonlocal created
            created += 1
            return container(s, created=100.0 + step)

        apply_plan(engine, p.actions, make)
    raise AssertionError("plan did not settle in 80 steps")


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_plans_settle_on_the_desired_state(sc) -> None:  # type: ignore[no-untyped-def]
    s, cs, hold = sc
    final, created, _ = simulate(s, list(cs), hold)
    if s is None:
        assert final == [] or (hold and [c.id for c in final] == [c.id for c in cs])
        return
    assert len(final) == s.replicas
    assert all(c.running and c.spec_hash == s.spec_hash for c in final)
    assert created <= s.replicas + len(cs)


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_a_rollout_never_drops_below_its_availability_floor(sc) -> None:  # type: ignore[no-untyped-def]
    s, cs, hold = sc
    if s is None:
        return
    available_before = sum(1 for c in cs if available(c, s, 1000.0))
    _, _, floor_seen = simulate(s, list(cs), hold)
    if floor_seen is not None:
        assert floor_seen >= min(min_available(s), available_before)


@settings(max_examples=200, deadline=None)
@given(scenario())
def test_plans_only_touch_their_own_service(sc) -> None:  # type: ignore[no-untyped-def]
    s, cs, hold = sc
    other = spec("other")
    foreign = [container(other), container(other, EXITED)]
    p = plan("web", s, cs + foreign, PlanContext(now=1000.0, hold_orphans=hold))
    assert not removed(p) & {c.id for c in foreign}


@settings(max_examples=200, deadline=None)
@given(scenario())
def test_a_converged_plan_is_a_fixed_point(sc) -> None:  # type: ignore[no-untyped-def]
    s, cs, hold = sc
    final, _, _ = simulate(s, list(cs), hold)
    again = plan("web", s, final, PlanContext(now=1000.0, hold_orphans=hold))
    assert again.actions == ()
