"""Heal in place (issue 28): a failed container comes back as itself, with the crash
backoff it would have had, its counts kept across a restart of healerd, and replaced only
where a start cannot serve."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.runs import Run, Termination, from_json, to_json
from healerd.core.wiring import build_loop
from healerd.daemon.runbook import FileRunBook
from healerd.engine import EngineError, EngineUnavailable
from healerd.model import (
    ContainerState,
    EngineAction,
    EngineEvent,
    Health,
    ObservedContainer,
    RestartPolicy,
    ServiceSpec,
)
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine
from tests.unit.harness.in_place import DictBook, make
from tests.unit.harness.loop import desired, drive, state


def die(ctrl: Controller, engine: FakeEngine, cid: str, code: int) -> None:
    """The container's process ends: the engine's state, then its `die` event."""
    c = engine.containers[cid]
    engine.kill(cid, exit_code=code)
    ctrl.on_event(EngineEvent(c.service, cid, EngineAction.DIED, exit_code=code, name=c.name))


def test_a_crashed_container_is_started_again_as_itself() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 2)))
    drive(ctrl, clock)
    ids = set(engine.containers)
    victim = sorted(ids)[0]
    engine.calls.clear()
    die(ctrl, engine, victim, 1)
    drive(ctrl, clock)
    assert set(engine.containers) == ids  # the same two: no create, nothing removed
    assert engine.containers[victim].running
    assert "create" not in engine.calls and engine.calls.count("start") == 1
    (c,) = [c for c in ctrl.container_statuses("web") if c.id == victim]
    assert c.restarts == 1
    kinds = [(e.kind, e.message) for e in ctrl.events.since(0) if e.service == "web"]
    assert ("restarted", "restarted in place: exited with code 1") in kinds
    assert state(ctrl, "web") == "Converged"


def test_crash_loop_backoff_applies_in_place_and_never_gives_up() -> None:
    ctrl, engine, clock = make()
    s = spec("web", 1, restart_policy=RestartPolicy(delay=10.0, max_delay=40.0, window=600.0))
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    (cid,) = engine.containers
    engine.crash_images.add("img:1")  # from now on every start exits at once
    t0 = clock.monotonic()
    die(ctrl, engine, cid, 1)
    starts: list[float] = []
    while len(starts) < 6:
        before = engine.calls.count("start")
        ctrl.process_once()
        if engine.calls.count("start") > before:
            starts.append(round(clock.monotonic() - t0))
        delay = ctrl.queue.next_delay()
        assert delay is not None  # it never gives up
        clock.advance(delay)
    # The first death heals at once; then 10 s doubling to the 40 s cap, for ever.
    assert starts == [0, 10, 30, 70, 110, 150], starts
    assert set(engine.containers) == {cid}  # one container all along
    ctrl.process_once()  # it crashed again: waiting out the next 40 s
    assert state(ctrl, "web") == "CrashLoopBackOff"


def test_a_start_the_engine_refuses_backs_off_as_a_crash_and_never_gives_up() -> None:
    """A port another container took: each refused start in place was retried at once
    (the pass that planned it reset the queue's failure count), a start every few
    milliseconds for as long as the port stayed taken (review)."""
    ctrl, engine, clock = make()
    s = spec("web", 1, restart_policy=RestartPolicy(delay=10.0, max_delay=40.0, window=600.0))
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    (cid,) = engine.containers
    engine.refuse_starts[cid] = "Bind for 0.0.0.0:80 failed: port is already allocated"
    t0 = clock.monotonic()
    die(ctrl, engine, cid, 1)
    starts: list[float] = []
    for _ in range(200):  # passes, with the clock moved only to the queue's next delay
        before = engine.calls.count("start")
        ctrl.process_once()
        if engine.calls.count("start") > before:
            starts.append(round(clock.monotonic() - t0))
        if len(starts) == 6:
            break
        delay = ctrl.queue.next_delay()
        assert delay is not None  # it never gives up
        clock.advance(delay)
    assert starts == [0, 10, 30, 70, 110, 150], starts
    ctrl.process_once()
    assert state(ctrl, "web") == "CrashLoopBackOff"
    reason = ctrl.statuses()[0].reason
    assert "start refused 6 time(s) in a row (start web-" in reason
    assert "port is already allocated)" in reason, "the engine's words"
    # The port free again: the next try starts it, and its refusals are forgotten.
    del engine.refuse_starts[cid]
    clock.advance(40.0)
    drive(ctrl, clock)
    assert engine.containers[cid].running and state(ctrl, "web") == "Converged"
    assert set(engine.containers) == {cid}


def test_the_streak_outlives_a_restart_of_healerd() -> None:
    book = DictBook()
    ctrl, engine, clock = make(book=book)
    s = spec("web", 1, restart_policy=RestartPolicy(delay=10.0, max_delay=300.0, window=600.0))
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    (cid,) = engine.containers
    for _ in range(3):  # three quick crashes in a row: streak 3
        die(ctrl, engine, cid, 1)
        drive(ctrl, clock, max_seconds=60)
    assert book.runs[cid].streak == 3 and book.runs[cid].restarts == 3
    last = book.runs[cid].last
    assert last is not None and last.exit_code == 1
    ctrl.shutdown()
    # A new healerd on the same engine and book: the next quick crash waits 40 s.
    again, _, _ = make(clock, engine, book)
    again.set_desired(desired(s))
    drive(again, clock, max_seconds=5)
    die(again, engine, cid, 1)
    drive(again, clock, max_seconds=30)
    assert not engine.containers[cid].running
    assert state(again, "web") == "CrashLoopBackOff"
    drive(again, clock, max_seconds=20)
    assert engine.containers[cid].running and book.runs[cid].streak == 4


def test_a_run_that_lasted_the_window_starts_a_new_streak() -> None:
    book = DictBook()
    ctrl, engine, clock = make(book=book)
    s = spec("web", 1, restart_policy=RestartPolicy(delay=10.0, max_delay=300.0, window=60.0))
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    (cid,) = engine.containers
    for _ in range(3):
        die(ctrl, engine, cid, 1)
        drive(ctrl, clock, max_seconds=60)
    clock.advance(61)  # this run lasted the window (counted from its start, not its create)
    die(ctrl, engine, cid, 1)
    drive(ctrl, clock, max_seconds=1)
    assert engine.containers[cid].running and book.runs[cid].streak == 1


def test_a_container_a_start_cannot_bring_back_is_replaced_in_the_same_pass() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (old,) = engine.containers
    engine.unstartable[old] = "network 9cb4 not found"
    die(ctrl, engine, old, 1)
    engine.calls.clear()
    ctrl.process_once()
    assert engine.calls.count("start") == 1 and engine.calls.count("create") == 1
    (new,) = [c for c in engine.running("web")]
    # The new one names the old one: kept as history (its logs), never started again.
    assert new.id != old and new.replaces == old and new.restarts == 1
    drive(ctrl, clock)
    assert set(engine.containers) == {old, new.id} and state(ctrl, "web") == "Converged"
    events = [(e.kind, e.message) for e in ctrl.events.since(0) if e.service == "web"]
    assert any(k == "created" and "network 9cb4 not found" in m for k, m in events), events


def test_a_removed_container_is_replaced() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (old,) = engine.containers
    c = engine.containers.pop(old)  # docker rm -f
    ctrl.on_event(EngineEvent("web", old, EngineAction.DESTROYED, name=c.name))
    drive(ctrl, clock)
    (new,) = engine.running("web")
    assert new.id != old and "start" not in engine.calls[-3:]


def test_a_removal_seen_only_as_its_die_is_replaced_in_the_same_pass() -> None:
    """rm -f: the die event comes while the list still shows the container; the start
    in place finds it gone (or being removed), and the same action creates."""
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (old,) = engine.containers
    engine.unstartable[old] = "container is marked for removal and cannot be started"
    die(ctrl, engine, old, 137)
    engine.calls.clear()
    ctrl.process_once()
    assert engine.calls == ["list", "start", "create"]
    assert len(engine.running("web")) == 1


def test_a_sigkill_event_alone_starts_nothing_before_the_death() -> None:
    """docker kill: the `kill` event comes ~60 ms before the process is gone; a start
    then would be a no-op ("already running") and the death would be healed later."""
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (cid,) = engine.containers
    engine.calls.clear()
    ctrl.on_event(EngineEvent("web", cid, EngineAction.KILLED, signal=9, name="x"))
    drive(ctrl, clock)
    assert "start" not in engine.calls and "create" not in engine.calls
    die(ctrl, engine, cid, 137)
    drive(ctrl, clock)
    assert engine.containers[cid].running and engine.calls.count("start") == 1
    # Stopped from outside: no crash, the streak stays 0.
    (c,) = ctrl.container_statuses("web")
    assert c.restarts == 1


def test_unhealthy_is_restarted_in_place_once_then_replaced() -> None:
    ctrl, engine, clock = make()
    s = spec("web", 1, unhealthy_grace=5.0)
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    (cid,) = engine.containers
    engine.set(cid, health=Health.UNHEALTHY)
    ctrl.enqueue_all()
    drive(ctrl, clock, max_seconds=6)
    # Past its grace: stopped and started again, the same container.
    assert set(engine.containers) == {cid} and engine.calls.count("stop") == 1
    engine.set(cid, health=Health.UNHEALTHY)  # still sick after the restart
    ctrl.enqueue_all()
    drive(ctrl, clock, max_seconds=30)
    assert len(engine.containers) == 2
    (new,) = engine.running("web")
    assert new.id != cid and new.replaces == cid


def test_healthy_again_after_a_restart_in_place_resets_the_count() -> None:
    ctrl, engine, clock = make()
    s = spec("web", 1, unhealthy_grace=5.0)
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    (cid,) = engine.containers
    for _ in range(2):
        engine.set(cid, health=Health.UNHEALTHY)
        ctrl.enqueue_all()
        drive(ctrl, clock, max_seconds=30)
        engine.set(cid, health=Health.HEALTHY)  # cured by the restart
        ctrl.enqueue_all()
        drive(ctrl, clock, max_seconds=1)
    assert set(engine.containers) == {cid}  # restarted in place both times


def test_min_ready_seconds_counts_from_the_restart_not_the_creation() -> None:
    from healerd.model import UpdateConfig

    ctrl, engine, clock = make()
    s = spec("web", 1, update_config=UpdateConfig(min_ready_seconds=30))
    ctrl.set_desired(desired(s))
    drive(ctrl, clock, max_seconds=40)
    (cid,) = engine.containers
    assert state(ctrl, "web") == "Converged"
    die(ctrl, engine, cid, 1)
    ctrl.process_once()
    assert engine.containers[cid].running
    drive(ctrl, clock, max_seconds=5)
    assert state(ctrl, "web") == "Progressing"  # up for 5 s of its 30
    drive(ctrl, clock, max_seconds=30)
    assert state(ctrl, "web") == "Converged"


# -- the run book's file -----------------------------------------------------------


def test_runs_round_trip_through_json_and_skip_what_is_not_theirs() -> None:
    runs = {
        "a" * 64: Run(3, 7, 1, 1000.5, Termination(137, True, "killed", 999.0)),
        "b" * 64: Run(0, 1),
    }
    assert from_json(json.loads(json.dumps(to_json(runs)))) == runs
    assert from_json([1, 2]) == {}
    assert from_json({"x": {"streak": "no"}, "y": 3}) == {}


def test_the_file_is_written_whole_in_its_own_thread_and_read_back(tmp_path: Path) -> None:
    book = FileRunBook(tmp_path / "state")
    assert book.load() == {}  # no file yet
    runs = {"c1": Run(2, 2, 0, 5.0, Termination(1, False, "exited with code 1", 4.0))}
    book.save(runs)
    book.flush()
    path = tmp_path / "state" / "runs.json"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(path.parent).st_mode & 0o777 == 0o700
    assert FileRunBook(tmp_path / "state").load() == runs
    assert sorted(os.listdir(path.parent)) == ["runs.json"]  # no temporary file left


def test_an_unreadable_file_is_a_warning_and_no_streak(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "runs.json").write_text("{not json")
    assert FileRunBook(tmp_path).load() == {}
    assert "crash-loop streaks start again" in caplog.text


def test_a_storm_of_saves_is_written_as_the_last_one(tmp_path: Path) -> None:
    book = FileRunBook(tmp_path)
    for i in range(200):
        book.save({f"c{j}": Run(j, j) for j in range(i + 1)})
    book.flush()
    assert len(FileRunBook(tmp_path).load()) == 200


def test_engine_states_a_start_cannot_leave_are_not_started() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (cid,) = engine.containers
    engine.set(cid, state=ContainerState.DEAD)
    ctrl.enqueue_all()
    engine.calls.clear()
    drive(ctrl, clock)
    assert "start" not in engine.calls and engine.calls.count("create") == 1


def test_a_kill_forgives_one_death_not_the_crashes_after_its_restart() -> None:
    """Forgiveness belongs to a run: a container restarted in place after a docker kill
    (or an engine restart) that then crashes is in a crash loop like any other."""
    ctrl, engine, clock = make()
    s = spec("web", 1, restart_policy=RestartPolicy(delay=10.0, max_delay=300.0, window=600.0))
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    (cid,) = engine.containers
    c = engine.containers[cid]
    for _ in range(3):  # docker kill, three times: no crash, started again at once
        ctrl.on_event(EngineEvent("web", cid, EngineAction.KILLED, signal=9, name=c.name))
        die(ctrl, engine, cid, 137)
        ctrl.process_once()
        assert engine.containers[cid].running
    die(ctrl, engine, cid, 1)  # a crash: streak 1, at once
    ctrl.process_once()
    assert engine.containers[cid].running
    die(ctrl, engine, cid, 1)  # a second one: 10 s
    ctrl.process_once()
    assert not engine.containers[cid].running and state(ctrl, "web") == "CrashLoopBackOff"


def test_a_signal_that_asks_for_a_reload_forgives_nothing() -> None:
    ctrl, engine, clock = make()
    s = spec("web", 1, restart_policy=RestartPolicy(delay=10.0, max_delay=300.0, window=600.0))
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    (cid,) = engine.containers
    die(ctrl, engine, cid, 1)  # crash 1: at once
    ctrl.process_once()
    # SIGHUP: reload
    ctrl.on_event(EngineEvent("web", cid, EngineAction.KILLED, signal=1, name="x"))
    die(ctrl, engine, cid, 1)  # crash 2 of the run: waits, SIGHUP or not
    ctrl.process_once()
    assert not engine.containers[cid].running


def test_the_engines_answers_that_only_a_new_container_gets_past() -> None:
    """What makes a start in place fall back to a replacement (the Docker adapter's
    start), in the engine's own words as measured on dockerd 20.10."""
    import docker.errors
    import requests

    from healerd.engine.docker.errors import needs_new

    def err(status: int, text: str) -> docker.errors.APIError:
        r = requests.Response()
        r.status_code = status
        return docker.errors.APIError("start", response=r, explanation=text)

    assert needs_new(err(404, "network 9cb47e39 not found"))
    assert needs_new(err(404, "No such container: 3dd56fd0"))
    assert needs_new(err(409, "container is marked for removal and cannot be started"))
    assert needs_new(
        err(400, 'invalid mount config for type "bind": bind source path does not exist: /x')
    )
    assert needs_new(err(403, "endpoint with name web-1 already exists in network web_default"))
    # Not a new container's to fix: a host port taken, an engine error.
    assert not needs_new(err(500, "driver failed programming external connectivity on "
                                  "endpoint x: bind: address already in use"))  # fmt: skip
    assert not needs_new(err(409, "conflict: something else"))
    assert not needs_new(None)


def test_logs_previous_is_the_run_before_the_latest_start_in_place() -> None:
    """No history container after a heal in place: the previous run's output is what
    the same container wrote before its latest start (the engine keeps one log)."""
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"logs", "death"})
    ctrl = build_loop(engine, clock, LoopSettings(workers=2))
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (cid,) = engine.containers
    engine.say(cid, "run 1: starting", "run 1: the last words")
    clock.advance(5)
    die(ctrl, engine, cid, 137)
    drive(ctrl, clock)
    clock.advance(1)
    engine.say(cid, "run 2: starting")
    c, stream = ctrl.logs("web", previous=True, tail=1, since=None)
    assert c is not None and c.id == cid
    assert stream.read() == b"run 1: the last words\n"
    _, stream = ctrl.logs("web", previous=False, tail=None, since=None)
    assert stream.read().count(b"\n") == 3  # the whole log: every run's output
    term = ctrl.termination(cid)
    assert term is not None and term.exit_code == 137
    assert term.why == "exited with code 137 (killed)"


def test_logs_previous_of_a_replica_that_never_restarted_is_the_replaced_one() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"logs", "death"})
    ctrl = build_loop(engine, clock, LoopSettings(workers=2))
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (old,) = engine.containers
    engine.say(old, "the old one's last words")
    engine.unstartable[old] = "network 9cb4 not found"
    die(ctrl, engine, old, 1)
    drive(ctrl, clock)
    c, stream = ctrl.logs("web", previous=True, tail=5, since=None)
    assert c is not None and c.id == old and stream.read() == b"the old one's last words\n"
    assert ctrl.termination(old) is None


def test_last_lines_keeps_the_end_within_its_bounds() -> None:
    from healerd.core.postmortem import last_lines
    from healerd.engine import LogStream

    chunks = [b"a\nb", b"\nc\n", b"d\ne"]
    assert last_lines(LogStream(chunks), 2).read() == b"d\ne"
    assert last_lines(LogStream(chunks), None).read() == b"a\nb\nc\nd\ne"
    assert last_lines(LogStream([b"x" * 10 + b"\n", b"yy\n"]), None, max_bytes=5).read() == b"yy\n"
    assert last_lines(LogStream(chunks), 0).read() == b""


def test_an_engine_that_cannot_be_reached_drops_the_pooled_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dockerd shutting down refuses new connections but answers on open ones: a start
    slipped through one is stopped again by the shutdown (which waits for it, up to its
    timeout) and taken for a crash (chaos soak, known issue 5). The first call that
    cannot reach the engine closes the pool: the next ones find the engine away."""
    from healerd.engine import EngineUnavailable
    from healerd.engine.docker import DockerEngine

    engine = DockerEngine(f"unix://{tmp_path}/no.sock", timeout=2)
    closed: list[bool] = []
    monkeypatch.setattr(engine._client.api, "close", lambda: closed.append(True))
    with pytest.raises(EngineUnavailable):
        engine.version()
    assert closed == [True]


def test_a_death_while_a_start_is_on_its_way_is_started_without_waiting_for_it() -> None:
    """A pass does not wait for its starts in place: the next death (a storm) is planned
    and started while the first start is still on its way, as a script reacting to each
    `die` would (issue 28: the storm at the engine's own speed)."""
    import threading

    from tests.support.polling import wait_for

    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 2)))
    drive(ctrl, clock)
    a, b = sorted(engine.containers)
    engine.calls.clear()
    release, asked = threading.Event(), threading.Event()
    real_start = engine.start

    def slow_start(c: ObservedContainer) -> None:
        if c.id == a:
            asked.set()
            release.wait(10)  # a start the engine takes long over
        real_start(c)

    engine.start = slow_start  # type: ignore[method-assign,assignment]
    stop = threading.Event()
    loop = threading.Thread(target=ctrl.run, args=(stop,), daemon=True)
    loop.start()
    try:
        die(ctrl, engine, a, 1)
        wait_for("a's start on its way", asked.is_set, 5, 0.01)
        die(ctrl, engine, b, 1)
        wait_for("b started while a's start waits", lambda: engine.containers[b].running, 5, 0.01)
        assert not engine.containers[a].running
        release.set()
        wait_for("a running", lambda: engine.containers[a].running, 5, 0.01)
        assert "create" not in engine.calls
    finally:
        release.set()
        stop.set()
        loop.join(5)
        ctrl.shutdown()


def test_no_start_through_an_open_connection_of_an_engine_that_shuts_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dockerd that shuts down closes its listener but answers on open connections
    while it stops its containers: a start through one would be stopped again by that
    shutdown, which then waits for it (integration runs: 15 s), and counted as a crash.
    A start (and a create) first checks that the engine takes a new connection."""
    import socket

    from healerd.engine import EngineUnavailable
    from healerd.engine.docker import DockerEngine
    from healerd.engine.docker.client import listening
    from tests.unit.harness.builders import container

    path = tmp_path / "d.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    assert listening(f"unix://{path}")
    server.close()  # the listener is gone, the socket file stays (as in a shutdown)
    assert not listening(f"unix://{path}")
    engine = DockerEngine(f"unix://{path}", timeout=2)
    api = engine._client.api
    monkeypatch.setattr(api, "start", lambda *a: pytest.fail("started anyway"))
    closed: list[bool] = []
    monkeypatch.setattr(api, "close", lambda: closed.append(True))
    with pytest.raises(EngineUnavailable, match="engine unreachable"):
        engine.start(container(spec("web", 1), ContainerState.EXITED))
    assert closed == [True]


def test_a_service_in_its_crash_loop_backoff_shows_its_restarts() -> None:
    """The service's RESTARTS counts its stopped replicas too: during a backoff the one
    container is stopped, and its count is the point (it showed 0)."""
    ctrl, engine, clock = make()
    s = spec("web", 1, restart_policy=RestartPolicy(delay=10.0, max_delay=40.0, window=600.0))
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    (cid,) = engine.containers
    engine.crash_images.add("img:1")
    die(ctrl, engine, cid, 1)
    ctrl.process_once()  # started again, crashed at once: now waiting 10 s
    ctrl.process_once()
    st = {x.name: x for x in ctrl.statuses()}["web"]
    assert st.state == "CrashLoopBackOff" and st.restarts == 1, st


def test_a_replacement_on_its_way_to_start_is_not_started_by_another_pass() -> None:
    """docker rm -f: the start in place is refused, the same action creates the
    replacement; a pass for the service's news (the destroy event) that lists between
    that create and its start sees it `created`: it is healerd's own, on its way, not a
    container to start in place (chaos soak seed 748017: started twice, a crash counted)."""
    import threading

    from tests.support.polling import wait_for

    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (old,) = engine.containers
    c = engine.containers[old]
    real_create = engine.create_and_start
    made, go = threading.Event(), threading.Event()

    def slow_create(s: ServiceSpec, name: str, *args: object, **kw: object) -> str:
        cid = real_create(s, name, *args, **kw)  # type: ignore[arg-type]
        engine.set(cid, state=ContainerState.CREATED)  # made, not started yet
        made.set()
        go.wait(10)
        engine.set(cid, state=ContainerState.RUNNING)
        return cid

    engine.create_and_start = slow_create  # type: ignore[method-assign,assignment]
    engine.unstartable[old] = "container is marked for removal and cannot be started"
    stop = threading.Event()
    loop = threading.Thread(target=ctrl.run, args=(stop,), daemon=True)
    loop.start()
    try:
        engine.calls.clear()
        ctrl.on_event(
            EngineEvent("web", old, EngineAction.KILLED, signal=9, name=c.name)
        )  # rm -f's
        die(ctrl, engine, old, 137)
        wait_for("the replacement made", made.is_set, 5, 0.01)
        del engine.containers[old]
        lists = engine.calls.count("list")
        ctrl.on_event(EngineEvent("web", old, EngineAction.DESTROYED, name=c.name))
        wait_for("the destroy's pass", lambda: engine.calls.count("list") > lists, 5, 0.01)
        go.set()
        wait_for("one running", lambda: len(engine.running("web")) == 1, 5, 0.01)
        assert engine.calls.count("start") == 1, engine.calls  # the refused one only
    finally:
        go.set()
        stop.set()
        loop.join(5)
        ctrl.shutdown()


def test_a_container_removed_while_its_start_is_on_its_way_is_replaced_once() -> None:
    """docker rm -f while healerd's start in place is on its way: the destroy's pass lists
    no container, but the start stands for the replica (it ends in the replacement, as
    the engine refuses a start of a container gone); a pass that made one too made two,
    and a scale-down removed one (integration: test_ownership's replay test, CI)."""
    import threading

    from tests.support.polling import wait_for

    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (old,) = engine.containers
    c = engine.containers[old]
    real_start = engine.start
    asked, go = threading.Event(), threading.Event()

    def slow_start(x: ObservedContainer) -> None:
        asked.set()
        go.wait(10)  # the engine takes its time; meanwhile the container is removed
        real_start(x)

    engine.start = slow_start  # type: ignore[method-assign,assignment]
    stop = threading.Event()
    loop = threading.Thread(target=ctrl.run, args=(stop,), daemon=True)
    loop.start()
    try:
        die(ctrl, engine, old, 1)
        wait_for("the start on its way", asked.is_set, 5, 0.01)
        engine.calls.clear()
        clock.advance(0.01)
        del engine.containers[old]
        ctrl.on_event(EngineEvent("web", old, EngineAction.DESTROYED, name=c.name))
        wait_for("the destroy's pass", lambda: "list" in engine.calls, 5, 0.01)
        go.set()

        def settled() -> bool:
            clock.advance(0.01)  # the clock goes on: stamps differ, as on a host
            calls = engine.calls  # the start ended, and a pass looked after the last create
            last = len(calls) - 1 - calls[::-1].index("create") if "create" in calls else None
            ended = "start" in calls and last is not None and "list" in calls[last:]
            return ended and len(engine.running("web")) >= 1

        wait_for("one running, looked at again", settled, 5, 0.01)
        assert engine.calls.count("create") == 1, engine.calls
        assert len(engine.containers) == 1
    finally:
        go.set()
        stop.set()
        loop.join(5)
        ctrl.shutdown()


def test_a_create_whose_start_failed_is_not_counted_as_on_its_way() -> None:
    """The engine restarted between healerd's create and its start: the container is
    left `created`. Once that call has failed it is no replica on its way to start (it
    was counted as one for good, and the service stayed short of its replicas: CI,
    test_engine_restart_mid_rollout_ends_converged_on_the_new_spec)."""
    from healerd.engine.api import EngineUnavailable

    ctrl, engine, clock = make()
    real_create = engine.create_and_start
    failed: list[str] = []

    def create_then_lose_the_engine(s: ServiceSpec, name: str, *args: object, **kw: object) -> str:
        cid = real_create(s, name, *args, **kw)  # type: ignore[arg-type]
        if not failed:
            engine.set(cid, state=ContainerState.CREATED)  # made, its start lost
            failed.append(cid)
            raise EngineUnavailable("engine unreachable (ConnectionError)")
        return cid

    engine.create_and_start = create_then_lose_the_engine  # type: ignore[method-assign,assignment]
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock, max_seconds=30)
    assert failed
    assert len(engine.running("web")) == 1, {k: v.state for k, v in engine.containers.items()}


def test_a_list_taken_before_a_start_in_place_ended_does_not_start_it_again() -> None:
    """A pass's look began while its service's start in place was on its way, and the
    pass ran once that start had ended (its worker was late): the list says exited, the
    memory no longer says starting. The row is older than the start: the container
    counts as starting, not as exited once more (chaos soak seed 141384, after an engine
    restart: started twice 22 ms apart, the second counted as a crash)."""
    import threading

    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("web", 1)))
    drive(ctrl, clock)
    (cid,) = engine.containers
    real_start = engine.start
    go = threading.Event()

    def slow_start(x: ObservedContainer) -> None:
        go.wait(10)
        real_start(x)

    engine.start = slow_start  # type: ignore[method-assign,assignment]
    die(ctrl, engine, cid, 0)
    d, looks = ctrl.parts.dispatcher, ctrl.parts.looks
    (key,) = ctrl.queue.get_batch(10)
    d.handle(key, looks.observe([key]))  # plans the start in place, not waited for
    clock.advance(0.01)
    early = looks.observe([key])  # the next pass's look: the start is still on its way
    clock.advance(0.01)
    go.set()
    ctrl.parts.executor.drain()  # the start ends: the memory says so
    clock.advance(0.01)
    engine.calls.clear()
    d.handle(key, early)
    ctrl.parts.executor.drain()
    assert "start" not in engine.calls, engine.calls
    (c,) = [c for c in ctrl.container_statuses("web") if c.id == cid]
    assert c.restarts == 1, c
    restarted = [e.message for e in ctrl.events.since(0) if e.kind == "restarted"]
    assert restarted == ["restarted in place: exited with code 0"], restarted


class _FlakyStop(FakeEngine):
    """A stop that fails: stuck (the process exits too late), or the engine goes away."""

    mode = ""  # "stuck": the stop fails, "away": the engine restarts during the stop

    def stop(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        if self.mode == "stuck":
            self.mode = ""
            self.calls.append("stop")
            self.set(container.id, state=ContainerState.EXITED, exit_code=137)  # too late
            raise EngineError(f"stop {container.name}: cannot stop container: tried to kill")
        if self.mode == "away":
            self.mode = ""
            self.calls.append("stop")
            self.set(container.id, state=ContainerState.EXITED, exit_code=0)  # engine restart
            self.down = True
            raise EngineUnavailable("fake engine down")
        super().stop(container, stop_timeout)


@pytest.mark.parametrize("mode", ["stuck", "away"])
def test_a_failed_stop_is_no_refused_start(mode: str) -> None:
    """Review: the start held after its container's stop failed (an unhealthy restart)
    counted as a start the engine refused, and backed the next one off."""
    clock = FakeClock()
    engine = _FlakyStop(clock, allow=LOOP_CALLS)
    ctrl = build_loop(engine, clock, LoopSettings(workers=1))
    ctrl.set_desired(desired(spec("web", 1, unhealthy_grace=5.0)))
    drive(ctrl, clock)
    (cid,) = engine.containers
    engine.set(cid, health=Health.UNHEALTHY)
    engine.mode = mode
    ctrl.enqueue_all()
    drive(ctrl, clock, max_seconds=5.2)
    assert engine.calls.count("stop") == 1, engine.calls
    refused = dict(ctrl.parts.memory.mem.refused)
    engine.down = False
    ctrl.enqueue_all()
    drive(ctrl, clock, max_seconds=3)
    reasons = [s.reason for s in ctrl.statuses()]
    assert engine.containers[cid].running, (refused, reasons)
    assert not refused, "no start was refused by the engine"


def test_a_run_between_refusals_ends_the_row() -> None:
    """Review: refused twice, then started by hand (docker start) and ran for a day: the next
    refusal is the first of a new row, not the third."""
    ctrl, engine, clock = make()
    s = spec("web", 1, restart_policy=RestartPolicy(delay=10.0, max_delay=300.0, window=600.0))
    ctrl.set_desired(desired(s))
    drive(ctrl, clock)
    (cid,) = engine.containers

    def die() -> None:
        c = engine.containers[cid]
        engine.kill(cid, exit_code=1)
        ctrl.on_event(EngineEvent("web", cid, EngineAction.DIED, exit_code=1, name=c.name))

    engine.refuse_starts[cid] = "port is already allocated"
    die()
    drive(ctrl, clock, max_seconds=15)  # refused at 0 and 10
    assert ctrl.parts.memory.mem.refused[cid][0] == 2
    del engine.refuse_starts[cid]
    engine.allow = engine.allow | {"start"}
    engine.start(engine.containers[cid])  # the operator, by hand
    ctrl.on_event(EngineEvent("web", cid, EngineAction.STARTED, name=engine.containers[cid].name))
    drive(ctrl, clock, max_seconds=86400)
    assert engine.containers[cid].running
    engine.refuse_starts[cid] = "port is already allocated"
    die()
    drive(ctrl, clock, max_seconds=1)
    reason = ctrl.statuses()[0].reason
    assert "refused 1 time(s)" in reason and "next try in 10s" in reason, reason
