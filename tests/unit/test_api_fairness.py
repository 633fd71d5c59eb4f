"""One local user must not be able to lock the others (root, the admins) out of the API,
slow healing down, or flood the log (issue 15, findings 3, 4 and 6).

The server here is the real one, on a real socket, with the fake daemon of test_api.py.
A test cannot easily be another uid in-process, so the kernel's answer is stood in for:
`peer_of` is patched to give a client that bound its socket to the abstract name
`\\0healerd-test-uid-UID-...` that uid (every other client is who it really is, root).
tests/integration/test_api_fairness.py does the same with a real second uid.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from healerd.config import Settings
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.ratelimit import LastLook
from healerd.core.wiring import build_loop
from healerd.daemon.api import server as api_module
from healerd.daemon.api.limits import ConnectionLimits, Refusal, Ticket
from healerd.daemon.api.server import AdminPolicy, ApiOptions, ApiServer, Peer
from healerd.daemon.main import Daemon
from healerd.daemon.ratelog import RateLimitedLog
from healerd.model import ContainerState, EngineAction, EngineEvent, ObservedContainer
from healerd.vocabulary import EventKind
from tests.unit.harness.api import (
    FakeDaemon,
    call,
    connect_as,
    fake_peer_of,
    raw,
)
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine
from tests.unit.harness.files import NOBODY, UNIT, service_section


def answer(s: socket.socket) -> tuple[int, Any]:
    """Read a whole answer from `s`: its status and JSON payload."""
    chunks = []
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        chunks.append(b)
    resp = b"".join(chunks)
    head, _, body = resp.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


VERSION = b"GET /v1/version HTTP/1.0\r\n\r\n"


def ask(path: Path, uid: int, request: bytes = VERSION) -> tuple[int, Any]:
    """One request from `uid`, and its answer (a refusal may come before the request is
    sent: a broken pipe then is no error)."""
    s = connect_as(path, uid)
    with contextlib.suppress(OSError):
        s.sendall(request)
    try:
        return answer(s)
    finally:
        s.close()


def handler_threads() -> int:
    return sum("process_request_thread" in t.name for t in threading.enumerate())


def wait_until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApiServer]:
    """The API with its default limits (64 connections, 10 s per request)."""
    monkeypatch.setattr(api_module, "peer_of", fake_peer_of)
    srv = ApiServer(FakeDaemon(tmp_path / "healerd.sock"))
    srv.start()
    yield srv
    srv.stop()


def answered(socks: list[socket.socket]) -> int:
    """How many of `socks` have an answer (or a close) waiting."""
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN)
    return len(poller.poll(0))


@contextlib.contextmanager
def held(
    path: Path, uid: int, n: int, request: bytes = b"", *, refused: int = 0
) -> Iterator[list[socket.socket]]:
    """`n` connections from `uid`, each having sent `request` (nothing: a slow client);
    once `refused` of them have their answer."""
    socks = []
    try:
        for _ in range(n):
            s = connect_as(path, uid)
            if request:
                with contextlib.suppress(OSError):
                    s.sendall(request)
            socks.append(s)
        time.sleep(0.2)  # the server has taken them all from its backlog
        wait_until(lambda: answered(socks) >= refused, 5)
        yield socks
    finally:
        for s in socks:
            s.close()


def timed_status(path: Path) -> tuple[int, float]:
    t0 = time.monotonic()
    code, _ = call(path, "GET", "/v1/status")
    return code, time.monotonic() - t0


# -- finding 3: one user cannot lock root out ---------------------------------------------------


def test_root_gets_in_while_another_user_holds_100_idle_connections(server: ApiServer) -> None:
    with held(server.path, NOBODY, 100, refused=84):
        code, seconds = timed_status(server.path)
        assert code == 200 and seconds < 1.0, (code, seconds)


def test_root_gets_in_while_another_user_holds_100_long_polls(server: ApiServer) -> None:
    poll = b"GET /v1/events?after=999999&wait=30 HTTP/1.0\r\n\r\n"
    with held(server.path, NOBODY, 100, poll, refused=84) as socks:
        code, seconds = timed_status(server.path)
        assert code == 200 and seconds < 1.0, (code, seconds)
        # The user got its share (16), the rest a 503 that says why, at once.
        refused = []
        for s in socks:
            s.settimeout(0.05)
            with contextlib.suppress(TimeoutError):  # still polling: no answer yet
                refused.append(answer(s))
        assert len(refused) == 100 - 16, len(refused)
        assert all(c == 503 and "at most 16 per user" in p["error"] for c, p in refused)


def test_each_user_has_a_share_below_the_total(server: ApiServer) -> None:
    base = handler_threads()
    with held(server.path, 1001, 16):
        code, payload = ask(server.path, 1001)
        assert code == 503 and "uid 1001" in payload["error"], payload
        assert ask(server.path, 1002)[0] == 200
    # Once the connections are closed, the user gets in again.
    assert wait_until(lambda: handler_threads() <= base, 3)
    assert ask(server.path, 1001)[0] == 200


def test_the_last_connections_are_kept_for_root_and_the_admin_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_module, "peer_of", fake_peer_of)
    options = ApiOptions(max_connections=8, max_connections_per_user=3, reserved_connections=2)
    srv = ApiServer(FakeDaemon(tmp_path / "healerd.sock"), options)
    # uid 1000 is in the admin group; 1001-1003 are not.
    srv.api.policy = AdminPolicy(
        "healerd-admin",
        getgrnam=lambda n: SimpleNamespace(gr_gid=990, gr_mem=["alice"]),
        getpwuid=lambda uid: SimpleNamespace(pw_name={1000: "alice"}.get(uid, f"u{uid}")),
    )
    srv.start()
    try:
        with held(srv.path, 1001, 3), held(srv.path, 1002, 3):  # 6 = 8 - 2 reserved
            code, payload = ask(srv.path, 1003)
            assert code == 503 and "other than root and the admin group" in payload["error"]
            assert ask(srv.path, 1000)[0] == 200  # the admin
            assert timed_status(srv.path)[0] == 200  # root
    finally:
        srv.stop()


def test_connection_limits_count_per_uid_and_keep_the_reserve() -> None:
    admins = {1000}
    lim = ConnectionLimits(6, per_uid=2, reserved=2, is_admin=lambda p: p.uid in admins)
    assert (lim.total, lim.shared, lim.per_uid) == (6, 4, 2)

    def peer(uid: int) -> Peer:
        return Peer(1, uid, uid)

    a1, a2 = lim.admit(peer(1001)), lim.admit(peer(1001))
    assert isinstance(a1, Ticket) and isinstance(a2, Ticket)
    over = lim.admit(peer(1001))
    assert isinstance(over, Refusal) and over.kind == "api-uid-1001"
    b = [lim.admit(peer(1002)), lim.admit(peer(1002))]
    assert all(isinstance(t, Ticket) for t in b)
    full = lim.admit(peer(1003))
    assert isinstance(full, Refusal) and full.kind == "api-shared"
    admin, root = lim.admit(peer(1000)), lim.admit(peer(0))
    assert isinstance(admin, Ticket) and isinstance(root, Ticket)
    assert isinstance(lim.admit(peer(0)), Refusal)  # the total binds root too
    assert isinstance(a1, Ticket)
    lim.release(a1)
    assert isinstance(lim.admit(peer(1003)), Ticket) and lim.in_use(1001) == 1
    # Limits that do not add up still leave every uid below the total.
    odd = ConnectionLimits(4, per_uid=16, reserved=8, is_admin=lambda p: False)
    assert (odd.shared, odd.per_uid) == (1, 1)


def test_a_long_poll_ends_when_its_client_goes_away(server: ApiServer) -> None:
    base = handler_threads()
    socks = []
    for _ in range(5):
        s = connect_as(server.path, NOBODY)
        s.sendall(b"GET /v1/events?after=999999&wait=30 HTTP/1.0\r\n\r\n")
        socks.append(s)
    assert wait_until(lambda: handler_threads() >= base + 5, 2)
    t0 = time.monotonic()
    for s in socks:
        s.close()
    assert wait_until(lambda: handler_threads() <= base, 3), handler_threads()
    assert time.monotonic() - t0 < 2


def test_a_half_closed_long_poll_still_gets_its_answer(server: ApiServer) -> None:
    """Shutting the write side after the request is not leaving (curl may do it)."""
    log = server.daemon.controller.events
    threading.Timer(1.0, lambda: log.record(EventKind.CREATED, "web", "1/2 running")).start()
    t0 = time.monotonic()
    resp = raw(server.path, b"GET /v1/events?after=0&wait=5 HTTP/1.0\r\n\r\n", shut=True)
    assert json.loads(resp.split(b"\r\n\r\n", 1)[1])["events"][0]["kind"] == "created"
    assert 0.9 < time.monotonic() - t0 < 4


# -- finding 3: header memory ---------------------------------------------------------------------


def test_request_line_and_headers_are_capped_at_64_KiB_in_all(server: ApiServer) -> None:
    big = b"GET /v1/version HTTP/1.0\r\n" + b"X-A: " + b"a" * 40000 + b"\r\n"
    resp = raw(server.path, big + b"X-B: " + b"b" * 40000 + b"\r\n\r\n")
    assert resp.startswith(b"HTTP/1.0 431 "), resp[:200]
    assert b"over 65536 bytes" in resp
    resp = raw(server.path, big + b"X-B: " + b"b" * 20000 + b"\r\n\r\n")
    assert resp.startswith(b"HTTP/1.0 200 "), resp[:200]


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_oversized_headers_from_64_clients_leave_no_memory_behind(server: ApiServer) -> None:
    # 99 header lines of 60 KiB: each line within the stdlib's own limits, 5.8 MiB in all.
    head = b"GET /v1/version HTTP/1.0\r\n" + (b"X-Big: " + b"x" * 60000 + b"\r\n") * 99 + b"\r\n"
    for _ in range(3):
        call(server.path, "GET", "/v1/status")
    base = handler_threads()
    gc.collect()
    before = rss()
    codes: list[int] = []

    def client() -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(20)
        s.connect(str(server.path))
        with contextlib.suppress(OSError):
            s.sendall(head)
            s.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError, IndexError, ValueError):
            codes.append(answer(s)[0])
        s.close()

    clients = [threading.Thread(target=client) for _ in range(64)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    assert wait_until(lambda: handler_threads() <= base, 5)
    gc.collect()
    grown = rss() - before
    assert grown < 40 * 2**20, f"RSS grew by {grown / 2**20:.0f} MiB"
    assert codes and set(codes) == {431}, codes


# -- finding 6: refusals are logged rarely --------------------------------------------------------


def test_refused_connections_are_logged_once_per_kind_with_a_count(
    server: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="healerd.api")
    with held(server.path, NOBODY, 16 + 300, refused=300):
        pass
    lines = [r.getMessage() for r in caplog.records if "refusing" in r.getMessage()]
    assert len(lines) == 1, lines[:5]
    assert "uid 65534" in lines[0]
    # Once the interval is over (the reaper flushes 4 times a second), the count.
    server.ratelog.flush(time.monotonic() + 11)
    summary = [r.getMessage() for r in caplog.records if "not logged" in r.getMessage()]
    assert "[299 more like this in the last" in summary[0], summary


def test_refused_changes_are_logged_once_per_user_and_verb(
    server: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="healerd.api")
    server.api.policy = AdminPolicy(None)
    for _ in range(50):
        post = b"POST /v1/reconcile HTTP/1.0\r\nContent-Length: 0\r\n\r\n"
        assert ask(server.path, NOBODY, post)[0] == 403
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused ")]
    assert len(lines) == 1, lines[:3]


def test_ratelog_one_line_per_kind_per_interval_then_the_count() -> None:
    now = [100.0]
    logger = logging.getLogger("healerd.test.ratelog")
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    logger.propagate = False
    try:
        rl = RateLimitedLog(logger, 10.0, max_kinds=3, clock=lambda: now[0])
        assert rl.warning("a", "refused %s", "x1") is True
        for i in range(5):
            assert rl.warning("a", "refused %s", f"x{i + 2}") is False
        assert rl.warning("b", "other") is True
        rl.flush()  # the interval is not over: nothing yet
        assert records == ["refused x1", "other"]
        now[0] += 10.0
        rl.flush()
        assert records[2] == "refused x6 [5 more like this in the last 10s not logged]"
        now[0] += 10.0
        rl.flush()  # quiet kinds are forgotten
        assert rl.kinds() == 0 and len(records) == 3
        for k in range(10):  # kinds are bounded: past max_kinds they share one
            rl.warning(f"k{k}", "kind %d", k)
        assert rl.kinds() == 4 and records[3:] == ["kind 0", "kind 1", "kind 2", "kind 3"]
    finally:
        logger.removeHandler(handler)


# -- finding 4: reads do not spend the heal budget ---------------------------------------------


def container(cid: str, service: str = "web") -> ObservedContainer:
    return ObservedContainer(cid, f"{service}-{cid}", service, "h", ContainerState.RUNNING, 0.0)


def test_last_look_serves_the_fresh_list_and_lists_once_for_all_readers() -> None:
    clock = FakeClock()
    lists: list[int] = []

    def lister() -> list[ObservedContainer]:
        lists.append(1)
        time.sleep(0.05)
        return [container("b")]

    look = LastLook(clock, lister, max_age=1.0)
    look.offer([container("a")])
    assert [c.id for c in look.get()] == ["a"] and lists == []
    clock.advance(1.0)
    got: list[list[ObservedContainer]] = []
    readers = [threading.Thread(target=lambda: got.append(look.get())) for _ in range(8)]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    assert len(lists) == 1 and all([c.id for c in g] == ["b"] for g in got)
    look.offer([container("c")], at=clock.monotonic() - 5)  # older than what it has: ignored
    assert [c.id for c in look.get()] == ["b"]


def test_controller_reads_come_from_its_last_observation() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock)
    ctrl = build_loop(engine, clock, LoopSettings(workers=1))
    ctrl.enqueue_all(force=True)
    ctrl.process_once()
    lists = engine.calls.count("list")
    for _ in range(20):
        ctrl.container_statuses()
        ctrl.preview()
    assert engine.calls.count("list") == lists  # all served from the pass's list
    clock.advance(1.5)
    ctrl.container_statuses()
    ctrl.preview(None)
    assert engine.calls.count("list") == lists + 1  # stale: one list, then fresh again
    ctrl.shutdown()


def test_a_quiet_event_stream_keeps_the_last_list_current_for_readers() -> None:
    clock = FakeClock()
    lists: list[int] = []

    def lister() -> list[ObservedContainer]:
        lists.append(1)
        return [container(f"l{len(lists)}")]

    look = LastLook(clock, lister, max_age=1.0, quiet_max_age=60.0)
    look.offer([container("a")])
    clock.advance(5)
    assert [c.id for c in look.get()] == ["l1"]  # no stream: a stale list is listed again
    look.stream(True)
    clock.advance(2.5)
    look.offer([container("b")])  # begun well after the stream connected, nothing since
    clock.advance(30)
    assert [c.id for c in look.get()] == ["b"] and len(lists) == 1
    look.changed()  # an event: the list may be out of date
    clock.advance(2.5)
    assert [c.id for c in look.get()] == ["l2"] and len(lists) == 2
    clock.advance(61)  # quiet since l2, but the bound for a silent stream passed
    assert [c.id for c in look.get()] == ["l3"]
    clock.advance(2)
    look.stream(False)  # the stream is down: events could be missed
    assert [c.id for c in look.get()] == ["l4"]


def test_a_list_begun_just_after_an_event_is_not_taken_as_current() -> None:
    # The engine's list lags its events: begun 0.5 s after a `die`, it may still say
    # running. Only the 1 s rule serves it; then readers list again.
    clock = FakeClock()
    look = LastLook(clock, lambda: [container("new")], max_age=1.0)
    look.stream(True)
    clock.advance(5)
    look.changed()
    clock.advance(0.5)
    look.offer([container("old")])
    clock.advance(0.5)
    assert [c.id for c in look.get()] == ["old"]
    clock.advance(3)
    assert [c.id for c in look.get()] == ["new"]


def test_a_list_from_before_an_event_is_not_served_even_under_a_second_old() -> None:
    """healerd's own create lands after the loop's last full list: a describe right
    after it must not be shown that list (it would say the replica does not exist)."""
    clock = FakeClock()
    look = LastLook(clock, lambda: [container("made")], max_age=1.0)
    look.offer([])
    clock.advance(0.2)
    assert look.get() == []  # nothing happened since: the loop's list stands
    look.changed()  # the create's event
    clock.advance(0.1)
    assert [c.id for c in look.get()] == ["made"]


def _watched(clock: FakeClock) -> tuple[FakeEngine, Controller]:
    """A controller whose event stream connected a while ago (5 s)."""
    engine = FakeEngine(clock)
    ctrl = build_loop(engine, clock, LoopSettings(workers=1))
    ctrl.stream_state(True)
    clock.advance(5)
    return engine, ctrl


def test_the_loop_dates_its_list_by_when_it_began() -> None:
    # An event that comes while the loop's list is in flight may be missing from it.
    clock = FakeClock()
    engine, ctrl = _watched(clock)
    real = engine.list_managed

    def slow_list(service: str | None = None) -> list[ObservedContainer]:
        got = real(service)
        clock.advance(3)  # the list takes 6 s; an event comes halfway
        ctrl.on_event(EngineEvent("web", "c1", EngineAction.DIED))
        clock.advance(3)
        return got

    engine.list_managed = slow_list  # type: ignore[method-assign]
    ctrl.enqueue_all(force=True)
    ctrl.process_once()
    engine.list_managed = real  # type: ignore[method-assign]
    lists = engine.calls.count("list")
    clock.advance(5)
    ctrl.container_statuses()
    assert engine.calls.count("list") == lists + 1  # not served the list that missed it
    ctrl.shutdown()


def test_controller_readers_reuse_the_look_while_the_stream_is_quiet() -> None:
    clock = FakeClock()
    engine, ctrl = _watched(clock)
    ctrl.enqueue_all(force=True)
    ctrl.process_once()
    lists = engine.calls.count("list")
    clock.advance(20)
    ctrl.container_statuses()
    assert engine.calls.count("list") == lists  # quiet: the pass's list still holds
    ctrl.on_event(EngineEvent("web", "c1", EngineAction.DIED))
    clock.advance(0.5)
    ctrl.container_statuses()
    ctrl.container_statuses()
    assert engine.calls.count("list") == lists + 1  # an event since: one list of its own
    ctrl.shutdown()


def test_api_reads_take_no_token_from_the_heal_budget(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    settings = Settings(config_dir=tmp_path, state_dir=tmp_path / "state")
    engine = FakeEngine(allow=LOOP_CALLS | {"identity"})
    d = Daemon(settings, engine)
    heal_calls = d.engine.meter.stats.calls
    t0 = time.monotonic()
    for _ in range(30):
        d.controller.container_statuses()
        d.controller.preview(None)
    elapsed = time.monotonic() - t0
    assert d.engine.meter.stats.calls == heal_calls, "a read took a token of the heal budget"
    # One list a second for all readers together, at most (the first comes at once).
    assert engine.calls.count("list") <= 1 + int(elapsed) + 1, (engine.calls, elapsed)
    d.controller.shutdown()


# -- finding 10: the unit bounds healerd ------------------------------------------------------

MIB = {"K": 1 / 1024, "M": 1, "G": 1024}


def test_the_unit_caps_memory_and_tasks_and_hides_proc_and_core_dumps() -> None:
    from healerd.config.settings import MAX_WORKERS

    unit = service_section(UNIT)

    def mib(key: str) -> float:
        (value,) = unit[key]
        return float(value[:-1]) * MIB[value[-1]]

    # BENCHMARKS.md: about 40 MiB idle, 43 MiB with 1,000 containers; ample headroom.
    assert 4 * 45 <= mib("MemoryHigh") < mib("MemoryMax") <= 1024
    # Every thread healerd may start: 6 of its own, the workers, the action pool (twice
    # the workers), the API's and the metrics server's connections.
    most = 6 + MAX_WORKERS + max(4, 2 * MAX_WORKERS) + 2 * ApiOptions().max_connections + 1
    (tasks,) = unit["TasksMax"]
    assert most <= int(tasks) <= 4 * most
    assert unit["ProtectProc"] == ["invisible"] and unit["LimitCORE"] == ["0"]
