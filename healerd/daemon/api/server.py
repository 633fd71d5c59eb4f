"""The local API: HTTP/JSON on a Unix socket, for healerctl and monitoring.

Reading is open to whoever can open the socket (mode 0660, group `healerd` when it
exists). Changing anything, and reading containers' output, needs the peer, as the
kernel reports it (SO_PEERCRED), to be root or in the admin group (output: or in the
logs group). A client cannot stall the daemon or lock the admins out: connections are
bounded in number, in all and per user, with room kept for root and the admin group;
every socket operation has a timeout, the whole request must arrive within a deadline,
the request line and headers together and the body are limited in size, and a long
poll ends when its client goes away.

This module holds the HTTP request handling and `ApiServer`, which runs it; the routes
are in api.routes, the socket servers in api.sockets, the caller's credentials and the
admin policy in api.access, the per-user connection limits in api.limits, the streamed
logs in api.logs. Their public names are importable from here too. The server reads
`peer_of` from this module when it accepts a connection, so patching `server.peer_of`
reaches it."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

from healerd import __version__
from healerd.daemon.api.access import AdminPolicy, Decision, Peer, peer_label, peer_of
from healerd.daemon.api.logs import Streamed
from healerd.daemon.api.routes import Api, ApiError, Request, check_service_name
from healerd.daemon.api.sockets import (
    ApiOptions,
    BoundedServer,
    TcpMetricsServer,
    UnixApiServer,
    bind_socket,
    parse_listen,
)
from healerd.daemon.api.views import DaemonLike
from healerd.daemon.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from healerd.daemon.ratelog import RateLimitedLog

log = logging.getLogger("healerd.api")

# How often the accept loops and the reaper wake when nothing happens: a stop does not
# wait for them (`_shut_down` wakes an accept loop), and no request deadline is missed
# (the reaper sleeps until the earliest one).
SERVE_POLL = 5.0
REAP_IDLE = 5.0
REAP_STEP = 0.05


def _shut_down(srv: UnixApiServer | TcpMetricsServer) -> None:
    """socketserver's shutdown(), without waiting out the accept loop's poll: once the
    loop is asked to stop, shutting the listening socket for reading wakes its select
    (an accept then fails, which the loop ignores) whoever the socket's path names now."""
    waiter = threading.Thread(target=srv.shutdown, name="healerd-api-stop", daemon=True)
    waiter.start()
    waiter.join(0.01)  # shutdown() sets the loop's flag first thing
    with contextlib.suppress(OSError):
        srv.socket.shutdown(socket.SHUT_RD)
    waiter.join(SERVE_POLL + 1.0)


class _Handler(BaseHTTPRequestHandler):
    server_version = f"healerd/{__version__}"
    sys_version = ""
    protocol_version = "HTTP/1.0"

    @property
    def srv(self) -> BoundedServer:
        return cast(BoundedServer, self.server)

    def setup(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(self.srv.options.io_timeout)
        self.peer = self.srv.peer_for(sock) if self.srv.unix else None
        self._deadline_key = self.srv.watch_deadline(sock)
        super().setup()

    def finish(self) -> None:
        self.srv.release_deadline(self._deadline_key)
        with contextlib.suppress(OSError):
            super().finish()

    def address_string(self) -> str:
        return peer_label(self.peer) if self.srv.unix else str(self.client_address[0])

    def log_message(self, format: str, *args: Any) -> None:
        # What a client sent is escaped: no control characters or fake lines in the log.
        text = (format % args).encode("unicode_escape", "backslashreplace").decode("ascii")
        log.debug("%s: %s", self.address_string(), text[:300])

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # What the stdlib parser rejects is the client's fault: always a 4xx, in JSON.
        if code >= 500 and code != 503:
            code = 400
        self._send(code, {"error": message or self.responses.get(code, ("error",))[0]})

    def handle_one_request(self) -> None:
        try:
            if not self._read_head():
                return
            self._dispatch()
            self.wfile.flush()
        except (TimeoutError, OSError, ValueError) as exc:
            log.debug("connection from %s dropped: %s", self.address_string(), exc)
            self.close_connection = True

    def _read_head(self) -> bool:
        """Read the request line and headers, at most `max_head` bytes in all, and parse
        them: True when the request may be dispatched. (The stdlib alone takes 100
        header lines of 64 KiB each: 6.4 MiB a connection.)"""
        limit = self.srv.options.max_head
        self.raw_requestline = self.rfile.readline(limit + 1)
        if not self.raw_requestline:
            self.close_connection = True
            return False
        if len(self.raw_requestline) > limit:
            return self._refuse_head(414, "request line too long")
        lines: list[bytes] = []
        size = len(self.raw_requestline)
        while True:
            line = self.rfile.readline(limit - size + 1)
            size += len(line)
            if size > limit:
                return self._refuse_head(431, f"request line and headers over {limit} bytes")
            lines.append(line)
            if line in (b"\r\n", b"\n", b""):
                break
        # The stdlib parser reads the headers from rfile: hand it what was read.
        real, self.rfile = self.rfile, io.BytesIO(b"".join(lines))
        del lines
        try:
            return self.parse_request()
        finally:
            self.rfile = real

    def _refuse_head(self, code: int, message: str) -> bool:
        self.requestline = self.request_version = self.command = ""
        self.raw_requestline = b""
        self.send_error(code, message)
        return False

    def _client_gone(self) -> bool:
        """True once the client closed its end (a half-close is not leaving: HUP on a
        Unix socket means both directions are shut)."""
        poller = select.poll()
        try:
            poller.register(self.request, select.POLLIN)
            events = poller.poll(0)
        except (OSError, ValueError):
            return True
        return any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in events)

    def _read_body(self) -> dict[str, Any]:
        if self.headers.get("Transfer-Encoding"):
            raise ApiError(411, "send a Content-Length, not Transfer-Encoding")
        raw_len = self.headers.get("Content-Length")
        if raw_len is None:
            return {}
        raw_len = raw_len.strip()
        # ASCII digits only: str.isdigit() also takes '²', which int() refuses.
        if not (raw_len.isascii() and raw_len.isdigit()):
            raise ApiError(400, "bad Content-Length")
        length = int(raw_len)
        if length > self.srv.options.max_body:
            raise ApiError(413, f"body over {self.srv.options.max_body} bytes")
        data = self.rfile.read(length) if length else b""
        if len(data) != length:
            raise ApiError(400, "body shorter than its Content-Length")
        if not data.strip():
            return {}
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            raise ApiError(400, "body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "body must be a JSON object")
        return body

    def _dispatch(self) -> None:
        try:
            parts = urlsplit(self.path)
            if not self.path.startswith("/"):
                raise ApiError(400, "request target must be a path")
            try:
                query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
            except ValueError:
                raise ApiError(400, "malformed query string") from None
            body = self._read_body()
            if self.command not in ("GET", "POST"):
                raise ApiError(405, f"method {self.command[:20]} not allowed")
            req = Request(
                self.command,
                parts.path,
                query,
                body,
                self.peer,
                release_deadline=lambda: self.srv.release_deadline(self._deadline_key),
                client_gone=self._client_gone,
            )
            code, payload = self.srv.api.handle(req)
        except ApiError as exc:
            code, payload = exc.code, {"error": exc.message}
        except Exception:
            self.srv.api.ratelog.error(
                "api-internal-error",
                "API request %s %s failed",
                self.command,
                self.path[:200],
                exc_info=True,
            )
            code, payload = 500, {"error": "internal error (see healerd's log)"}
        self._send(code, payload)

    def _send(self, code: int, payload: Any) -> None:
        if isinstance(payload, Streamed):
            self._stream(code, payload)
            return
        if isinstance(payload, bytes):
            body, ctype = payload, METRICS_CONTENT_TYPE
        else:
            body = (json.dumps(payload, separators=(",", ":")) + "\n").encode()
            ctype = "application/json"
        self.close_connection = True
        # Always a status line, even to a request too broken to name its version.
        if getattr(self, "request_version", None) not in ("HTTP/1.0", "HTTP/1.1"):
            self.request_version = "HTTP/1.0"
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError as exc:
            log.debug("could not answer %s: %s", self.address_string(), exc)

    def _stream(self, code: int, payload: Streamed) -> None:
        """Headers, then each chunk as it is made (a container's output: api.logs); the
        connection's close ends the body. A client that goes away ends it early."""
        self.close_connection = True
        try:
            self.send_response(code)
            self.send_header("Content-Type", payload.content_type)
            for name, value in payload.headers.items():
                self.send_header(name, value)
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in payload.chunks:
                if chunk:
                    self.wfile.write(chunk)
        except OSError as exc:
            log.debug("stopped sending to %s: %s", self.address_string(), exc)
        finally:
            payload.close()


class _MetricsOnlyHandler(_Handler):
    def _dispatch(self) -> None:
        path = urlsplit(self.path).path
        if self.command != "GET":
            self._send(405, {"error": "only GET /metrics here"})
        elif path != "/metrics":
            self._send(404, {"error": "only /metrics is served on this address"})
        else:
            try:
                self._send(200, self.srv.api.handle(Request("GET", "/metrics", {}, {}, None))[1])
            except Exception:
                self.srv.api.ratelog.error("metrics-failed", "metrics scrape failed", exc_info=True)
                self._send(500, {"error": "internal error"})


class ApiServer:
    """Serves the API on `daemon.settings.socket_path` (and /metrics on
    `options.metrics_listen`) from background threads."""

    def __init__(self, daemon: DaemonLike, options: ApiOptions | None = None) -> None:
        self.daemon = daemon
        self.options = options or ApiOptions()
        self.path = Path(daemon.settings.socket_path)
        self.metrics = daemon.metrics
        self.ratelog = RateLimitedLog(log)
        policy = AdminPolicy(self.options.admin_group)
        self.api = Api(daemon, policy, self.metrics, self.ratelog, self.options.inspect)
        self._servers: list[UnixApiServer | TcpMetricsServer] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._inode: int | None = None

    def start(self) -> None:
        """Bind and serve in threads; never blocks. Raises OSError if the socket cannot
        be bound (another healerd serving it, a non-socket file in the way, ...)."""
        # Looked up at each connection, so that patching server.peer_of (tests) reaches it.
        server = UnixApiServer(self.api, self.options, _Handler, lambda s: peer_of(s))
        try:
            self._bind(server)
        except BaseException:
            server.server_close()
            raise
        self._serve(server, "healerd-api")
        if self.options.metrics_listen:
            # Metrics are a convenience: failing to serve them must not cost the API.
            try:
                host, port = parse_listen(self.options.metrics_listen)
                tcp = TcpMetricsServer(self.api, self.options, host, port, _MetricsOnlyHandler)
            except (OSError, ValueError) as exc:
                log.error("metrics not served on %s: %s", self.options.metrics_listen, exc)
            else:
                self._serve(tcp, "healerd-metrics")
                log.info("metrics served on http://%s/metrics", self.options.metrics_listen)
        reaper = threading.Thread(target=self._reap, name="healerd-api-reaper", daemon=True)
        reaper.start()
        self._threads.append(reaper)

    def _serve(self, server: UnixApiServer | TcpMetricsServer, name: str) -> None:
        t = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": SERVE_POLL},
            name=name,
            daemon=True,
        )
        t.start()
        self._servers.append(server)
        self._threads.append(t)

    def _bind(self, server: UnixApiServer) -> None:
        self._inode, group = bind_socket(server, self.path, self.options)
        server.server_address = str(self.path)
        server.server_activate()
        log.info(
            "local API on %s (mode %o, group %s; changes need root or group %s)",
            self.path,
            self.options.socket_mode,
            group,
            self.options.admin_group or "-",
        )

    def _reap(self) -> None:
        while not self._stop.wait(self._reap_in()):
            for srv in self._servers:
                srv.reap()
            self.ratelog.flush()

    def _reap_in(self) -> float:
        """Until the earliest request deadline (at least REAP_STEP), or while nothing is
        due, half a deadline: a request that arrives meanwhile has its deadline later
        than that. An idle healerd wakes no thread of its own several times a second."""
        now = time.monotonic()
        due = [d for d in (srv.next_deadline() for srv in self._servers) if d is not None]
        wait = min(REAP_IDLE, self.options.request_deadline / 2)
        if due:
            wait = min(wait, max(REAP_STEP, min(due) - now))
        if self.ratelog.pending():
            wait = min(wait, 1.0)
        return max(REAP_STEP, wait)

    def stop(self) -> None:
        self._stop.set()
        for srv in self._servers:
            with contextlib.suppress(Exception):
                _shut_down(srv)
            with contextlib.suppress(Exception):
                srv.server_close()
        # Remove the socket only if it is still ours (a newer healerd may have replaced it).
        with contextlib.suppress(OSError):
            if self._inode is not None and self.path.lstat().st_ino == self._inode:
                self.path.unlink()
        self._servers.clear()


__all__ = [
    "AdminPolicy",
    "Api",
    "ApiError",
    "ApiOptions",
    "ApiServer",
    "Decision",
    "Peer",
    "Request",
    "TcpMetricsServer",
    "UnixApiServer",
    "check_service_name",
    "parse_listen",
    "peer_of",
]
