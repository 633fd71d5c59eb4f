"""Node awareness without a host: pressure rules, admission and priorities, the pull
check, the engine call cap, and the loop under a fake probe."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from healerd.config import DesiredState, SettingsError, load_settings
from healerd.core.admission import Admission, Claim, Use
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller
from healerd.core.planner import PlanContext, plan
from healerd.core.plantypes import Offer
from healerd.core.pressure import assess, pull_refusal
from healerd.core.ratelimit import TokenBucket
from healerd.core.timings import Timings
from healerd.engine.pacing import UNPACED, lane
from healerd.host import HostSample
from healerd.model import (
    ActionKind,
    ContainerState,
    NodeLimits,
    ServiceSpec,
    Threshold,
    UpdateConfig,
)
from tests.unit.harness.builders import container, spec
from tests.unit.harness.fake_engine import FakeEngine
from tests.unit.harness.node import Gi, Mi, admission, drive, host, loop

SAMPLE_TTL, RESERVATION_SECONDS = Timings().host_sample_ttl, Timings().reservation


@dataclasses.dataclass(frozen=True)
class Grant:
    replacements: int
    extras: int
    reason: str


def grant(
    a: Admission, service: str, priority: int, replacements: int, extras: int, need: int
) -> Grant:
    """What a plan wanting this many replacements and extras gets of `a`'s offer, as the
    planner takes it (replacements first, extras only without pressure)."""

    def make(offer: Offer) -> Use:
        fits = replacements + extras if offer.fits is None else offer.fits
        r = min(replacements, fits)
        e = min(extras, fits - r) if offer.extras else 0
        return Use(r, e, replacements + extras - r - e)

    use, reason = a.fit(service, priority, need, make, lambda u: u)
    return Grant(use.replacements, use.extras, reason)


# -- pressure rules ------------------------------------------------------------------


def test_kubelet_like_defaults() -> None:
    lim = NodeLimits()
    assert lim.memory_available == Threshold(100 * Mi)
    assert lim.disk_free == Threshold(10, percent=True)
    assert lim.inodes_free == Threshold(5, percent=True)
    p = assess(host(), lim)
    assert not p.any and p.reasons == () and p.memory_headroom == 4 * Gi - 100 * Mi


@pytest.mark.parametrize(
    ("sample", "flag", "words"),
    [
        (host(mem_avail=90 * Mi), "memory",
         "memory pressure: 90Mi available, below the threshold of 100Mi"),
        (host(disk_free=9 * Gi), "disk",
         "disk pressure: 9Gi free on /var/lib/docker, below the threshold of 10%"),
        (host(inodes_free=40_000), "inodes",
         "inode pressure: 40000 inodes free on /var/lib/docker, below the threshold of 5%"),
    ],
)  # fmt: skip
def test_each_resource_below_its_threshold_is_pressure(
    sample: HostSample, flag: str, words: str
) -> None:
    p = assess(sample, NodeLimits())
    assert p.any and [k for k, v in p.flags.items() if v] == [flag]
    assert p.reasons == (words,)


def test_figures_that_cannot_be_read_are_never_pressure() -> None:
    p = assess(HostSample(), NodeLimits(memory_available=Threshold(99, percent=True)))
    assert not p.any and p.memory_headroom is None and p.disk_headroom is None


def test_pull_is_refused_when_it_would_cross_the_disk_threshold() -> None:
    lim = NodeLimits(pull_disk_margin=500 * Mi)
    # 10.3 GiB free, floor 10 GiB: 300 MiB of room.
    sample = host(disk_free=10 * Gi + 300 * Mi)
    why = pull_refusal("app:2", None, sample, lim)
    assert why is not None and why.startswith(
        "not pulling app:2: it needs about 500Mi (pull_disk_margin)"
    )
    assert "the pull would leave less than the threshold of 10%" in why
    # An earlier version's size is the better guess when there is one.
    assert pull_refusal("app:2", 200 * Mi, sample, lim) is None
    why = pull_refusal("app:2", 400 * Mi, sample, lim)
    assert why is not None and "400Mi (its earlier version's size)" in why
    # Under disk pressure nothing is pulled; without a readable disk nothing is refused.
    assert "disk pressure" in (pull_refusal("a", 1, host(disk_free=Gi), lim) or "")
    assert pull_refusal("a", 10 * Gi, HostSample(), lim) is None


# -- admission -------------------------------------------------------------------------


def test_without_pressure_and_with_room_everything_is_granted() -> None:
    a, _, _ = admission(host())
    g = grant(a, "web", 0, replacements=2, extras=3, need=32 * Mi)
    assert (g.replacements, g.extras, g.reason) == (2, 3, "")
    assert a.waiting() == {}


def test_memory_pressure_holds_back_every_create_and_says_why() -> None:
    a, _, _ = admission(host(mem_avail=50 * Mi))
    g = grant(a, "web", 0, replacements=1, extras=2, need=32 * Mi)
    assert (g.replacements, g.extras) == (0, 0)
    assert g.reason == (
        "3 container(s) wait for resources: memory pressure: 50Mi available, below the "
        "threshold of 100Mi"
    )
    assert a.waiting() == {"web": g.reason}


def test_disk_pressure_stops_extras_but_not_replacements() -> None:
    a, _, _ = admission(host(disk_free=5 * Gi))
    g = grant(a, "web", 0, replacements=1, extras=1, need=32 * Mi)
    assert (g.replacements, g.extras) == (1, 0)
    assert "no extra containers under pressure (disk pressure: 5Gi free" in g.reason


def test_room_counts_the_need_and_what_was_just_granted() -> None:
    # 100 MiB above the threshold: three containers of 32 MiB fit, a fourth does not.
    a, _, clock = admission(host(mem_avail=200 * Mi))
    assert grant(a, "a", 0, 0, 2, 32 * Mi).extras == 2
    g = grant(a, "b", 0, 0, 2, 32 * Mi)
    assert g.extras == 1 and g.reason.startswith(
        "1 container(s) wait for resources: each needs 32Mi"
    )
    # A grant's reservation lapses once the containers' memory shows in the sample.
    clock.advance(RESERVATION_SECONDS + SAMPLE_TTL)
    assert grant(a, "b", 0, 0, 1, 32 * Mi).extras == 1
    assert a.waiting() == {}


def test_higher_priorities_that_miss_containers_claim_the_room_first() -> None:
    # Room for one 64 MiB container.
    a, _, _ = admission(host(mem_avail=100 * Mi + 100 * Mi))
    a.set_claims({"db": Claim(10, 1, 64 * Mi), "cache": Claim(0, 1, 64 * Mi)})
    low = grant(a, "cache", 0, 1, 0, 64 * Mi)
    assert low.replacements == 0 and low.reason.endswith("db (priority 10) go first")
    high = grant(a, "db", 10, 1, 0, 64 * Mi)
    assert high.replacements == 1 and high.reason == ""
    # Equal priorities do not claim ahead of each other.
    a2, _, _ = admission(host(mem_avail=300 * Mi))
    a2.set_claims({"x": Claim(0, 1, 64 * Mi)})
    assert grant(a2, "y", 0, 1, 0, 64 * Mi).replacements == 1


def test_new_limits_apply_at_once() -> None:
    a, _, _ = admission(host(mem_avail=500 * Mi), memory_available=Threshold(1 * Gi))
    assert a.pressure().memory
    a.update_limits(NodeLimits(memory_available=Threshold(100 * Mi)))
    assert not a.pressure().memory


def test_pressure_changes_are_reported_once_each_way() -> None:
    a, probe, clock = admission(host())
    seen: list[tuple[bool, bool]] = []
    a.subscribe(lambda old, new: seen.append((old.any, new.any)))
    a.pressure()
    probe.host = host(mem_avail=10 * Mi)
    for _ in range(3):
        clock.advance(SAMPLE_TTL)
        a.pressure()
    probe.host = host()
    clock.advance(SAMPLE_TTL)
    a.pressure()
    assert seen == [(False, True), (True, False)]


def test_the_host_is_sampled_at_most_once_a_second() -> None:
    a, probe, clock = admission(host())
    for _ in range(50):
        grant(a, "web", 0, 1, 1, 32 * Mi)
    assert probe.samples == 1
    clock.advance(SAMPLE_TTL)
    a.pressure()
    assert probe.samples == 2


# -- the planner's room limits -----------------------------------------------------------


def test_planner_keeps_failed_containers_it_has_no_room_to_replace() -> None:
    s = spec("web", 3)
    dead = [container(s, ContainerState.EXITED) for _ in range(2)]
    alive = container(s, created=0.0)
    ctx = PlanContext(now=100.0, room=1, extras_allowed=False)
    p = plan("web", s, [alive, *dead], ctx)
    starts = [a for a in p.actions if a.kind is ActionKind.START]
    others = [a for a in p.actions if a.kind is not ActionKind.START]
    # The oldest dead one is started again in place (issue 28); the other stays, for its
    # logs and its slot.
    assert [a.container for a in starts] == [dead[0]] and others == []
    assert p.waiting == 1 and p.held == 0 and not p.converged


def test_planner_makes_only_the_extras_it_has_room_for_and_holds_the_rollout() -> None:
    s = spec("web", 4)
    ctx = PlanContext(now=100.0, room=1)
    p = plan("web", s, [container(s, created=0.0)], ctx)
    assert p.creates == 1 and p.waiting == 2
    # A rolling update needs a surge container: with no room it does not start.
    new = dataclasses.replace(s, image="img:2", replicas=2)
    old = [container(s, created=0.0) for _ in range(2)]
    p = plan("web", new, old, PlanContext(now=100.0, room=0))
    assert p.actions == () and p.stale == 2
    assert plan("web", new, old, PlanContext(now=100.0)).creates == 1


# -- the engine call cap ---------------------------------------------------------------


def test_token_bucket_lets_a_burst_through_then_paces() -> None:
    clock = FakeClock()
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock.advance(s)

    b = TokenBucket(rate=10.0, burst=5, clock=clock, sleep=sleep)
    for _ in range(5):
        assert b.wait() == 0.0
    for _ in range(10):
        b.wait()
    assert slept == pytest.approx([0.1] * 10)
    clock.advance(10.0)  # refills to the burst, no further
    assert [b.reserve() for _ in range(6)][-1] == pytest.approx(0.1)


def test_the_engine_meter_counts_and_paces_every_request() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow={"list"})

    def sleep(s: float) -> None:
        clock.advance(s)

    engine.meter.pacer = TokenBucket(2.0, 2, clock, sleep)
    start = clock.monotonic()
    for _ in range(6):
        engine.list_managed()
    stats = engine.meter.stats
    assert stats.calls == 6 and stats.throttled == 4
    assert clock.monotonic() - start == pytest.approx(2.0)
    # One call after the other: each waits for the next token.
    assert stats.throttled_seconds == pytest.approx(4 * 0.5)
    # A lane of its own (a reader's, the hand-off's): neither paced nor counted here.
    with lane(UNPACED):
        for _ in range(10):
            engine.list_managed()
    assert stats.calls == 6 and clock.monotonic() - start == pytest.approx(2.0)


# -- the loop under a fake host ----------------------------------------------------------


def desired(*specs: ServiceSpec) -> DesiredState:
    return DesiredState({s.name: s for s in specs}, (), False, ())


def status(ctrl: Controller, name: str) -> tuple[str, str]:
    st = {s.name: s for s in ctrl.statuses()}[name]
    return st.state, st.reason


def test_a_scale_up_waits_under_memory_pressure_and_goes_on_when_it_ends() -> None:
    ctrl, engine, clock, probe = loop(host())
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock, 10)
    assert len(engine.running("web")) == 1
    probe.host = host(mem_avail=80 * Mi)
    clock.advance(SAMPLE_TTL)
    ctrl.set_desired(desired(spec("web", 3)))
    drive(ctrl, clock, 10)
    assert len(engine.running("web")) == 1
    state, reason = status(ctrl, "web")
    assert state == "WaitingForResources"
    assert reason == (
        "2 container(s) wait for resources: memory pressure: 80Mi available, below the "
        "threshold of 100Mi"
    )
    kinds = [e.kind for e in ctrl.events.since(0)]
    assert "pressure" in kinds and "waiting-for-resources" in kinds
    probe.host = host()
    drive(ctrl, clock, 10)
    assert len(engine.running("web")) == 3 and status(ctrl, "web")[0] == "Converged"
    assert "pressure-ended" in [e.kind for e in ctrl.events.since(0)]


def test_disk_pressure_replaces_a_crashed_container_but_starts_no_extra() -> None:
    ctrl, engine, clock, probe = loop(host())
    ctrl.set_desired(desired(spec("web", 2)))
    drive(ctrl, clock, 10)
    probe.host = host(disk_free=1 * Gi)
    clock.advance(SAMPLE_TTL)
    engine.kill(engine.running("web")[0].id)
    ctrl.set_desired(desired(spec("web", 3)))
    drive(ctrl, clock, 10)
    assert len(engine.running("web")) == 2
    assert status(ctrl, "web")[0] == "WaitingForResources"


def test_under_pressure_a_rolling_update_waits_and_the_old_containers_keep_serving() -> None:
    ctrl, engine, clock, probe = loop(host())
    ctrl.set_desired(desired(spec("web", 2)))
    drive(ctrl, clock, 10)
    ids = {c.id for c in engine.running("web")}
    probe.host = host(mem_avail=10 * Mi)
    clock.advance(SAMPLE_TTL)
    ctrl.set_desired(desired(spec("web", 2, image="img:2")))
    drive(ctrl, clock, 10)
    assert {c.id for c in engine.running("web")} == ids
    state, reason = status(ctrl, "web")
    assert state == "WaitingForResources" and reason.startswith("the rolling update waits: memory")
    probe.host = host()
    drive(ctrl, clock, 60)
    assert {c.spec_hash for c in engine.running("web")} == {spec("web", 2, image="img:2").spec_hash}


def test_with_room_for_one_the_higher_priority_service_is_healed_first() -> None:
    # 100 MiB above the threshold, 64 MiB a container: room for exactly one.
    ctrl, engine, clock, probe = loop(host(), container_memory=64 * Mi)
    low, high = spec("cache", 1), spec("db", 1, priority=10)
    ctrl.set_desired(desired(low, high))
    drive(ctrl, clock, 10)
    probe.host = host(mem_avail=200 * Mi)
    clock.advance(SAMPLE_TTL)
    for c in engine.running("cache") + engine.running("db"):
        engine.kill(c.id)
    # The low one comes first in the queue; it must still wait.
    ctrl.queue.add("cache")
    ctrl.queue.add("db")
    drive(ctrl, clock, 3)
    assert len(engine.running("db")) == 1 and engine.running("cache") == []
    waits = [e.message for e in ctrl.events.since(0) if e.kind == "waiting-for-resources"]
    assert waits[0].endswith("db (priority 10) go first"), waits
    assert status(ctrl, "cache")[0] == "WaitingForResources"
    # The db container's memory now shows in the sample: no room is left for cache.
    probe.host = host(mem_avail=136 * Mi)
    drive(ctrl, clock, 10)
    assert engine.running("cache") == []
    probe.host = host()
    drive(ctrl, clock, 10)
    assert len(engine.running("cache")) == 1 and status(ctrl, "cache")[0] == "Converged"


def test_a_pull_that_would_fill_the_disk_is_refused_and_nothing_else_changes() -> None:
    ctrl, engine, clock, _ = loop(host(disk_free=10 * Gi + 100 * Mi))
    engine.images = {"img:1"}
    engine.pullable = {"img:2"}
    ctrl.set_desired(desired(spec("web", 2)))
    drive(ctrl, clock, 10)
    ids = {c.id for c in engine.running("web")}
    ctrl.set_desired(desired(spec("web", 2, image="img:2")))
    drive(ctrl, clock, 30)
    assert "pull" not in engine.calls
    assert {c.id for c in engine.running("web")} == ids
    state, reason = status(ctrl, "web")
    assert state == "WaitingForResources"
    assert reason.startswith("not pulling img:2: it needs about 500Mi (pull_disk_margin)")
    # An earlier version of the image on disk gives a better guess: small enough here.
    engine.image_sizes["img"] = 50 * Mi
    drive(ctrl, clock, 30)
    assert "pull" in engine.calls


# -- settings ----------------------------------------------------------------------------


def test_thresholds_in_healerd_yaml(tmp_path: Path) -> None:
    path = tmp_path / "healerd.yaml"
    path.write_text(
        "strict_modes: false\npressure_memory_available: 5%\npressure_disk_free: 2Gi\n"
        "pressure_inodes_free: 1000\ncontainer_memory_estimate: 64Mi\n"
        "engine_calls_per_second: 12.5\nengine_call_burst: 30\n"
    )
    lim = load_settings(path).node_limits
    assert lim.memory_available == Threshold(5.0, percent=True)
    assert lim.disk_free == Threshold(2 * Gi) and lim.inodes_free == Threshold(1000)
    assert lim.container_memory == 64 * Mi
    assert (lim.engine_calls_per_second, lim.engine_call_burst) == (12.5, 30)
    path.write_text(
        "strict_modes: false\npressure_memory_available: 120%\npressure_disk_free: lots\n"
        "engine_calls_per_second: 0\nengine_call_burst: 0\n"
    )
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    fields = [e.field for e in err.value.errors]
    assert fields == [
        "pressure_memory_available",
        "pressure_disk_free",
        "engine_calls_per_second",
        "engine_call_burst",
    ]
    assert "from 0% to below 100%" in str(err.value.errors[0])


def test_a_grant_is_not_also_counted_as_a_claim() -> None:
    # Room for two 64 MiB containers; db (priority 10) misses one and gets it.
    a, _, _ = admission(host(mem_avail=100 * Mi + 130 * Mi))
    a.set_claims({"db": Claim(10, 1, 64 * Mi), "cache": Claim(0, 1, 64 * Mi)})
    assert grant(a, "db", 10, 1, 0, 64 * Mi).replacements == 1
    assert grant(a, "cache", 0, 1, 0, 64 * Mi).replacements == 1


def test_a_higher_priority_that_cannot_fit_at_all_blocks_nobody() -> None:
    # 300 MiB of room: the big one (1 GiB) cannot start now; the small one may.
    a, _, _ = admission(host(mem_avail=100 * Mi + 300 * Mi))
    a.set_claims({"big": Claim(10, 1, Gi), "small": Claim(0, 1, 64 * Mi)})
    assert grant(a, "small", 0, 1, 0, 64 * Mi).replacements == 1
    assert grant(a, "big", 10, 1, 0, Gi).replacements == 0


# -- found in review ---------------------------------------------------------------------


def test_claims_do_not_crash_when_memory_cannot_be_read() -> None:
    a, _, _ = admission(HostSample())
    a.set_claims({"hi": Claim(10, 2, 32 * Mi)})
    assert grant(a, "lo", 0, 1, 0, 32 * Mi).replacements == 1


def test_a_rollout_waiting_out_pressure_longer_than_its_deadline_still_completes() -> None:
    ctrl, engine, clock, probe = loop(host())
    ctrl.set_desired(desired(spec("web", 2)))
    drive(ctrl, clock, 10)
    probe.host = host(mem_avail=10 * Mi)
    clock.advance(SAMPLE_TTL)
    new = spec("web", 2, image="img:2", update_config=UpdateConfig(progress_deadline=30.0))
    ctrl.set_desired(desired(new))
    drive(ctrl, clock, 100)
    assert status(ctrl, "web")[0] == "WaitingForResources"
    probe.host = host()
    drive(ctrl, clock, 60)
    assert {c.spec_hash for c in engine.running("web")} == {new.spec_hash}
    assert status(ctrl, "web")[0] == "Converged"


def test_under_disk_pressure_a_higher_prioritys_extras_claim_no_room() -> None:
    # db wants two more (extras: they cannot start under pressure); cache lost one (a
    # replacement, which disk pressure does not stop): cache must not wait for db.
    ctrl, engine, clock, probe = loop(host(), container_memory=64 * Mi)
    ctrl.set_desired(desired(spec("db", 1, priority=10), spec("cache", 1)))
    drive(ctrl, clock, 10)
    probe.host = host(mem_avail=200 * Mi, disk_free=Gi)
    clock.advance(SAMPLE_TTL)
    engine.kill(engine.running("cache")[0].id)
    ctrl.set_desired(desired(spec("db", 3, priority=10), spec("cache", 1)))
    ctrl.enqueue_all()
    drive(ctrl, clock, 30)
    assert len(engine.running("cache")) == 1
    assert len(engine.running("db")) == 1 and status(ctrl, "db")[0] == "WaitingForResources"


def test_an_unhealthy_container_is_restarted_even_under_memory_pressure() -> None:
    # Its new run takes what stopping it frees: the swap needs no room.
    ctrl, engine, clock, probe = loop(host())
    ctrl.set_desired(desired(spec("web", 1, unhealthy_grace=5.0)))
    drive(ctrl, clock, 10)
    (c,) = engine.running("web")
    probe.host = host(mem_avail=10 * Mi)
    clock.advance(SAMPLE_TTL)
    engine.set(c.id, health="unhealthy")
    ctrl.reconcile_now("web")
    engine.calls.clear()
    drive(ctrl, clock, 30)
    (again,) = engine.running("web")
    assert again.id == c.id and engine.calls.count("stop") == engine.calls.count("start") == 1


def test_merge_keys_that_expand_too_far_are_refused() -> None:
    from healerd.config.yamlload import MAX_MERGED, load_yaml

    big = "{" + ", ".join(f"k{i}: 1" for i in range(MAX_MERGED + 1)) + "}"
    data, errors = load_yaml(f"base: &b {big}\nx:\n  <<: *b\n", "m.yaml")
    assert data is None and "merge keys expand to more than" in str(errors[0])


def test_a_pass_that_reserved_nothing_gives_back_no_earlier_reservation() -> None:
    """An image problem gives back what its pass reserved; a pass whose creates all
    waited reserved nothing, and must not give back the reservation of the pass before
    it, whose containers are being made (a third pass would count their room twice)."""
    from healerd.core.plantypes import Plan
    from healerd.core.room import HostRoom
    from healerd.model import Action, ActionKind

    a, _, _ = admission(host(mem_avail=200 * Mi))  # 100 MiB of room
    room = HostRoom(a)
    s = spec("web", 3, mem_limit=64 * Mi)
    create = Action(ActionKind.CREATE, "web", "missing", s)

    def wanting(n: int) -> Callable[[Offer], Plan]:
        def make(offer: Offer) -> Plan:
            fits = n if offer.fits is None else min(n, offer.fits)
            return Plan(actions=(create,) * fits, converged=False, waiting=n - fits)

        return make

    first, _ = room.fit("web", s, wanting(1))
    assert first.creates == 1 and a.room() == 100 * Mi - 64 * Mi
    second, reason = room.fit("web", s, wanting(2))
    assert second.creates == 0 and second.waiting == 2 and reason
    room.release("web", second)  # its image could not be had
    assert a.room() == 100 * Mi - 64 * Mi  # the first pass's creates still hold theirs
    room.release("web", first)
    assert a.room() == 100 * Mi
