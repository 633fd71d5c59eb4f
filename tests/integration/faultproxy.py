"""A fault-injecting proxy between healerd and a real dockerd, both on unix sockets.

healerd is pointed at the proxy (`--docker-host unix://PROXY.sock`); every connection
is relayed byte for byte to the engine's socket. Only the head of each request (the
request line and the headers) is parsed: to find where the request ends (HTTP/1.1
keep-alive) and to decide on a fault. Responses, the chunked `/events` stream among
them, pass through untouched. The test controls the faults:

- `delay(seconds, match)`: answer late (the engine acts at once, its answer waits);
- `fail(status, message, match)`: answer with dockerd's JSON error body ourselves; the
  request never reaches the engine;
- `before(match, hook)`: run `hook(request)` before the request is forwarded (to make
  the engine's state race with healerd's request);
- `cut_events()`: close every open `/events` stream;
- `hold_events()` / `release_events()`: black-hole the events streams (nothing is
  delivered, nothing is closed) and let them flow again;
- `refuse()` / `accept()`: stop answering at all (connections are refused, open ones
  are dropped), and answer again.

`match` is a regular expression searched in `"METHOD /path?query"`, e.g.
`CREATE = r"^POST /v[\\d.]+/containers/create"`. Every request is recorded.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

CREATE = r"^POST /v[\d.]+/containers/create"
START = r"^POST /v[\d.]+/containers/[^/]+/start"
LIST = r"^GET /v[\d.]+/containers/json"
EVENTS = r"^GET /v[\d.]+/events"
ANY = r""

_MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # path and query, as sent
    at: float  # time.monotonic() when its head arrived
    fault: str = ""  # "", "delay 1.2s", "500", ...

    @property
    def line(self) -> str:
        return f"{self.method} {self.target}"


@dataclass
class Rule:
    pattern: re.Pattern[str]
    delay: tuple[float, float] | None = None
    status: int | None = None
    message: str = ""
    hook: Callable[[Request], None] | None = None
    times: int | None = None  # None: every match; else this many, then the rule retires
    hits: int = 0

    def take(self, request_line: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if not self.pattern.search(request_line):
            return False
        self.hits += 1
        return True


class _Reader:
    """Buffered reads from a socket: up to a separator, or exactly n bytes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            if len(self.buf) > _MAX_HEAD:
                raise EOFError  # not HTTP as we know it: drop the connection
            self._fill()
        head, _, self.buf = self.buf.partition(sep)
        return head + sep

    def exactly(self, n: int) -> Iterator[bytes]:
        while n > 0:
            if not self.buf:
                self._fill()
            piece, self.buf = self.buf[:n], self.buf[n:]
            n -= len(piece)
            yield piece


def _body(reader: _Reader, headers: dict[str, str]) -> Iterator[bytes]:
    """The raw bytes of a request body, framed by Content-Length or chunked encoding."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = reader.until(b"\r\n")
            yield size_line
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    line = reader.until(b"\r\n")
                    yield line
                    if line == b"\r\n":
                        return
            yield from reader.exactly(size + 2)
    yield from reader.exactly(int(headers.get("content-length", "0") or 0))


class _Connection:
    """One client connection and its upstream twin, pumped by two threads."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.events = False  # the request being answered is an /events stream
        self.answer_after = 0.0  # monotonic time before which no answer byte is sent
        self._send = threading.Lock()
        self._closed = threading.Event()
        self._pumps = 2
        self._pumps_lock = threading.Lock()

    def start(self) -> None:
        for target in (self._requests, self._responses):
            threading.Thread(target=self._pump, args=(target,), daemon=True).start()

    def close(self) -> None:
        """Drop both sides now; the pumps wake up and finish."""
        self._closed.set()
        for s in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _pump(self, target: Callable[[], None]) -> None:
        try:
            target()
        except (OSError, EOFError, ValueError):
            pass
        finally:
            self.close()
            with self._pumps_lock:
                self._pumps -= 1
                last = self._pumps == 0
            if last:
                self.client.close()
                self.upstream.close()
                self.proxy._forget(self)

    def _to_client(self, data: bytes) -> None:
        with self._send:
            self.client.sendall(data)

    def _requests(self) -> None:
        reader = _Reader(self.client)
        while not self._closed.is_set():
            head = reader.until(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _version = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            request = Request(method, target, time.monotonic())
            delay, error, hooks = self.proxy._decide(request)
            for hook in hooks:
                hook(request)
            if error is not None:
                status, message = error
                for _ in _body(reader, headers):
                    pass  # the engine never sees it
                self.proxy._record(Request(method, target, request.at, str(status)))
                self._to_client(_error_response(status, message))
                continue
            self.proxy._record(
                Request(method, target, request.at, f"delay {delay:.2f}s" if delay else "")
            )
            # No pipelining (docker-py waits for each answer): whatever the engine sends
            # from now on answers this request.
            self.events = bool(re.search(EVENTS, request.line))
            self.answer_after = time.monotonic() + delay
            self.upstream.sendall(head)
            for piece in _body(reader, headers):
                self.upstream.sendall(piece)

    def _responses(self) -> None:
        while not self._closed.is_set():
            data = self.upstream.recv(65536)
            if not data:
                return
            while self.events and self.proxy._events_held.is_set():
                if self._closed.wait(0.05):
                    return
            wait = self.answer_after - time.monotonic()
            if wait > 0 and self._closed.wait(wait):
                return
            self._to_client(data)


def _error_response(status: int, message: str) -> bytes:
    body = json.dumps({"message": message}).encode() + b"\n"
    reason = HTTPStatus(status).phrase
    return (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Api-Version: 1.41\r\nContent-Type: application/json\r\nServer: faultproxy\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class FaultProxy:
    def __init__(self, listen: Path, upstream: Path) -> None:
        self.listen = listen  # keep it short: a unix socket path has at most 107 bytes
        self.upstream = upstream
        self.requests: list[Request] = []
        self._rules: list[Rule] = []
        self._conns: set[_Connection] = set()
        self._lock = threading.Lock()
        self._events_held = threading.Event()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.listen}"

    # -- lifecycle ------------------------------------------------------------------

    def accept(self) -> None:
        """Listen (again); also the way to start the proxy."""
        if self._listener is not None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.listen.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.listen))
        listener.listen(64)
        listener.settimeout(0.1)
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept_loop, args=(listener,), daemon=True)
        self._acceptor.start()

    def start(self) -> None:
        self.accept()

    def refuse(self) -> None:
        """Stop listening (the socket file stays: connecting gets ECONNREFUSED) and drop
        every open connection, as an engine that went away would."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()  # the acceptor notices within its 0.1 s timeout
        if self._acceptor is not None:
            self._acceptor.join(timeout=2)
            self._acceptor = None
        self.drop_all()

    def stop(self) -> None:
        self.refuse()
        self.release_events()
        with contextlib.suppress(FileNotFoundError):
            self.listen.unlink()

    def drop_all(self) -> None:
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close()

    def _accept_loop(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(str(self.upstream))
            except OSError:
                # The engine itself is away: the client sees its connection dropped.
                upstream.close()
                client.close()
                continue
            conn = _Connection(self, client, upstream)
            with self._lock:
                self._conns.add(conn)
            conn.start()

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            self._conns.discard(conn)

    # -- faults -----------------------------------------------------------------------

    def delay(self, seconds: float | tuple[float, float], match: str = ANY) -> Rule:
        """Answer matching requests `seconds` late (a (low, high) pair: uniformly random)."""
        lo, hi = seconds if isinstance(seconds, tuple) else (seconds, seconds)
        return self._add(Rule(re.compile(match), delay=(lo, hi)))

    def fail(
        self,
        match: str,
        status: int = 500,
        message: str = "faultproxy: injected failure",
        times: int | None = None,
    ) -> Rule:
        """Answer matching requests with `status` and dockerd's {"message": ...} body."""
        return self._add(Rule(re.compile(match), status=status, message=message, times=times))

    def before(self, match: str, hook: Callable[[Request], None], times: int | None = 1) -> Rule:
        """Run `hook(request)` (in the proxy's thread) before a matching request goes on."""
        return self._add(Rule(re.compile(match), hook=hook, times=times))

    def clear(self, rule: Rule | None = None) -> None:
        """Remove one rule, or all of them."""
        with self._lock:
            if rule is None:
                self._rules.clear()
            elif rule in self._rules:
                self._rules.remove(rule)

    def cut_events(self) -> int:
        """Close every open /events stream; returns how many were cut."""
        with self._lock:
            streams = [c for c in self._conns if c.events]
        for c in streams:
            c.close()
        return len(streams)

    def events_streams(self) -> int:
        with self._lock:
            return sum(1 for c in self._conns if c.events)

    def hold_events(self) -> None:
        """Deliver nothing more on any /events stream, without closing it."""
        self._events_held.set()

    def release_events(self) -> None:
        self._events_held.clear()

    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def _decide(
        self, request: Request
    ) -> tuple[float, tuple[int, str] | None, list[Callable[[Request], None]]]:
        delay, error, hooks = 0.0, None, []
        with self._lock:
            for rule in self._rules:
                if not rule.take(request.line):
                    continue
                if rule.delay is not None:
                    delay += random.uniform(*rule.delay)
                if rule.status is not None and error is None:
                    error = (rule.status, rule.message)
                if rule.hook is not None:
                    hooks.append(rule.hook)
        return delay, error, hooks

    # -- what happened ------------------------------------------------------------------

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def seen(self, match: str, since: float = 0.0) -> list[Request]:
        """Requests (answered by the engine or by a fault) matching `match` since a
        time.monotonic() value."""
        pattern = re.compile(match)
        with self._lock:
            return [r for r in self.requests if r.at >= since and pattern.search(r.line)]
