"""Properties of the planner against a simulated engine (issue 8).

test_planner.py checks single plans, and plans repeated on one frozen clock. Here a small
in-memory engine applies every plan (a CREATE starts a running container with the spec's
hash and labels, a REMOVE makes it vanish), the clock moves, and between passes the
strategy disrupts: containers die (crash or operator kill), fall into other states, turn
unhealthy and back, vanish; foreign and unlabelled containers and containers with another
service's labels appear; stale-hash containers appear; the spec changes (image, replicas,
update settings); the service is undeclared for a while, with and without hold_orphans.

Each pass builds its PlanContext with the loop's own steps (healerd.core.observe.observe,
healerd.core.rollouts.track, then healerd.core.context.plan_context): dead_since /
unhealthy_since / forgiven memory, the crash-loop verdicts from replacement_verdict,
failed_running for containers unhealthy past unhealthy_grace, and rollout_allowed from
update_config.delay. When a pass
has nothing to do, the clock jumps to the earliest wake-up the controller would schedule
(or to the next change the engine makes by itself: a health check that passes).

As in the loop (healerd.core.reconcile), the crash-loop backoff of a running container that failed
(unhealthy past its grace) runs from when it failed (the test at the end holds the
controller to it).
progress_deadline is kept out of reach (NO_DEADLINE): a halted rollout is documented to
stay halted (RolloutHalted) until someone acts, so convergence is not promised for it.
The bound on the passes convergence takes is pass_bound's, with its reasons.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings, target
from hypothesis import strategies as st

from healerd.config import DesiredState
from healerd.core import readiness, rollouts
from healerd.core.clock import FakeClock
from healerd.core.context import plan_context
from healerd.core.controller import LoopSettings
from healerd.core.observe import Memory, note_started, observe
from healerd.core.planner import (
    Plan,
    PlanContext,
    Replacement,
    min_available,
    plan,
)
from healerd.core.rollouts import Rollout
from healerd.core.wiring import build_loop
from healerd.model import (
    Action,
    ActionKind,
    ContainerState,
    Health,
    HealthcheckSpec,
    ObservedContainer,
    PortSpec,
    RestartPolicy,
    ServiceSpec,
    UpdateConfig,
    UpdateOrder,
)
from tests.unit.harness.builders import apply_plan, live
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine

SERVICE = "web"
T0 = 1_700_000_000.0
NO_DEADLINE = 1e9
FIXED_PORT = PortSpec(container_port=80, host_port=8080)
# Time between a pass that acted and the next look (the controller re-queues at once).
EPS = 0.01
RUNNING = ContainerState.RUNNING
NOT_RUNNING = [s for s in ContainerState if s is not RUNNING]
# Labels another service (or nobody) put on containers the planner must leave alone; the
# names mimic healerd's own so that only the service label can tell them apart.
FOREIGN_SERVICES = ["", "other", "web2", "Web", "web ", "web.x"]
SETTINGS = settings(max_examples=150, deadline=None, database=None)


# -- the simulated engine and controller memory ----------------------------------------------


@dataclass(frozen=True)
class Step:
    """One pass: what was observed, what the planner said, what the engine then held."""

    now: float
    spec: ServiceSpec | None
    hold: bool
    ctx: PlanContext
    before: tuple[ObservedContainer, ...]
    plan: Plan
    after: tuple[ObservedContainer, ...]
    port_conflicts: int


@dataclass
class Sim:
    spec: ServiceSpec | None
    now: float = T0
    hold: bool = False
    engine: dict[str, ObservedContainer] = field(default_factory=dict)
    port_holders: set[str] = field(default_factory=set)
    # Health changes the engine makes by itself: id -> (when, new health).
    health_at: dict[str, tuple[float, str]] = field(default_factory=dict)
    # The loop's memory: the same objects the loop keeps (healerd.core.loopmemory).
    mem: Memory = field(default_factory=Memory)
    rollout: Rollout | None = None
    trace: list[Step] = field(default_factory=list)
    last_declared: ServiceSpec | None = None
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self.last_declared = self.spec

    # -- engine ---------------------------------------------------------------------

    def add(self, c: ObservedContainer, health_later: tuple[float, str] | None = None) -> None:
        self.engine[c.id] = c
        if health_later is not None:
            self.health_at[c.id] = health_later

    def mine(self) -> list[ObservedContainer]:
        """The service's containers that count: its history (replaced failed ones, kept
        for their logs) apart."""
        return live(c for c in self.engine.values() if c.service == SERVICE)

    def foreign(self) -> list[ObservedContainer]:
        return [c for c in self.engine.values() if c.service != SERVICE]

    def _set(self, cid: str, **changes: Any) -> None:
        self.engine[cid] = dataclasses.replace(self.engine[cid], **changes)

    def _engine_tick(self) -> None:
        for cid, (when, health) in list(self.health_at.items()):
            if when <= self.now:
                del self.health_at[cid]
                if cid in self.engine and self.engine[cid].running:
                    self._set(cid, health=health)

    def next_engine_change(self) -> float | None:
        return min((when for when, _ in self.health_at.values()), default=None)

    def _make(self, a: Action) -> ObservedContainer | None:
        """A create's container; a fixed host port already held makes it fail."""
        assert a.spec is not None
        spec, restarts, crash_streak = a.spec, a.restarts, a.crash_streak
        conflict = spec.has_fixed_host_port and any(
            cid in self.port_holders and c.running for cid, c in self.engine.items()
        )
        if conflict:
            return None
        n = next(self._ids)
        cid = f"n{n:05d}"
        hc = spec.healthcheck
        c = ObservedContainer(
            id=cid,
            name=f"{spec.name}-{spec.spec_hash[:5]}-{n:05d}",
            service=spec.name,
            spec_hash=spec.spec_hash,
            state=RUNNING,
            created=self.now,
            image=spec.image,
            health=Health.STARTING if hc else None,
            restarts=restarts,
            crash_streak=crash_streak,
        )
        if hc:
            self.health_at[cid] = (self.now + (hc.start_period or 1.0), Health.HEALTHY)
        if spec.has_fixed_host_port:
            self.port_holders.add(cid)
        return c

    def _started(self, a: Action) -> None:
        """A start in place: a new run, its health checks from the start again (as the
        engine does), and the loop's own memory of it (healerd.core.observe)."""
        assert a.container is not None and a.spec is not None
        cid, hc = a.container.id, a.spec.healthcheck
        if cid in self.engine:
            self._set(cid, health=Health.STARTING if hc else None)
            if hc:
                self.health_at[cid] = (self.now + (hc.start_period or 1.0), Health.HEALTHY)
        note_started(self.mem, a, self.now, self.now)

    # -- disruptions ------------------------------------------------------------------

    def _pick(self, i: int, running: bool | None = None) -> ObservedContainer | None:
        cs = sorted(
            (c for c in self.mine() if running is None or c.running == running),
            key=lambda c: c.id,
        )
        return cs[i % len(cs)] if cs else None

    def disrupt(self, op: tuple[Any, ...], variants: Sequence[ServiceSpec]) -> None:
        kind = op[0]
        if kind == "pass":
            self.run_pass()
        elif kind == "run":
            for _ in range(op[1]):
                self.run_pass()
                self.now += op[2] + EPS
        elif kind == "tick":
            self.now += op[1]
        elif kind == "kill":
            c = self._pick(op[1], running=True)
            if c is not None:
                manual = op[2]
                self._set(c.id, state=ContainerState.EXITED, exit_code=137 if manual else 1)
                if manual:  # the controller sees a kill/stop event: no crash
                    self.mem.forgiven.add(c.id)
        elif kind == "state":
            c = self._pick(op[1])
            if c is not None:
                self._set(c.id, state=op[2], health=None)
        elif kind == "sick":
            c = self._pick(op[1], running=True)
            if c is not None:
                self.health_at.pop(c.id, None)
                self._set(c.id, health="unhealthy")
        elif kind == "heal":
            c = self._pick(op[1], running=True)
            if c is not None and c.health == "unhealthy":
                self._set(c.id, health="healthy")
        elif kind == "rm":
            c = self._pick(op[1])
            if c is not None:
                del self.engine[c.id]
        elif kind == "foreign":
            c = op[1]
            self.add(dataclasses.replace(c, id=f"f{next(self._ids):05d}"))
        elif kind == "stale":
            c = op[1]
            self.add(dataclasses.replace(c, id=f"s{next(self._ids):05d}", created=self.now))
        elif kind == "spec":
            self.spec = self.last_declared = variants[op[1] % len(variants)]
            self.hold = False
        elif kind == "undeclare":
            self.spec, self.hold = None, op[1]
        else:  # pragma: no cover
            raise AssertionError(op)

    # -- one controller pass --------------------------------------------------------------

    def _observe(self) -> list[ObservedContainer]:
        """The loop's observe step: one list folded into its memory (one clock here).

        The planner gets the engine's own creation times, not the loop's aged ones (a
        container is at least as old as first seen): the strategy draws containers
        created ahead of the clock and the properties judge availability by the engine's
        timestamps. Aging after a clock jump is tested in test_clock_jump.py."""
        self._engine_tick()
        listed = list(self.engine.values())
        observe(self.mem, listed, self.now, self.now)
        return listed

    def _track_rollout(self, spec: ServiceSpec | None, mine: list[ObservedContainer]) -> None:
        """The loop's rollout tracking."""
        self.rollout, _ = rollouts.track(self.rollout, spec, mine, self.now, self.now)

    def context(
        self, spec: ServiceSpec | None, mine: list[ObservedContainer]
    ) -> tuple[PlanContext, list[float]]:
        """As healerd.core.reconcile: the loop's own plan_context on the loop's memory."""
        if spec is None:
            return PlanContext(now=self.now, hold_orphans=self.hold), []
        r = self.rollout
        recall = self.mem.recall({c.id for c in mine}, 0.0)
        if r is not None:
            recall = dataclasses.replace(recall, rollout=(r.last_progress, r.last_batch))
        ctx, wake, _ = plan_context(spec, mine, self.now, recall)
        return ctx, wake

    def run_pass(self) -> tuple[Plan, list[float]]:
        observed = self._observe()
        spec = self.spec
        mine = [c for c in observed if c.service == SERVICE]
        self._track_rollout(spec, mine)
        ctx, wake = self.context(spec, mine)
        # The whole list, foreign containers included: the planner must filter them out.
        p = plan(SERVICE, spec, observed, ctx)
        conflicts = self._apply(p)
        self.trace.append(
            Step(self.now, spec, self.hold, ctx, tuple(observed), p, tuple(self.engine.values()),
                 conflicts)
        )  # fmt: skip
        return p, wake

    def _apply(self, p: Plan) -> int:
        """As healerd.core.executor.Executor.apply (tests/unit/harness/builders.apply_plan)."""
        conflicts = 0

        def make(a: Action) -> ObservedContainer | None:
            nonlocal conflicts
            c = self._make(a)
            conflicts += c is None
            return c

        apply_plan(self.engine, p.actions, make)
        for a in p.actions:
            if a.kind is ActionKind.START and a.container is not None:
                self._started(a)
        if p.rollout_step and self.rollout is not None:
            self.rollout.last_batch = self.now
        return conflicts

    # -- convergence ----------------------------------------------------------------------

    def converge(self, max_passes: int) -> int:
        """Plan and apply until the controller would call the service Converged; returns
        the passes it took. Fails if it takes more than `max_passes`, or if the service
        is not converged and the controller would have nothing to wake up for."""
        if self.spec is None:
            self.spec, self.hold = self.last_declared, False
        spec = self.spec
        assert spec is not None
        for n in range(1, max_passes + 1):
            p, wake = self.run_pass()
            if p.actions:
                self.now += EPS
                continue
            if p.converged and p.available >= spec.replicas:
                return n
            engine_change = self.next_engine_change()
            if engine_change is not None:
                wake.append(engine_change)
            assert wake, f"stuck after {n} passes with nothing to wait for: {self.describe()}"
            nxt = min(wake)
            assert nxt < self.now + NO_DEADLINE / 2, f"waits for the progress deadline: {p}"
            self.now = max(self.now + EPS, nxt)
        raise AssertionError(f"not converged in {max_passes} passes: {self.describe()}")

    def describe(self) -> str:
        return repr([(c.id, c.state.value, c.health, c.spec_hash[:6]) for c in self.mine()])


# -- strategies ---------------------------------------------------------------------------


@st.composite
def service_specs(draw: st.DrawFn) -> ServiceSpec:
    replicas = draw(st.integers(0, 5))
    fixed = replicas <= 1 and draw(st.integers(0, 4)) == 0
    order = UpdateOrder.STOP_FIRST if fixed else draw(st.sampled_from(list(UpdateOrder)))
    delay = draw(st.sampled_from([1.0, 10.0]))
    healthcheck = draw(
        st.none()
        | st.builds(
            HealthcheckSpec,
            test=st.just(("CMD", "true")),
            start_period=st.sampled_from([None, 3.0, 20.0]),
        )
    )
    return ServiceSpec(
        name=SERVICE,
        image=draw(st.sampled_from(["img:1", "img:2", "img:3"])),
        replicas=replicas,
        ports=(FIXED_PORT,) if fixed else (),
        healthcheck=healthcheck,
        unhealthy_grace=draw(st.sampled_from([0.0, 5.0, 30.0])),
        update_config=UpdateConfig(
            parallelism=draw(st.integers(1, 3)),
            delay=draw(st.sampled_from([0.0, 0.0, 3.0, 20.0])),
            order=order,
            min_ready_seconds=draw(st.sampled_from([0.0, 1.0, 5.0, 30.0])),
            progress_deadline=NO_DEADLINE,
        ),
        restart_policy=RestartPolicy(
            delay=delay,
            max_delay=delay * draw(st.sampled_from([1, 4, 30])),
            window=draw(st.sampled_from([60.0, 600.0])),
        ),
    )


SERVICE_SPECS = service_specs()


# Containers are drawn with a hash slot, resolved against the scenario's specs: 0-2 the
# specs' own hashes, 3 a hash no spec has, 4 none at all. (The strategies are built once:
# building them per example would cost more than running the examples.)
OLD_HASH = "0ld0ld0ld0ld0ld0"


def resolve_hash(slot: str, variants: Sequence[ServiceSpec]) -> str:
    k = int(slot)
    if k < 3:
        return variants[k % len(variants)].spec_hash
    return OLD_HASH if k == 3 else ""


@st.composite
def containers(draw: st.DrawFn, service: st.SearchStrategy[str]) -> ObservedContainer:
    state = draw(st.sampled_from([RUNNING, RUNNING, RUNNING, *NOT_RUNNING]))
    health = (
        draw(st.sampled_from([None, Health.HEALTHY, Health.STARTING, Health.UNHEALTHY]))
        if state is RUNNING
        else None
    )
    return ObservedContainer(
        id="",  # set when the container is added
        name=draw(st.sampled_from(["web-0ld0l-abcde", "web-12345-zzzzz", "stranger", ""])),
        service=draw(service),
        spec_hash=str(draw(st.integers(0, 4))),  # a slot: see resolve_hash
        state=state,
        created=T0 - draw(st.sampled_from([0.0, 2.0, 30.0, 700.0, 5000.0, -20.0])),
        health=health,
        exit_code=None if state is RUNNING else draw(st.sampled_from([None, 0, 1, 137])),
        restarts=draw(st.integers(0, 5)),
        crash_streak=draw(st.sampled_from([0, 0, 1, 3, 40])),
    )


MINE = containers(st.just(SERVICE))
FOREIGN = containers(st.sampled_from(FOREIGN_SERVICES))
_idx = st.integers(0, 9)
OPS = st.one_of(
    st.tuples(st.just("pass")),
    st.tuples(st.just("run"), st.integers(1, 8), st.sampled_from([0.0, 1.0, 6.0, 31.0])),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 3.0, 10.0, 60.0, 400.0])),
    st.tuples(st.just("kill"), _idx, st.booleans()),
    st.tuples(st.just("state"), _idx, st.sampled_from(NOT_RUNNING)),
    st.tuples(st.just("sick"), _idx),
    st.tuples(st.just("heal"), _idx),
    st.tuples(st.just("rm"), _idx),
    st.tuples(st.just("foreign"), FOREIGN),
    st.tuples(st.just("stale"), MINE),
    st.tuples(st.just("spec"), st.integers(0, 2)),
    st.tuples(st.just("undeclare"), st.booleans()),
)


@dataclass(frozen=True)
class Scenario:
    variants: tuple[ServiceSpec, ...]
    initial: tuple[tuple[ObservedContainer, float | None], ...]  # with when "starting" ends
    ops: tuple[tuple[Any, ...], ...]

    def resolve(self, c: ObservedContainer) -> ObservedContainer:
        return dataclasses.replace(c, spec_hash=resolve_hash(c.spec_hash, self.variants))

    def sim(self) -> Sim:
        s = Sim(spec=self.variants[0])
        for i, (c, starting_until) in enumerate(self.initial):
            later = (starting_until, "healthy") if starting_until is not None else None
            s.add(dataclasses.replace(self.resolve(c), id=f"i{i:03d}"), later)
        return s

    def run(self) -> Sim:
        s = self.sim()
        for op in self.ops:
            if op[0] in ("foreign", "stale"):
                c = self.resolve(op[1])
                # A stale container found later has its health settled already.
                op = (op[0], c if c.health != "starting" else dataclasses.replace(c, health=None))
            s.disrupt(op, self.variants)
        return s


@st.composite
def scenarios(draw: st.DrawFn, *, max_ops: int = 30) -> Scenario:
    variants = tuple(draw(st.lists(SERVICE_SPECS, min_size=1, max_size=3)))
    # A fleet that was converged on some spec (often an older one): the start of a
    # rolling update, a scale change, or nothing to do.
    fleet_slot = str(draw(st.integers(0, 4)))
    fleet_health = draw(st.sampled_from([None, Health.HEALTHY]))
    fleet = [
        ObservedContainer(
            id="",
            name=f"web-fleet-{i:05d}",
            service=SERVICE,
            spec_hash=fleet_slot,
            state=RUNNING,
            created=T0 - 1000.0 - i,
            health=fleet_health,
        )
        for i in range(draw(st.integers(0, 6)))
    ]
    initial: list[tuple[ObservedContainer, float | None]] = [(c, None) for c in fleet]
    for c in draw(st.lists(MINE | FOREIGN, max_size=6)):
        until = T0 + draw(st.sampled_from([0.0, 4.0, 45.0])) if c.health == "starting" else None
        initial.append((c, until))
    ops = tuple(draw(st.lists(OPS, max_size=max_ops))) if max_ops else ()
    return Scenario(variants, tuple(initial), ops)


SCENARIOS = scenarios()
STATES = scenarios(max_ops=0)


# -- helpers on steps -----------------------------------------------------------------------


def labels_of(cs: Iterable[ObservedContainer]) -> list[tuple[str, str, str, str]]:
    return sorted((c.id, c.service, c.spec_hash, c.state.value) for c in cs)


def removed_ids(p: Plan) -> list[str]:
    return [a.container.id for a in p.actions if a.kind is ActionKind.REMOVE and a.container]


def alive(cs: Iterable[ObservedContainer], ctx: PlanContext) -> list[ObservedContainer]:
    return [c for c in cs if c.service == SERVICE and c.running and c.id not in ctx.failed_running]


def available(cs: Sequence[ObservedContainer], spec: ServiceSpec, now: float) -> int:
    return sum(1 for c in cs if c.service == SERVICE and readiness.available(c, spec, now))


def pass_bound(s: Sim) -> int:
    """The passes convergence may take from the state `s` is in: 6(N + R) + 1, for N
    containers of the service now and R replicas.

    Once disruptions stop, no container fails any more and the spec stays put, so:
    - C, the containers created from here on, is at most R: every one is of the current
      spec and is never removed (it never fails, and creates never take the current ones
      above R, so none is ever an extra), so all of them are among the R at the end.
    - Each pass that acts creates or removes a container, and each of the N + C
      containers is created or removed at most once: at most N + R passes act.
    - A pass that does nothing is followed by a clock jump to the earliest wake-up, and
      each wake-up instant is fixed: per container, its health check passing, its
      min_ready_seconds, its unhealthy_grace and its backoff ending (4(N + R) at most);
      per rollout batch, update_config.delay ending (a batch creates or removes at least
      one container: N + R at most). The progress deadline is out of reach.
    So passes <= 1 + (N + R) + 4(N + R) + (N + R).
    """
    assert s.last_declared is not None
    n, r = len(s.mine()), s.last_declared.replicas
    return 6 * (n + r) + 1


# -- properties ----------------------------------------------------------------------------


@SETTINGS
@given(SCENARIOS)
def test_any_state_converges_to_exactly_the_replicas_within_the_bound(sc: Scenario) -> None:
    """From any observed state, after any disruptions, plan-and-apply ends with exactly
    `replicas` running, available containers of the current spec and nothing else of the
    service, within pass_bound passes; foreign containers are all still there, unchanged."""
    s = sc.run()
    foreign = labels_of(s.foreign())
    bound = pass_bound(s)
    target(s.converge(bound) / bound, label="passes / bound")
    spec = s.spec
    assert spec is not None
    mine = s.mine()
    assert len(mine) == spec.replicas
    assert all(c.running and c.spec_hash == spec.spec_hash for c in mine)
    assert available(mine, spec, s.now) == spec.replicas
    assert labels_of(s.foreign()) == foreign


@SETTINGS
@given(SCENARIOS)
def test_plans_never_touch_containers_of_another_service_or_none(sc: Scenario) -> None:
    """Fed the whole list (other services, unlabelled containers, names that look like the
    service's own), a plan removes only containers labelled with its service, each once,
    and creates only containers of its current spec."""
    s = sc.run()
    s.converge(pass_bound(s))
    for step in s.trace:
        own = {c.id for c in step.before if c.service == SERVICE}
        gone = removed_ids(step.plan)
        assert set(gone) <= own, step
        assert len(gone) == len(set(gone)), step
        for a in step.plan.actions:
            assert a.service == SERVICE
            if a.kind is ActionKind.CREATE:
                assert a.spec is not None and a.spec == step.spec and a.spec.name == SERVICE


@SETTINGS
@given(SCENARIOS, st.sampled_from([0.0, 1.0, 59.0, 3600.0, 86400.0 * 30]))
def test_a_converged_state_is_a_fixed_point_as_time_passes(sc: Scenario, later: float) -> None:
    """Once converged, no pass does anything, now or any time later, with foreign
    containers around and whatever the controller still remembers."""
    s = sc.run()
    s.converge(pass_bound(s))
    s.now += later
    p, _ = s.run_pass()
    assert p.actions == () and p.converged, s.describe()
    p, _ = s.run_pass()
    assert p.actions == () and p.converged
    # And on the way there: a plan that calls the service converged has nothing to do
    # and sees exactly `replicas` alive containers of the current spec, nothing else.
    for step in s.trace:
        if step.spec is not None and step.plan.converged:
            mine = live(c for c in step.before if c.service == SERVICE)  # history apart
            cur = [c for c in alive(mine, step.ctx) if c.spec_hash == step.spec.spec_hash]
            assert step.plan.actions == () and len(cur) == len(mine) == step.spec.replicas


@SETTINGS
@given(SCENARIOS)
def test_removals_keep_the_availability_floor_and_only_remove_the_excess(sc: Scenario) -> None:
    """On every pass, whatever the disruptions:
    - availability never drops below min_available(spec) (all replicas start-first,
      parallelism fewer stop-first), nor drops at all where it was already below;
    - no current alive container is removed unless there are more than `replicas` of
      them, and then no more than the excess (a scale-down);
    - alive containers removed are at most the excess of alive plus held (backoff) slots
      over `replicas`, plus `parallelism` for a stop-first rollout batch."""
    s = sc.run()
    s.converge(pass_bound(s))
    for step in s.trace:
        spec = step.spec
        if spec is None:
            continue
        gone = set(removed_ids(step.plan))
        before, now, ctx = step.before, step.now, step.ctx
        kept = [c for c in before if c.id not in gone]
        floor = min(min_available(spec), available(before, spec, now))
        assert available(kept, spec, now) >= floor, step

        alive_before = alive(before, ctx)
        cur = [c for c in alive_before if c.spec_hash == spec.spec_hash]
        cur_removed = sum(1 for c in cur if c.id in gone)
        assert cur_removed <= max(0, len(cur) - spec.replicas), step

        alive_removed = sum(1 for c in alive_before if c.id in gone)
        allowance = max(0, len(alive_before) + step.plan.held - spec.replicas)
        if spec.update_order == "stop-first" and step.plan.rollout_step:
            allowance += spec.update_config.parallelism
        assert alive_removed <= allowance, step


@SETTINGS
@given(SCENARIOS)
def test_never_more_than_replicas_plus_parallelism_alive(sc: Scenario) -> None:
    """A plan that creates leaves at most replicas + parallelism alive (the surge of a
    start-first rollout); no plan adds to a state already above that; and with a fixed
    host port no create ever finds the port still held (stop-first really stops first)."""
    s = sc.run()
    s.converge(pass_bound(s))
    for step in s.trace:
        spec = step.spec
        if spec is None:
            continue
        ceiling = spec.replicas + spec.update_config.parallelism
        n_before = len(alive(step.before, step.ctx))
        n_after = len(alive(step.after, step.ctx))
        if step.plan.creates:
            assert n_after <= ceiling, step
        assert n_after <= max(ceiling, n_before), step
        assert step.port_conflicts == 0, step


@SETTINGS
@given(SCENARIOS)
def test_failed_containers_go_when_their_backoff_allows_and_not_before(sc: Scenario) -> None:
    """A failed container (not running, or unhealthy past its grace) whose crash-loop
    backoff is over is dealt with on that very pass: started again in place (issue 28),
    replaced (it then stays, stopped, as history: issue 14) or removed when unneeded; one
    still held keeps its slot unless enough current containers make it unneeded. A create
    that stands in for a failed one carries its restart count on and the streak of its
    verdict."""
    s = sc.run()
    s.converge(pass_bound(s))
    for step in s.trace:
        spec, ctx = step.spec, step.ctx
        if spec is None:
            continue
        gone = set(removed_ids(step.plan))
        replaced = {
            a.container.id
            for a in step.plan.actions
            if a.kind in (ActionKind.CREATE, ActionKind.START) and a.container is not None
        }
        mine = {c.id: c for c in live(c for c in step.before if c.service == SERVICE)}
        failed = {cid for cid, c in mine.items() if not c.running or cid in ctx.failed_running}
        cur = [c for c in alive(mine.values(), ctx) if c.spec_hash == spec.spec_hash]
        for cid in failed:
            verdict = ctx.replacements.get(cid, Replacement(True, 0))
            if verdict.ready:
                assert cid in gone | replaced, step
            elif len(cur) < spec.replicas:
                assert cid not in gone | replaced, step
        for a in step.plan.actions:
            if a.kind is ActionKind.START and a.container is not None:
                # In place: a failed container of the current spec, its counts carried on.
                old = a.container
                assert old.id in failed and old.spec_hash == spec.spec_hash, step
                verdict = ctx.replacements.get(old.id, Replacement(True, 0))
                assert verdict.ready and a.crash_streak == verdict.crash_streak, step
                assert a.restarts == old.restarts + 1, step
            elif a.kind is ActionKind.CREATE and a.container is not None and a.retire:
                # A stop-first rollout step onto the old container's volumes.
                assert a.container.id not in failed and a.container.id in gone, step
            elif a.kind is ActionKind.CREATE and a.container is not None:
                old = a.container
                assert old.id in failed and old.id not in gone, step
                assert ctx.replacements.get(old.id, Replacement(True, 0)).ready
                assert a.restarts == old.restarts + 1
                assert (
                    a.crash_streak
                    == ctx.replacements.get(old.id, Replacement(True, 0)).crash_streak
                )


@SETTINGS
@given(SCENARIOS)
def test_an_undeclared_service_is_never_touched_while_orphans_are_held(sc: Scenario) -> None:
    """Undeclared with hold_orphans (a config file is broken): no action at all, whatever
    the containers do. Undeclared without it: every container of the service goes, and
    nothing else."""
    s = sc.run()
    for step in s.trace:
        if step.spec is not None:
            continue
        if step.hold:
            assert step.plan.actions == (), step
        else:
            own = {c.id for c in step.before if c.service == SERVICE}
            assert sorted(removed_ids(step.plan)) == sorted(own), step
            assert step.plan.creates == 0


@settings(max_examples=100, deadline=None, database=None)
@given(STATES, st.lists(st.booleans(), min_size=1, max_size=6))
def test_undeclared_with_held_orphans_stays_untouched_through_time(
    sc: Scenario, steps: list[bool]
) -> None:
    """The same from the start, over many passes and hours, with crashes in between."""
    s = sc.sim()
    s.spec, s.hold = None, True
    snapshot = labels_of(s.engine.values())
    for crash in steps:
        if crash:
            s.disrupt(("kill", 0, False), sc.variants)
            snapshot = labels_of(s.engine.values())
        p, wake = s.run_pass()
        assert p.actions == () and wake == []
        assert labels_of(s.engine.values()) == snapshot
        s.now += 3600.0


# -- found by the properties above ------------------------------------------------------------


def test_an_unhealthy_container_waits_its_backoff_not_its_window() -> None:
    """docs/user-guide.md: a container that fails before it ran for `window` waits `delay`, then
    twice that, up to `max_delay`. The real controller, on an in-memory engine."""
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS)
    ctrl = build_loop(engine, clock, LoopSettings(workers=1, parallel_actions=1))
    policy = RestartPolicy(delay=1.0, max_delay=1.0, window=60.0)
    s = ServiceSpec(name=SERVICE, image="img:1", restart_policy=policy)
    engine.containers["x"] = ObservedContainer(
        id="x",
        name="web-x",
        service=SERVICE,
        spec_hash=s.spec_hash,
        state=RUNNING,
        created=clock.time(),
        health=Health.UNHEALTHY,
        crash_streak=1,
    )
    try:
        ctrl.set_desired(DesiredState({SERVICE: s}, (), hold_orphans=False, broken_files=()))
        start = clock.time()
        while "start" not in engine.calls and clock.time() - start <= policy.window + 10:
            ctrl.process_once()
            delay = ctrl.queue.next_delay()
            clock.advance(30.0 if delay is None else max(delay, 0.001))
        # Stopped and started again in place (issue 28), within its backoff.
        assert engine.calls.count("stop") == 1 and engine.containers["x"].running
        assert clock.time() - start <= policy.max_delay + 0.5
    finally:
        ctrl.shutdown()
