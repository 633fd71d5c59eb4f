"""Fuzzing the local API over its Unix socket (issue 8).

One ApiServer with the fake daemon of test_api.py serves every case here. Whatever a
client sends (broken request lines, headers and Content-Lengths, bodies that are not JSON,
unknown paths and methods, random query strings) or however it behaves (slow, partial,
vanishing mid-request), the server answers with a well-formed HTTP response (a JSON error
with a 4xx, or 503, status for anything it refuses, never a 500, which would mean an
exception in healerd's code) or closes the connection; it keeps serving a normal request
right after, and when it stops it leaves no thread and no file descriptor behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from healerd.daemon.api.server import ApiOptions, ApiServer
from tests.unit.harness.api import FakeDaemon

IO_TIMEOUT = 1.0
REQUEST_DEADLINE = 0.5
MAX_BODY = 64 * 1024
FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def settle(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@dataclass
class Served:
    daemon: FakeDaemon
    server: ApiServer
    path: Path
    threads: int  # while idle, with the server running


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base_threads, base_fds = threading.active_count(), open_fds()
    d = FakeDaemon(tmp_path_factory.mktemp("api") / "healerd.sock")
    server = ApiServer(
        d,
        ApiOptions(
            io_timeout=IO_TIMEOUT,
            request_deadline=REQUEST_DEADLINE,
            max_connections=8,
            max_body=MAX_BODY,
        ),
    )
    server.start()
    s = Served(d, server, server.path, threading.active_count())
    yield s
    server.stop()
    assert settle(lambda: threading.active_count() <= base_threads), threading.enumerate()
    assert settle(lambda: open_fds() <= base_fds), (open_fds(), base_fds)


# -- talking to it -----------------------------------------------------------------------------


def exchange(
    path: Path, data: bytes, *, shut: bool = True, timeout: float = 5.0, chunk_pause: float = 0
) -> bytes:
    """Send `data` (in pieces with pauses, if asked) and read until the server closes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
        try:
            if chunk_pause:
                for i in range(0, len(data), 7):
                    s.sendall(data[i : i + 7])
                    time.sleep(chunk_pause)
            else:
                s.sendall(data)
            if shut:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server gave up on us first: its answer, if any, is still there
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        s.close()


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def parse(raw: bytes, *, head: bool = False) -> Response | None:
    """The one response a connection got (after any 100 Continue), checked to be well
    formed; None when the server closed without a word."""
    if raw == b"":
        return None
    while raw.startswith(b"HTTP/1.1 100 ") or raw.startswith(b"HTTP/1.0 100 "):
        raw = raw.split(b"\r\n\r\n", 1)[1]
    head_part, sep, body = raw.partition(b"\r\n\r\n")
    assert sep, raw[:300]
    lines = head_part.decode("latin-1").split("\r\n")
    version, code, _reason = lines[0].split(" ", 2)
    assert version == "HTTP/1.0", lines[0]
    assert code.isdigit() and len(code) == 3, lines[0]
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        assert colon, line
        headers[name.strip().lower()] = value.strip()
    if not head:
        assert int(headers["content-length"]) == len(body), (headers, body[:200])
    assert headers.get("connection") == "close"
    return Response(int(code), headers, body)


def check_clean(resp: Response | None, *, head: bool = False) -> None:
    """Closed, a success, or a JSON error with a 4xx status (503 when overloaded)."""
    if resp is None:
        return
    assert resp.status != 500, f"an exception in the API: {resp.body[:300]!r}"
    assert resp.status in (200, 202) or 400 <= resp.status < 500 or resp.status == 503, resp
    if resp.status >= 400:
        assert resp.headers["content-type"] == "application/json", resp
        if not head:
            payload = resp.json()
            assert isinstance(payload, dict) and isinstance(payload.get("error"), str), resp


def still_serving(s: Served) -> None:
    resp = parse(exchange(s.path, b"GET /v1/version HTTP/1.0\r\n\r\n"))
    assert resp is not None and resp.status == 200, resp
    assert resp.json()["api"] == "v1"


def no_thread_left(s: Served) -> None:
    assert settle(lambda: threading.active_count() <= s.threads), threading.enumerate()


# -- strategies ------------------------------------------------------------------------------

PATHS = [
    "/v1/status", "/v1/containers", "/v1/events", "/v1/diff", "/v1/version", "/metrics",
    "/v1/metrics", "/v1/reload", "/v1/reconcile", "/v1/services/web/pause",
    "/v1/services/web/resume", "/v1/services/db/reconcile", "/v1/services/nope/pause",
    "/v1/services/%2e%2e/pause", "/v1/services/%00/resume", "/v1/services//pause",
    "/v1/services/" + "a" * 300 + "/reconcile", "/v1/services/web/pause/extra", "/v1/",
    "/", "//v1/status", "/v1/status/", "/V1/STATUS", "/v1/status#frag", "*",
    "http://localhost/v1/status", "v1/status", "", "/%", "/%zz", "/\u00e9", "/v1/status;x=1",
]  # fmt: skip
PARAMS = ["service", "after", "since_time", "wait", "bogus", "", "service[]", "%00"]
VALUES = [
    "web", "db", "nope", "", "0", "-1", "1e309", "nan", "inf", "-0", "0.001", "9" * 40,
    "../../etc", "a" * 100, "%ff", "%", "%2", "\u00e9", "web&service=db", "1;2", "+", " ",
]  # fmt: skip
METHODS = ["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "get", "", "G\x00T", "BREW"]
VERSIONS = [
    "HTTP/1.0", "HTTP/1.1", "HTTP/2.0", "HTTP/0.9", "", "HTTP/1.0 extra", "http/1.0",
    "HTTP/1.01", "HTTP/99999999999999999999.0", "HTTP/1", "HTTP/a.b", "HTTP/1.0\x00",
]  # fmt: skip
HEADERS = [
    ("Content-Length", "0"), ("Content-Length", "2"), ("Content-Length", "-1"),
    ("Content-Length", "99999999999999999999999"), ("Content-Length", "1e3"),
    ("Content-Length", " 5 "), ("Content-Length", "5, 5"), ("Content-Length", ""),
    ("Content-Length", "0x10"), ("Content-Length", "\u0663"), ("Content-Length", "+3"),
    ("Transfer-Encoding", "chunked"), ("Transfer-Encoding", ""), ("Expect", "100-continue"),
    ("Connection", "keep-alive"), ("Host", "x"), ("Content-Type", "application/json"),
    ("X-Junk", "a" * 5000), ("X-Huge", "h" * 40000), ("X-\u00e9", "\u00e9"), ("", "no name"),
    ("Bad Header", "x"),
    (" Folded", "continued"), ("X-Null", "\x00"),
]  # fmt: skip
BODIES = [
    b"", b"{}", b"[]", b"{", b"null", b'{"a": 1}', b'"x"', b"\xff\xfe", b"[" * 5000,
    b'{"a": ' * 3000, b"1" * 70000, b"{}" * 10, b"\x00" * 10, b"NaN",
]  # fmt: skip

query = st.lists(
    st.tuples(st.sampled_from(PARAMS) | st.text(max_size=5), st.sampled_from(VALUES)),
    max_size=4,
).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """Requests with each part (method, target, query, version, line ends, headers, body)
    either sane or broken, so that both the parser and the routes get their share."""

    def broken() -> bool:
        return draw(st.integers(0, 3)) == 0

    method = draw(st.sampled_from(METHODS) | st.text(max_size=6) if broken() else
                  st.sampled_from(["GET", "POST"]))  # fmt: skip
    target = draw(st.text(max_size=12).map(lambda t: "/" + t) if broken() else
                  st.sampled_from(PATHS))  # fmt: skip
    if draw(st.booleans()):
        target += "?" + draw(query)
    version = draw(st.sampled_from(VERSIONS) if broken() else
                   st.sampled_from(["HTTP/1.0", "HTTP/1.1"]))  # fmt: skip
    words = [method, target, version]
    if broken():
        words = [w for w in words if draw(st.booleans())]
    eol = draw(st.sampled_from(["\n", "\r", "\n\r"])) if broken() else "\r\n"
    body = draw(st.sampled_from(BODIES) | st.binary(max_size=64)) if draw(st.booleans()) else b""
    if broken():
        headers = draw(st.lists(st.sampled_from(HEADERS), max_size=4))
    else:
        headers = [("Content-Length", str(len(body)))] if body or draw(st.booleans()) else []
    head = " ".join(words) + eol + "".join(f"{k}: {v}{eol}" for k, v in headers) + eol
    return head.encode("utf-8", "surrogatepass") + body


# -- properties --------------------------------------------------------------------------------


@FUZZ
@given(requests())
@example(b"GET /v1/status HTTP/1.0\r\nContent-Length: \xc2\xb2\r\n\r\n")  # UTF-8 '²'
def test_any_request_gets_a_clean_answer_or_a_close(served: Served, data: bytes) -> None:
    head = data.split(b" ", 1)[0] == b"HEAD"
    check_clean(parse(exchange(served.path, data), head=head), head=head)
    still_serving(served)


@FUZZ
@given(
    st.sampled_from(
        ["/v1/status", "/v1/containers", "/v1/events", "/v1/diff", "/v1/version", "/metrics"]
    ),
    query | st.text(max_size=40).map(lambda t: t.replace("wait", "w")),
)
def test_random_query_strings_on_every_read_route(served: Served, path: str, qs: str) -> None:
    """Reads with any query: 200, or a 400/404 saying why; /v1/events never waits long."""
    target = (path + "?" + qs).replace(" ", "%20").replace("\r", "").replace("\n", "")
    data = f"GET {target} HTTP/1.0\r\n\r\n".encode("utf-8", "surrogatepass")
    t0 = time.monotonic()
    resp = parse(exchange(served.path, data, timeout=40))
    check_clean(resp)
    assert resp is not None
    assert resp.status in (200, 400, 404), resp
    if "wait" not in qs:
        assert time.monotonic() - t0 < 5


@FUZZ
@given(st.sampled_from(BODIES) | st.binary(max_size=200) | st.text(max_size=50).map(str.encode))
def test_post_bodies_that_are_not_a_json_object(served: Served, body: bytes) -> None:
    """A change with a body that is not a JSON object is refused before it happens."""
    before = list(served.daemon.controller.calls)
    data = b"POST /v1/reconcile HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    resp = parse(exchange(served.path, data))
    check_clean(resp)
    assert resp is not None
    try:
        ok = isinstance(json.loads(body), dict) if body.strip() else True
    except (ValueError, RecursionError):
        ok = False
    if len(body) > MAX_BODY:
        assert resp.status == 413
    elif ok:
        assert resp.status == 202
    else:
        assert resp.status == 400, resp
        assert served.daemon.controller.calls == before


CONTENT_LENGTHS = [
    "0", "-1", "-0", "+1", " 1", "1 ", "1e3", "0x10", "1.0", "", " ", "a", "1, 1",
    str(MAX_BODY), str(MAX_BODY + 1), "9" * 30, "\u0661", "\u00b2", "\u2081", "\u2460",
    "\uff11", "\u00bd", "\U0001d7d9",
]  # fmt: skip


@pytest.mark.parametrize("length", CONTENT_LENGTHS)
def test_content_lengths(served: Served, length: str) -> None:
    """Odd, huge and non-ASCII digit Content-Lengths: 400, 411, 413, or the request
    served when the length is right; never a 500 or a hang."""
    data = f"POST /v1/reconcile HTTP/1.0\r\nContent-Length: {length}\r\n\r\n{{}}".encode()
    resp = parse(exchange(served.path, data, timeout=10))
    check_clean(resp)
    still_serving(served)


@pytest.mark.parametrize("raw", [b"\xb2", b"\xb9", b" \xb3 "], ids=["sup2", "sup1", "sup3"])
def test_a_content_length_python_calls_a_digit_but_cannot_read(served: Served, raw: bytes) -> None:
    data = b"POST /v1/reconcile HTTP/1.0\r\nContent-Length: " + raw + b"\r\n\r\n"
    resp = parse(exchange(served.path, data))
    check_clean(resp)


# -- slow, partial and vanishing clients -------------------------------------------------------


PARTIALS = [
    b"",
    b"G",
    b"GET /v1/status",
    b"GET /v1/status HTTP/1.0\r\n",
    b"GET /v1/status HTTP/1.0\r\nHost: x",
    b'POST /v1/reload HTTP/1.0\r\nContent-Length: 10\r\n\r\n{"a"',
    b"POST /v1/reload HTTP/1.0\r\nContent-Length: 65536\r\n\r\n" + b" " * 1000,
]


def test_partial_requests_then_silence_are_cut_off(served: Served) -> None:
    """Clients that send part of a request and then nothing (all at once, as the deadline
    is what ends them) are answered or closed by the request deadline; a body promised
    but not sent never triggers the change."""
    reloads = served.daemon.reload_requests
    answers: dict[int, bytes] = {}

    def client(i: int) -> None:
        answers[i] = exchange(served.path, PARTIALS[i], shut=False, timeout=10)

    t0 = time.monotonic()
    clients = [threading.Thread(target=client, args=(i,)) for i in range(len(PARTIALS))]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    assert time.monotonic() - t0 < REQUEST_DEADLINE + IO_TIMEOUT + 2
    assert len(answers) == len(PARTIALS)
    for raw in answers.values():
        resp = parse(raw)
        check_clean(resp)
        assert resp is None or resp.status >= 400
    assert served.daemon.reload_requests == reloads
    still_serving(served)


@pytest.mark.parametrize("data", PARTIALS[1:], ids=range(1, len(PARTIALS)))
def test_partial_requests_then_half_close_get_an_answer_or_a_close(
    served: Served, data: bytes
) -> None:
    """The end of what was sent is the end of the request: a GET may then be served (as
    HTTP/0.9 if it had no version), a POST whose body is short never is."""
    reloads = served.daemon.reload_requests
    resp = parse(exchange(served.path, data, shut=True))
    check_clean(resp)
    assert resp is None or resp.status >= 400 or data.startswith(b"GET ")
    assert served.daemon.reload_requests == reloads


def test_a_slow_but_timely_client_is_served(served: Served) -> None:
    data = b"GET /v1/version HTTP/1.0\r\nHost: x\r\n\r\n"
    pause = REQUEST_DEADLINE / 2 / (len(data) / 7 + 1)
    resp = parse(exchange(served.path, data, chunk_pause=pause))
    assert resp is not None and resp.status == 200


def test_a_client_too_slow_for_the_deadline_is_cut_off(served: Served) -> None:
    data = b"GET /v1/version HTTP/1.0\r\n" + b"X-Slow: 1\r\n" * 20 + b"\r\n"
    t0 = time.monotonic()
    resp = parse(exchange(served.path, data, chunk_pause=0.05, timeout=10))
    assert resp is None or resp.status >= 400
    assert time.monotonic() - t0 < REQUEST_DEADLINE + IO_TIMEOUT + 3
    still_serving(served)


@FUZZ
@given(
    st.sampled_from([*PARTIALS[1:], b"GET /v1/status HTTP/1.0\r\n\r\n"]) | requests(),
    st.integers(0, 3),
    st.booleans(),
)
def test_clients_that_vanish(served: Served, data: bytes, when: int, reset: bool) -> None:
    """The client disconnects (or resets) before sending all, before reading, or while
    the answer is on its way: the server lives on."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(str(served.path))
    try:
        if when >= 1:
            s.sendall(data[: len(data) // 2] if when == 1 else data)
        if when == 3:
            s.settimeout(0.05)  # wait a moment for the answer, then go
            s.recv(1)
        if reset:
            # SO_LINGER 0: close with a reset rather than an orderly shutdown.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    finally:
        s.close()
    still_serving(served)


def test_many_vanishing_clients_at_once_leak_nothing(served: Served) -> None:
    """More clients than the server's limit: it refuses some (a 503, then it closes, so a
    send may meet a broken pipe); whatever happened, nothing is left once all are gone."""
    fds = open_fds()
    socks = []
    try:
        for i in range(40):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            socks.append(s)
            s.connect(str(served.path))
            if i % 3:
                # Refused over the limit, it may be closed before we send.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    s.sendall(b"GET /v1/status HTTP/1.0\r\n" if i % 2 else b"POST /v1/rel")
    finally:
        for s in socks:
            s.close()
    no_thread_left(served)
    assert settle(lambda: open_fds() <= fds), (open_fds(), fds)
    still_serving(served)


# -- leaks -------------------------------------------------------------------------------------


def test_no_thread_or_fd_left_after_the_fuzzing(served: Served) -> None:
    """Runs after the cases above (file order): every handler thread has ended, and the fds
    are what they were with the server idle."""
    still_serving(served)
    no_thread_left(served)
    fds = open_fds()
    for data in (b"GET /v1/status HTTP/1.0\r\n\r\n", b"garbage\r\n\r\n", b"GET /v1/"):
        exchange(served.path, data, shut=data.endswith(b"\n"))
    no_thread_left(served)
    assert settle(lambda: open_fds() <= fds), (open_fds(), fds)


def test_a_server_started_and_stopped_leaves_nothing(tmp_path: Path) -> None:
    threads, fds = threading.active_count(), open_fds()
    d = FakeDaemon(tmp_path / "healerd.sock")
    server = ApiServer(d, ApiOptions(io_timeout=IO_TIMEOUT, request_deadline=REQUEST_DEADLINE))
    server.start()
    # A client still connected, silent, when the server stops.
    hanging = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hanging.connect(str(server.path))
    hanging.sendall(b"GET /v1/sta")
    assert parse(exchange(server.path, b"GET /v1/version HTTP/1.0\r\n\r\n")) is not None
    server.stop()
    hanging.close()
    assert not server.path.exists()
    assert settle(lambda: threading.active_count() <= threads), threading.enumerate()
    assert settle(lambda: open_fds() <= fds), (open_fds(), fds)
