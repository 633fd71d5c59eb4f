"""Issue 29, what the API's readers may do and cost: logs streamed as raw bytes with a
default tail and a byte cap (point 2), logs only for root, the admin group and the
logs group (point 14), at most two logs or describes at once per user, and read
budgets of their own per user, with a lane of its own for root and the admin group
(point 15). The API server runs on a real socket; peers are told apart as in
test_api_fairness (a client names its uid in its bound address)."""

from __future__ import annotations

import dataclasses
import io
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from healerd.config import Settings
from healerd.core.clock import FakeClock, SystemClock
from healerd.core.controller import LoopSettings
from healerd.core.wiring import build_loop
from healerd.daemon.api import server as api_module
from healerd.daemon.api.server import AdminPolicy, ApiServer, Peer
from healerd.daemon.main import Daemon
from healerd.engine import LogStream
from healerd.model import ContainerState, ObservedContainer
from tests.unit.harness.api import FakeDaemon, call, connect_as, fake_peer_of, raw
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine
from tests.unit.harness.files import NOBODY

ADMIN, LOGS_READER, OTHER = 1000, 2000, 3000  # uids; each one's gid is its uid
MIB = 2**20
LOGS = b"GET /v1/services/web/logs HTTP/1.0\r\n\r\n"
DESCRIBE = b"GET /v1/services/web/describe HTTP/1.0\r\n\r\n"
CUT = b"\n[healerd: output cut at 8 MiB: ask for less with --tail or --since]\n"


def groups(name: str) -> Any:
    gid = {"admins": ADMIN, "log-readers": LOGS_READER}.get(name)
    if gid is None:
        raise KeyError(name)
    return SimpleNamespace(gr_gid=gid, gr_mem=[])


def no_user(uid: int) -> Any:
    raise KeyError(uid)


def replica(cid: str = "c1" * 32, name: str = "web-abcde-11111") -> ObservedContainer:
    return ObservedContainer(cid, name, "web", "h", ContainerState.RUNNING, time.time())


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApiServer]:
    monkeypatch.setattr(api_module, "peer_of", fake_peer_of)
    d = FakeDaemon(tmp_path / "healerd.sock")
    d.controller.output = lambda: (replica(), LogStream([b"hello\n"]))
    srv = ApiServer(d)
    srv.api.policy = AdminPolicy("admins", getgrnam=groups, getpwuid=no_user)
    srv.start()
    yield srv
    srv.stop()


def ask_as(srv: ApiServer, uid: int, request: bytes) -> tuple[int, bytes, bytes]:
    """(status, head, body) of one request from `uid`."""
    s = connect_as(srv.path, uid)
    try:
        s.sendall(request)
        chunks = []
        while b := s.recv(65536):
            chunks.append(b)
    finally:
        s.close()
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


# -- point 14: logs are not for every reader --------------------------------------------------


def test_logs_are_for_root_the_admin_group_and_the_logs_group_only(server: ApiServer) -> None:
    d = server.daemon
    assert isinstance(d, FakeDaemon)
    code, _, body = ask_as(server, NOBODY, LOGS)
    assert code == 403 and b"hello" not in body
    assert b"reading logs needs root or membership in group 'admins'" in body
    assert b"logs_group is not set" in body
    # previous too; describe and the rest stay open to every reader
    assert ask_as(server, NOBODY, LOGS.replace(b"logs", b"logs?previous=1"))[0] == 403
    assert ask_as(server, NOBODY, DESCRIBE)[0] == 200
    assert ask_as(server, NOBODY, b"GET /v1/containers HTTP/1.0\r\n\r\n")[0] == 200
    for uid in (0, ADMIN):
        code, _, body = ask_as(server, uid, LOGS)
        assert (code, body) == (200, b"hello\n"), uid
    assert ask_as(server, LOGS_READER, LOGS)[0] == 403
    d.settings = dataclasses.replace(d.settings, logs_group="log-readers")  # a reload
    code, _, body = ask_as(server, LOGS_READER, LOGS)
    assert (code, body) == (200, b"hello\n")
    code, _, body = ask_as(server, OTHER, LOGS)
    assert code == 403 and b"group 'admins' or 'log-readers'" in body
    # The logs group reads logs, and changes nothing.
    assert ask_as(server, LOGS_READER, b"POST /v1/reconcile HTTP/1.0\r\n\r\n")[0] == 403


def test_healerctl_logs_refused_is_exit_4(
    server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from healerd.cli import healerctl

    monkeypatch.setattr(api_module, "peer_of", lambda sock: Peer(1, NOBODY, NOBODY))
    out, err = io.StringIO(), io.StringIO()
    code = healerctl.main(["--socket", str(server.path), "logs", "web"], out, err)
    assert code == healerctl.EXIT_FORBIDDEN and out.getvalue() == ""
    assert err.getvalue().startswith("healerctl: refused: reading logs needs root")


# -- point 2: streamed, raw, with a default tail and a byte cap --------------------------------


def test_logs_are_raw_bytes_streamed_with_a_default_tail_and_cut_at_8_mib(
    server: ApiServer,
) -> None:
    d = server.daemon
    assert isinstance(d, FakeDaemon)
    closed = threading.Event()

    def nul() -> Iterator[bytes]:  # 32 MiB of NUL bytes, made as they are read
        for _ in range(512):
            yield b"\0" * 65536

    d.controller.output = lambda: (replica(), LogStream(nul(), closed.set))
    code, head, body = ask_as(server, 0, LOGS)
    assert code == 200
    assert b"Content-Type: application/octet-stream" in head
    assert b"X-Healerd-Container: web-abcde-11111" in head and b"Content-Length" not in head
    # No JSON, no escaping: each NUL is one byte, and the cut is said at the end.
    assert body[: 8 * MIB] == b"\0" * (8 * MIB) and body[8 * MIB :] == CUT
    assert closed.is_set(), "the engine's stream was left open"
    assert d.controller.calls[-1] == ("logs", ("web", False, 1000, None))
    for query, tail in (("tail=all", None), ("tail=5", 5), ("previous=1&tail=0", 0)):
        d.controller.output = lambda: (replica(), LogStream([b"x\n"]))
        request = LOGS.replace(b"logs", f"logs?{query}".encode())
        assert ask_as(server, 0, request)[0] == 200
        assert d.controller.calls[-1][1][2] == tail, query
    assert ask_as(server, 0, LOGS.replace(b"logs", b"logs?tail=-1"))[0] == 400
    d.controller.output = None
    code, head, body = ask_as(server, 0, LOGS)
    assert code == 200 and b"X-Healerd-Why: no container" in head and body == b""


def test_a_client_that_goes_away_closes_the_engines_stream(server: ApiServer) -> None:
    d = server.daemon
    assert isinstance(d, FakeDaemon)
    closed = threading.Event()

    def endless() -> Iterator[bytes]:
        while True:
            yield b"y" * 65536

    d.controller.output = lambda: (replica(), LogStream(endless(), closed.set))
    s = connect_as(server.path, 0)
    s.sendall(LOGS)
    assert s.recv(1024)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()  # a reset: the next write fails
    assert closed.wait(5), "the stream was not closed after the client left"


# -- point 15: at most two at once per user, budgets of their own -----------------------------


def test_at_most_two_logs_or_describes_at_once_per_user(server: ApiServer) -> None:
    d = server.daemon
    assert isinstance(d, FakeDaemon)
    gate = threading.Event()

    def slow() -> Iterator[bytes]:
        yield b"first\n"
        gate.wait(10)
        yield b"last\n"

    d.controller.output = lambda: (replica(), LogStream(slow()))
    held = [connect_as(server.path, ADMIN) for _ in range(2)]
    try:
        for s in held:
            s.sendall(LOGS)
            got = b""
            while b"first" not in got and (piece := s.recv(65536)):
                got += piece
            assert b"first" in got, got[:300]
        code, _, body = ask_as(server, ADMIN, DESCRIBE)
        assert code == 429 and b"at most 2 logs or describe requests at once" in body
        assert ask_as(server, ADMIN, LOGS)[0] == 429
        assert ask_as(server, NOBODY, DESCRIBE)[0] == 200  # another user is not held up
        assert ask_as(server, 0, DESCRIBE)[0] == 200
    finally:
        gate.set()
        for s in held:
            s.settimeout(5)
            while s.recv(65536):
                pass
            s.close()
    assert ask_as(server, ADMIN, DESCRIBE)[0] == 200  # the slots came back


def history_of(engine: FakeEngine, service: str, n: int) -> None:
    """`n` failed containers kept as history, each replaced by the next, then a running
    replica."""
    prev = ""
    for i in range(n + 1):
        cid = f"{service}{i:04d}".ljust(64, "0")
        state = ContainerState.RUNNING if i == n else ContainerState.EXITED
        engine.containers[cid] = ObservedContainer(
            cid, f"{service}-h-{i:05d}", service, "h", state, 1000.0 + i,
            exit_code=None if i == n else 1, replaces=prev,
        )  # fmt: skip
        prev = cid


def test_root_is_not_slowed_by_a_reader_who_spends_the_read_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader floods describe (each inspects every failed container kept: 30 here);
    root's describe is answered at once, and shows the 10 newest failures."""
    monkeypatch.setattr(api_module, "peer_of", fake_peer_of)
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "web.yaml").write_text("services:\n  web:\n    image: img:1\n")
    sock = tmp_path / "healerd.sock"
    settings = Settings(config_dir=tmp_path, state_dir=tmp_path / "state", socket_path=sock)
    engine = FakeEngine(allow=LOOP_CALLS | {"identity", "death"})
    history_of(engine, "web", 30)
    d = Daemon(settings, engine, SystemClock())
    d.reload()
    srv = ApiServer(d)
    srv.start()
    flood = [connect_as(sock, NOBODY, timeout=30) for _ in range(8)]
    try:
        for s in flood:
            s.sendall(DESCRIBE)
        time.sleep(0.5)  # the reader's describes are under way
        t0 = time.monotonic()
        got = raw(sock, DESCRIBE, timeout=5)
        seconds = time.monotonic() - t0
        assert got.startswith(b"HTTP/1.0 200"), (got[:200], seconds)
        assert seconds < 2.0, seconds
        _, data = call(sock, "GET", "/v1/services/web/describe")
        assert [h["name"] for h in data["history"]] == [f"web-h-{i:05d}" for i in range(29, 19, -1)]
    finally:
        for s in flood:
            s.close()
        srv.stop()
        d.controller.shutdown()


def test_each_reader_has_a_bucket_of_its_own_and_root_a_lane_of_its_own() -> None:
    from healerd.core.readlanes import PRIVILEGED, ReadBudget, Reader, ReadLanes, ReadThrottled

    clock = FakeClock()
    slept: list[float] = []
    engine = FakeEngine(clock)
    budget = ReadBudget(
        privileged_rate=1.0, privileged_burst=3, uid_rate=1.0, uid_burst=2,
        readers_rate=2.0, readers_burst=4, max_wait=3.0,
    )  # fmt: skip
    lanes = ReadLanes(engine, clock, budget, sleep=slept.append)

    def read(reader: Reader) -> None:
        with lanes.reading(reader) as on_budget:
            on_budget.list_managed()

    alice, bob = Reader(1000, False), Reader(1001, False)
    read(alice)
    read(alice)
    assert slept == []
    read(alice)  # over her own burst: she waits, alone
    assert slept == [1.0]
    read(bob)  # bob's own bucket is full, and all readers' not spent
    read(PRIVILEGED)
    read(Reader(5, True))  # an admin: root's lane
    assert slept == [1.0]
    read(bob)  # all readers' bucket is spent now: bob waits too
    assert slept == [1.0, 0.5]
    with pytest.raises(ReadThrottled, match="read budget spent"):
        for _ in range(5):  # alice's debt grows past max_wait: refused, not queued
            read(alice)
    assert slept == [1.0, 0.5, 2.0, 1.0, 3.0, 1.5]
    read(PRIVILEGED)  # root's lane never waited on any of it
    assert len(slept) == 6
    assert engine.meter.stats.calls == 0  # and none of it was on the heal budget


def test_a_reader_over_its_budget_gets_429(server: ApiServer) -> None:
    from healerd.core.readlanes import ReadThrottled

    d = server.daemon
    assert isinstance(d, FakeDaemon)

    def spent(*args: object, **kw: object) -> Any:
        raise ReadThrottled("read budget spent: at most 1 engine call(s) a second")

    d.controller.container_statuses = spent  # type: ignore[method-assign]
    code, _, body = ask_as(server, NOBODY, b"GET /v1/containers HTTP/1.0\r\n\r\n")
    assert code == 429 and b"read budget spent" in body


def test_api_reads_are_charged_to_the_callers_lane(server: ApiServer) -> None:
    d = server.daemon
    assert isinstance(d, FakeDaemon)
    for uid in (NOBODY, ADMIN, 0):
        ask_as(server, uid, b"GET /v1/containers HTTP/1.0\r\n\r\n")
        ask_as(server, uid, b"GET /v1/diff HTTP/1.0\r\n\r\n")
    seen = [(r.uid, r.privileged) for r in d.controller.readers]
    assert seen == [(NOBODY, False)] * 2 + [(ADMIN, True)] * 2 + [(0, True)] * 2


# -- the engine side of a streamed log ----------------------------------------------------------


def test_controller_logs_stream_the_output_written_until_the_time_asked() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"logs"})
    history_of(engine, "web", 0)
    (cid,) = engine.containers
    engine.say(cid, "one", "two")
    clock.advance(10)
    until = clock.time()
    clock.advance(10)
    engine.say(cid, "three")
    ctrl = build_loop(engine, clock, LoopSettings(workers=1))
    c, stream = ctrl.logs("web", previous=False, tail=None, since=None, until=until)
    assert c is not None and c.id == cid and stream.read() == b"one\ntwo\n"
    _, stream = ctrl.logs("web", previous=False, tail=None, since=until, until=None)
    assert stream.read() == b"three\n"
    _, stream = ctrl.logs("web", previous=False, tail=1, since=None, until=until)
    assert stream.read() == b""  # the engine takes the tail first, then the time
    ctrl.shutdown()


def test_engine_log_frames_are_read_in_bounded_pieces() -> None:
    from contextlib import contextmanager

    from healerd.engine import EngineError
    from healerd.engine.docker.logs import CHUNK, chunks, params

    @contextmanager
    def translate() -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise EngineError(f"logs: {exc}") from exc

    def frame(stream: int, data: bytes) -> bytes:
        return struct.pack(">BxxxL", stream, len(data)) + data

    big = b"a" * (3 * CHUNK + 5)
    body = frame(1, b"out\n") + frame(2, b"err\n") + frame(1, big) + frame(1, b"")
    pieces = list(chunks(io.BytesIO(body), False, translate))
    assert b"".join(pieces) == b"out\nerr\n" + big
    assert max(len(p) for p in pieces) <= CHUNK
    # A TTY container's log is the bytes themselves; a body cut short ends the stream.
    assert b"".join(chunks(io.BytesIO(b"\x01\x00raw"), True, translate)) == b"\x01\x00raw"
    assert list(chunks(io.BytesIO(frame(1, b"whole")[:6]), False, translate)) == []

    class Broken(io.BytesIO):
        def read(self, amt: int | None = -1) -> bytes:
            raise OSError("connection reset")

    with pytest.raises(EngineError, match="connection reset"):
        list(chunks(Broken(), False, translate))
    assert params(None, None, None)["tail"] == "all"
    query = params(5, 1700000000.25, 1700000001.5)
    assert (query["tail"], query["since"], query["until"]) == (
        "5",
        "1700000000.250000",
        "1700000001.500000",
    )
