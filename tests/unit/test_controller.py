"""The loop with an injected clock and an in-memory engine: no sleeps, no threads."""

from __future__ import annotations

import itertools

import pytest

from healerd.config import DesiredState
from healerd.core.controller import Controller, LoopSettings
from healerd.core.wiring import build_loop
from healerd.model import (
    ContainerState,
    EngineAction,
    EngineEvent,
    PullPolicy,
    RestartPolicy,
    ServiceSpec,
    UpdateConfig,
)
from healerd.vocabulary import EventKind
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import FakeEngine
from tests.unit.harness.loop import desired, drive, make, state


def test_one_list_call_per_batch_whatever_the_number_of_services() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 2), spec("b", 1), spec("c", 3)))
    ctrl.process_once()
    assert engine.calls.count("list") == 1
    assert engine.calls.count("create") == 6
    drive(ctrl, clock)
    assert {s.name: s.state for s in ctrl.statuses()} == dict.fromkeys("abc", "Converged")


def test_a_converged_service_costs_one_list_and_nothing_else() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 2)))
    drive(ctrl, clock)
    engine.calls.clear()
    ctrl.enqueue_all()
    drive(ctrl, clock)
    assert engine.calls == ["list"]


def test_engine_errors_back_off_exponentially_and_never_give_up() -> None:
    ctrl, engine, clock = make()
    engine.fail_creates = 10
    ctrl.set_desired(desired(spec("a", 1)))
    times = []
    for _ in range(10):
        ctrl.process_once()
        delay = ctrl.queue.next_delay()
        assert delay is not None
        times.append(delay)
        assert state(ctrl, "a") == "Degraded"
        clock.advance(delay)
    assert times == [0.5, 1, 2, 4, 8, 8, 8, 8, 8, 8]
    drive(ctrl, clock)
    assert len(engine.running("a")) == 1 and state(ctrl, "a") == "Converged"


def test_one_failing_service_does_not_hold_up_another() -> None:
    ctrl, engine, clock = make()
    engine.images = {"img:1"}
    ctrl.set_desired(
        desired(spec("bad", 1, image="missing:1", pull_policy=PullPolicy.NEVER), spec("good", 1))
    )
    drive(ctrl, clock, max_seconds=30)
    assert len(engine.running("good")) == 1 and state(ctrl, "good") == "Converged"
    assert state(ctrl, "bad") == "ErrImageNeverPull"
    assert "pull_policy is never" in {s.name: s.reason for s in ctrl.statuses()}["bad"]
    assert "pull" not in engine.calls


def test_a_failed_pull_backs_off_and_leaves_running_containers_alone() -> None:
    ctrl, engine, clock = make()
    engine.images = {"img:1"}
    ctrl.set_desired(desired(spec("a", 2)))
    drive(ctrl, clock)
    before = set(engine.containers)
    ctrl.set_desired(desired(spec("a", 2, image="img:2")))
    drive(ctrl, clock, max_seconds=20)
    assert set(engine.containers) == before
    assert state(ctrl, "a") == "ImagePullBackOff"
    pulls = engine.calls.count("pull")
    assert 2 <= pulls <= 6  # 2 s doubling to 8 s over 20 s: backing off, not hammering
    engine.pullable.add("img:2")
    drive(ctrl, clock, max_seconds=20)
    assert {c.spec_hash for c in engine.containers.values()} == {spec("a", image="img:2").spec_hash}


def test_a_retried_pull_stays_image_pull_back_off_with_the_failure_s_words() -> None:
    """As the kubelet's: no flap to Progressing (a state change: an event, a log line,
    a notification's intake) at each retry; the state changes when the pull works."""
    ctrl, engine, clock = make()
    engine.images = {"img:1"}
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    seen: list[tuple[str, str]] = []
    pull = engine.pull

    def watched(image: str, auth: object = None) -> None:
        st = {s.name: s for s in ctrl.statuses()}["a"]
        seen.append((str(st.state), st.reason))
        pull(image, auth)  # type: ignore[arg-type]

    engine.pull = watched  # type: ignore[method-assign]
    ctrl.set_desired(desired(spec("a", 1, image="img:2")))
    drive(ctrl, clock, max_seconds=20)
    assert len(seen) >= 2 and seen[0] == ("Progressing", "pulling img:2")
    failure = "cannot pull img:2: no registry"
    assert seen[1:] == [("ImagePullBackOff", f"pulling img:2; the last try: {failure}")] * (
        len(seen) - 1
    )
    kinds = [e.kind for e in ctrl.events.since(0)]
    assert kinds.count(EventKind.IMAGE_PULL_BACKOFF) == 1  # once, not once a retry
    assert {s.name: s for s in ctrl.statuses()}["a"].reason.startswith(f"{failure}; retry in ")
    engine.pullable.add("img:2")
    drive(ctrl, clock, max_seconds=20)
    assert state(ctrl, "a") == "Converged"


def test_pull_policy_always_pulls_once_per_spec() -> None:
    ctrl, engine, clock = make()
    engine.pullable.add("img:1")
    ctrl.set_desired(desired(spec("a", 2, pull_policy=PullPolicy.ALWAYS)))
    drive(ctrl, clock)
    (c, _) = engine.running("a")
    engine.kill(c.id)
    ctrl.on_event(EngineEvent("a", c.id, EngineAction.DIED))
    drive(ctrl, clock)
    assert engine.calls.count("pull") == 1 and len(engine.running("a")) == 2


def test_engine_down_then_back_resyncs_every_service() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1), spec("b", 1)))
    drive(ctrl, clock)
    engine.down = True
    for cid in list(engine.containers):
        engine.kill(cid)
    ctrl.enqueue_all()
    for _ in range(6):
        ctrl.process_once()
        clock.advance(ctrl.queue.next_delay() or 0.0)
    assert ctrl.engine_ok is False
    assert {s.state for s in ctrl.statuses()} == {"EngineUnreachable"}
    engine.down = False
    ctrl.queue.add("a", force=True)
    drive(ctrl, clock, max_seconds=1.0)
    # Both come back at once: containers stopped by an engine outage are no crash loop.
    assert len(engine.running("a")) == 1 and len(engine.running("b")) == 1


def test_an_outage_is_looked_at_every_tenth_second_for_a_minute_then_every_second() -> None:
    """After an engine restart every second counts; a long outage must not spend the
    engine-call budget on ten failed looks a second."""
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    engine.down = True
    ctrl.enqueue_all()
    start, looks = clock.monotonic(), []
    while clock.monotonic() - start < 70:
        if ctrl.process_once():
            looks.append(clock.monotonic() - start)
        clock.advance(ctrl.queue.next_delay() or 0.01)
    early = [b - a for a, b in itertools.pairwise(looks) if b < 55]
    late = [b - a for a, b in itertools.pairwise(looks) if b > 62]
    assert early and max(early) <= 0.1 + 1e-9
    assert late and min(late) >= 1.0 - 1e-9 and max(late) <= 1.0 + 1e-9
    assert "retry in 1.0s" in {s.name: s for s in ctrl.statuses()}["a"].reason
    engine.down = False  # back: the next outage starts fast again
    ctrl.queue.add("a", force=True)
    drive(ctrl, clock, max_seconds=2.0)
    engine.down = True
    ctrl.queue.add("a", force=True)
    ctrl.process_once()
    assert "retry in 0.1s" in {s.name: s for s in ctrl.statuses()}["a"].reason


def crashy(replicas: int = 1) -> ServiceSpec:
    return spec(
        "crashy",
        replicas,
        image="crash:1",
        restart_policy=RestartPolicy(delay=1.0, max_delay=16.0, window=60.0),
    )


def test_a_crash_loop_backs_off_per_replica_and_says_so() -> None:
    ctrl, engine, clock = make()
    engine.crash_images.add("crash:1")
    ctrl.set_desired(desired(crashy()))
    heals_at = []
    start = clock.time()

    def heals() -> int:
        return engine.calls.count("create") + engine.calls.count("start")

    for _ in range(400):
        before = heals()
        if not ctrl.process_once():
            clock.advance(ctrl.queue.next_delay() or 1.0)
        if heals() > before:
            heals_at.append(round(clock.time() - start, 2))
        if clock.time() - start > 60:
            break
    # First container, a start in place at once, then 1, 2, 4, 8, 16, 16 s apart.
    assert engine.calls.count("create") == 1
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(heals_at)]
    assert gaps[:7] == [0, 1, 2, 4, 8, 16, 16]
    st = {s.name: s for s in ctrl.statuses()}["crashy"]
    assert st.state == "CrashLoopBackOff"
    assert "restarting failed container crashy-" in st.reason and "exit code 1" in st.reason
    assert st.next_retry is not None


def test_a_crash_loop_never_delays_another_service() -> None:
    ctrl, engine, clock = make()
    engine.crash_images.add("crash:1")
    ctrl.set_desired(desired(crashy(), spec("web", 2)))
    drive(ctrl, clock, max_seconds=20)
    (c, _) = engine.running("web")
    engine.kill(c.id)
    ctrl.on_event(EngineEvent("web", c.id, EngineAction.KILLED))
    ctrl.on_event(EngineEvent("web", c.id, EngineAction.DIED))
    ctrl.process_once()
    assert len(engine.running("web")) == 2


def test_an_operator_kill_is_no_crash() -> None:
    ctrl, engine, clock = make()
    s = spec("web", 1, restart_policy=RestartPolicy(delay=10, max_delay=300, window=600))
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    for _ in range(5):
        (c,) = engine.running("web")
        ctrl.on_event(EngineEvent("web", c.id, EngineAction.KILLED))
        engine.kill(c.id)
        ctrl.on_event(EngineEvent("web", c.id, EngineAction.DIED))
        ctrl.process_once()
        assert len(engine.running("web")) == 1, "a killed replica is started again at once"
        drive(ctrl, clock, max_seconds=0.5)


def test_unhealthy_is_restarted_after_its_grace_only() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1, unhealthy_grace=10.0)))
    drive(ctrl, clock)
    (c,) = engine.running("web")
    engine.set(c.id, health="starting")
    ctrl.reconcile_now("web")
    drive(ctrl, clock, max_seconds=30)
    assert engine.running("web") == [engine.containers[c.id]], "starting is left alone"
    engine.set(c.id, health="unhealthy")
    ctrl.reconcile_now("web")
    drive(ctrl, clock, max_seconds=9)
    assert "stop" not in engine.calls
    drive(ctrl, clock, max_seconds=2)
    # Stopped and started again: the same container (issue 28; the kubelet's way).
    assert engine.calls.count("stop") == 1 and engine.running("web")[0].id == c.id


def test_rolling_update_replaces_every_container_without_dropping_below_desired() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 4)))
    drive(ctrl, clock)
    ctrl.set_desired(desired(spec("web", 4, image="img:2")))
    lowest = 4
    for _ in range(200):
        if not ctrl.process_once():
            delay = ctrl.queue.next_delay()
            if delay is None:
                break
            clock.advance(delay)
        lowest = min(lowest, len(engine.running("web")))
    new_hash = spec("web", image="img:2").spec_hash
    assert {c.spec_hash for c in engine.containers.values()} == {new_hash}
    assert len(engine.running("web")) == 4 and lowest >= 4
    assert engine.calls.count("create") == 8


def test_a_rollout_to_a_crashing_spec_halts_and_keeps_the_old_ones() -> None:
    ctrl, engine, clock = make()
    engine.crash_images.add("crash:1")
    ctrl.set_desired(desired(spec("web", 3)))
    drive(ctrl, clock)
    olds = {c.id for c in engine.running("web")}
    bad = spec("web", 3, image="crash:1", update_config=UpdateConfig(progress_deadline=30))
    ctrl.set_desired(desired(bad))
    drive(ctrl, clock, max_seconds=40)
    assert {c.id for c in engine.running("web")} == olds
    st = {s.name: s for s in ctrl.statuses()}["web"]
    assert st.state in ("RolloutHalted", "CrashLoopBackOff")
    drive(ctrl, clock, max_seconds=40)
    assert {c.id for c in engine.running("web")} == olds
    assert (
        any(e.kind == "rollout-halted" for e in ctrl.events.since(0)) or st.state == "RolloutHalted"
    )


def test_undeclared_services_are_discovered_and_removed() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 2), spec("b", 1)))
    drive(ctrl, clock)
    ctrl.set_desired(desired(spec("a", 2)))
    drive(ctrl, clock)
    assert engine.running("b") == [] and len(engine.running("a")) == 2


def test_orphans_are_held_while_a_broken_file_may_declare_them() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1), spec("b", 1)))
    drive(ctrl, clock)
    ctrl.set_desired(desired(spec("a", 1), hold=True))
    drive(ctrl, clock)
    assert len(engine.running("b")) == 1 and state(ctrl, "b") == "Held"


def test_a_paused_service_is_left_alone_until_resumed() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    ctrl.pause("a")
    (c,) = engine.running("a")
    engine.kill(c.id)
    ctrl.on_event(EngineEvent("a", c.id, EngineAction.DIED))
    drive(ctrl, clock)
    assert engine.running("a") == [] and state(ctrl, "a") == "Paused"
    assert ctrl.preview() == [] or all(a.service != "a" for a in ctrl.preview())
    ctrl.resume("a")
    drive(ctrl, clock)
    assert len(engine.running("a")) == 1


def test_preview_plans_without_acting() -> None:
    ctrl, engine, _clock = make()
    ctrl.set_desired(desired(spec("a", 3)))
    actions = ctrl.preview("a")
    assert [a.kind.value for a in actions] == ["create"] * 3 and engine.containers == {}


def test_a_die_event_ahead_of_the_list_is_acted_on_at_once() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    (c,) = engine.running("a")
    engine.calls.clear()
    ctrl.on_event(EngineEvent("a", c.id, EngineAction.DIED))  # the list still says running
    ctrl.process_once()
    # Started in place at once: the engine holds the start until it has handled the
    # exit (its list lags its event by tens of milliseconds).
    assert engine.calls == ["list", "start"]


def test_a_kill_event_is_no_death_until_its_die() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    (c,) = engine.running("a")
    engine.calls.clear()
    for signal in (1, 9):  # not even SIGKILL: the process may not be gone yet
        ctrl.on_event(EngineEvent("a", c.id, EngineAction.KILLED, signal=signal))
        drive(ctrl, clock, max_seconds=1)
        assert engine.running("a") == [c] and set(engine.calls) <= {"list"}
    engine.kill(c.id)
    ctrl.on_event(EngineEvent("a", c.id, EngineAction.DIED))
    ctrl.process_once()
    assert engine.running("a")[0].id == c.id and engine.calls.count("start") == 1


def test_a_start_after_a_die_means_it_runs_again() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    (c,) = engine.running("a")
    ctrl.on_event(EngineEvent("a", c.id, EngineAction.DIED))
    ctrl.on_event(EngineEvent("a", c.id, EngineAction.STARTED))
    drive(ctrl, clock, max_seconds=3)
    assert engine.running("a") == [c]


def test_a_pause_event_ahead_of_the_list_is_checked_again_until_the_list_agrees() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    (c,) = engine.running("a")
    ctrl.on_event(EngineEvent("a", c.id, EngineAction.PAUSED))  # the list still says running
    ctrl.process_once()
    assert engine.running("a") == [c]
    assert ctrl.queue.next_delay() == pytest.approx(0.02)
    engine.set(c.id, state=ContainerState.PAUSED)
    clock.advance(0.02)
    engine.calls.clear()
    ctrl.process_once()
    # Stopped (unpaused first) and started again: the same container.
    (again,) = engine.running("a")
    assert again.id == c.id and engine.calls == ["list", "stop", "start"]


def test_an_event_that_the_list_never_confirms_stops_being_rechecked() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    (c,) = engine.running("a")
    ctrl.on_event(EngineEvent("a", c.id, EngineAction.PAUSED))
    engine.calls.clear()
    drive(ctrl, clock, max_seconds=5.0)
    # About one look every 20 ms for the 2 s window, then quiet.
    assert 50 <= engine.calls.count("list") <= 110
    assert ctrl.queue.next_delay() is None
    assert engine.running("a") == [c]


def test_a_service_whose_file_broke_keeps_running_and_says_config_error() -> None:
    from healerd.config import ConfigError

    ctrl, engine, clock = make()
    s = spec("web", 2, source_file="/etc/healerd/conf.d/web.yaml")
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    before = set(engine.containers)
    err = ConfigError("/etc/healerd/conf.d/web.yaml", 3, "services.web.replica", "unknown key")
    ctrl.set_desired(
        DesiredState(
            services={"web": s},
            errors=(err,),
            hold_orphans=False,
            broken_files=("/etc/healerd/conf.d/web.yaml",),
        )
    )
    drive(ctrl, clock)
    st = {x.name: x for x in ctrl.statuses()}["web"]
    assert st.state == "ConfigError" and "services.web.replica: unknown key" in st.reason
    assert set(engine.containers) == before
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    assert state(ctrl, "web") == "Converged"
    # The events a notification is made of: the file refused, then fixed.
    told = [(e.kind, e.message) for e in ctrl.events.since(0)]
    assert (EventKind.CONFIG_ERROR, str(err)) in told
    assert (EventKind.CONFIG_FIXED, "/etc/healerd/conf.d/web.yaml: reads cleanly again") in told


def test_every_change_of_a_service_state_reaches_the_state_listeners() -> None:
    ctrl, _engine, clock = make()
    seen: list[tuple[str, str | None, str]] = []
    ctrl.state_listeners.append(lambda c: seen.append((c.service, c.old, c.new)))
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    assert seen[0][:2] == ("a", None) and seen[-1] == ("a", seen[-1][1], "Converged")
    assert all(old != new for _, old, new in seen)


def test_before_any_config_is_read_nothing_counts_as_undeclared() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 2)))
    drive(ctrl, clock)
    fresh = build_loop(engine, clock, LoopSettings())
    fresh.enqueue_all(force=True)
    drive(fresh, clock)
    assert len(engine.running("a")) == 2


def test_an_oom_event_does_not_kill_a_container_that_still_runs() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1)))
    drive(ctrl, clock)
    (c,) = engine.running("a")
    ctrl.on_event(EngineEvent("a", c.id, EngineAction.OOM))
    drive(ctrl, clock, max_seconds=3)
    assert engine.running("a") == [c]


def test_always_with_the_registry_away_heals_from_the_local_image() -> None:
    ctrl, engine, clock = make()
    engine.images = {"img:1"}  # present, but not pullable
    ctrl.set_desired(desired(spec("a", 1, pull_policy=PullPolicy.ALWAYS)))
    drive(ctrl, clock, max_seconds=5)
    assert len(engine.running("a")) == 1 and "pull" in engine.calls


def test_a_failed_pull_is_not_retried_on_every_hint() -> None:
    ctrl, engine, _ = make()
    engine.images = set()
    ctrl.set_desired(desired(spec("a", 1)))
    ctrl.process_once()
    assert engine.calls.count("pull") == 1
    for _ in range(5):
        ctrl.on_event(EngineEvent("a", "x", EngineAction.DESTROYED))
        ctrl.enqueue_all()
        ctrl.process_once()
    assert engine.calls.count("pull") == 1


def _run_until_idle(ctrl: Controller, engine: FakeEngine) -> None:
    """The threaded loop until every key is done (fake time stands still meanwhile)."""
    import threading

    from tests.support.polling import wait_for

    stop = threading.Event()
    t = threading.Thread(target=ctrl.run, args=(stop,), daemon=True)
    t.start()
    try:
        wait_for("idle", lambda: not ctrl.queue.pending(), 10, 0.01)
    finally:
        stop.set()
        ctrl.queue.shut_down()
        t.join(5)


def test_a_resync_lists_once_though_its_keys_come_in_batches_of_the_worker_count() -> None:
    ctrl, engine, clock = make()  # 2 workers
    ctrl.set_desired(desired(*(spec(f"s{i}", 1) for i in range(7))))
    drive(ctrl, clock)
    lists = engine.calls.count("list")
    ctrl.enqueue_all()
    clock.advance(0.01)
    _run_until_idle(ctrl, engine)
    assert engine.calls.count("list") == lists + 1
    assert ctrl.stats.reused_looks >= 3  # 8 keys (7 and discovery), at most 2 a batch


def test_a_look_is_not_reused_for_a_key_queued_after_it_began_or_when_old() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("a", 1), spec("b", 1)))
    drive(ctrl, clock)  # the last look began now
    clock.advance(0.01)
    ctrl.queue.add("a")  # queued after that look began
    assert ctrl.parts.looks.reused(["a"]) is None
    clock.advance(0.01)
    ctrl.process_once()  # a new look, begun after a's add
    lists = engine.calls.count("list")
    assert ctrl.parts.looks.reused(["a"]) is not None
    clock.advance(2.5)  # older than LOOK_REUSE
    assert ctrl.parts.looks.reused(["a"]) is None
    ctrl.enqueue_all()
    clock.advance(0.01)
    _run_until_idle(ctrl, engine)
    assert engine.calls.count("list") == lists + 1
