"""The local API: HTTP/JSON on a Unix socket, for healerctl and monitoring.

Reading is open to whoever can open the socket (mode 0660, group `healerd` when it
exists). Changing anything needs the peer, as the kernel reports it (SO_PEERCRED), to
be root or in the admin group. A client cannot stall the daemon: connections are
bounded in number, every socket operation has a timeout, the whole request must arrive
within a deadline, and bodies are limited in size. Handlers run in their own threads and
never touch the reconcile loop except through the controller's thread-safe methods.
"""

from __future__ import annotations

import contextlib
import grp
import json
import logging
import os
import pwd
import re
import socket
import socketserver
import stat
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

from healerd import __version__
from healerd.core.events import Event
from healerd.daemon.api_views import (
    DaemonLike,
    action_view,
    config_error_view,
    container_view,
    event_view,
    status_payload,
)
from healerd.daemon.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from healerd.daemon.metrics import Metrics
from healerd.engine import EngineError

log = logging.getLogger("healerd.api")

SERVICE_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,49}")
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13
MAX_PEER_GROUPS = 256
# Longest an events long-poll may hold a connection.
MAX_EVENT_WAIT = 30.0
# How long POST /v1/reload waits for the main loop to apply the new config.
RELOAD_APPLY_WAIT = 5.0


@dataclass(frozen=True)
class ApiOptions:
    admin_group: str | None = "healerd-admin"
    socket_group: str = "healerd"
    socket_mode: int = 0o660
    metrics_listen: str | None = None
    max_connections: int = 64
    # Every recv/send on a connection; and the whole request (line, headers, body).
    io_timeout: float = 10.0
    request_deadline: float = 10.0
    max_body: int = 64 * 1024


# -- who is asking -----------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    @property
    def user(self) -> str:
        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)


def peer_of(sock: socket.socket) -> Peer | None:
    """The connecting process's credentials as the kernel recorded them at connect()."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, gid = struct.unpack("3i", raw)
    except (OSError, AttributeError, struct.error):
        return None
    groups: tuple[int, ...] = ()
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 4 * MAX_PEER_GROUPS)
        groups = struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4])
    except (OSError, struct.error):
        pass
    return Peer(pid, uid, gid, groups)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


class AdminPolicy:
    """Root may change things; so may members of the admin group, looked up per request
    (so adding or removing a member needs no restart). Membership is the group database
    (/etc/group, primary group) or the groups the peer process runs with."""

    def __init__(
        self,
        group: str | None,
        getgrnam: Callable[[str], Any] = grp.getgrnam,
        getpwuid: Callable[[int], Any] = pwd.getpwuid,
    ) -> None:
        self.group = group
        self._getgrnam = getgrnam
        self._getpwuid = getpwuid

    def decide(self, peer: Peer | None, what: str) -> Decision:
        if peer is None:
            return Decision(False, f"{what} refused: the caller's credentials are unknown")
        if peer.uid == 0:
            return Decision(True, "root")
        who = f"uid {peer.uid}"
        try:
            name = self._getpwuid(peer.uid).pw_name
            who = f"{name} (uid {peer.uid})"
        except KeyError:
            name = None
        if not self.group:
            return Decision(False, f"{what} needs root; {who} is not root")
        try:
            g = self._getgrnam(self.group)
        except KeyError:
            return Decision(
                False,
                f"{what} needs root or membership in group {self.group!r} (which does not "
                f"exist on this host); {who} is neither",
            )
        if peer.gid == g.gr_gid or g.gr_gid in peer.groups or (name and name in g.gr_mem):
            return Decision(True, f"member of {self.group}")
        return Decision(
            False, f"{what} needs root or membership in group {self.group!r}; {who} is neither"
        )


# -- errors and routing ------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: dict[str, Any]
    peer: Peer | None
    # Called once the request is fully read: long waits must not count against its deadline.
    release_deadline: Callable[[], None] = field(default=lambda: None)

    def one(self, name: str) -> str | None:
        values = self.query.get(name)
        if not values:
            return None
        if len(values) > 1:
            raise ApiError(400, f"parameter {name!r} given more than once")
        return values[0]

    def number(self, name: str, default: float, lo: float, hi: float) -> float:
        raw = self.one(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ApiError(400, f"parameter {name!r}: not a number: {raw!r}") from None
        if not lo <= value <= hi:
            raise ApiError(400, f"parameter {name!r}: must be between {lo:g} and {hi:g}")
        return value


def check_service_name(name: str) -> str:
    if not SERVICE_NAME_RE.fullmatch(name):
        raise ApiError(400, f"not a service name: {name[:60]!r}")
    return name


Handler = Callable[[Request], tuple[int, Any]]


class Api:
    """The routes, independent of the transport, so they can be tested with a fake daemon."""

    # Parameters each GET route accepts; anything else is a 400.
    def __init__(
        self, daemon: DaemonLike, policy: AdminPolicy, metrics: Metrics | None = None
    ) -> None:
        self.daemon = daemon
        self.policy = policy
        self.metrics = metrics
        self.started = time.time()

    # -- dispatch ---------------------------------------------------------------------

    def handle(self, req: Request) -> tuple[int, Any]:
        """(status, payload); payload bytes are sent as they are, anything else as JSON."""
        path = req.path
        if path in ("/metrics", "/v1/metrics"):
            self._only(req, "GET", set())
            if self.metrics is None:
                raise ApiError(404, "metrics are not enabled")
            return 200, self.metrics.render()
        if path == "/v1/version":
            self._only(req, "GET", set())
            return 200, {"version": __version__, "api": "v1", "started": self.started}
        if path == "/v1/status":
            self._only(req, "GET", {"service"})
            names = [check_service_name(n) for n in req.query.get("service", [])]
            return 200, status_payload(
                self.daemon.controller, names, node=self.daemon.node_report()
            )
        if path == "/v1/containers":
            self._only(req, "GET", {"service"})
            return self._containers(req)
        if path == "/v1/events":
            self._only(req, "GET", {"after", "since_time", "wait", "service"})
            return self._events(req)
        if path == "/v1/diff":
            self._only(req, "GET", {"service"})
            return self._diff(req)
        if path == "/v1/reload":
            self._only(req, "POST", set())
            self._authorize(req, "reload")
            return self._reload(req)
        if path == "/v1/reconcile":
            self._only(req, "POST", set())
            self._authorize(req, "reconcile")
            self.daemon.controller.reconcile_now(None)
            log.info("reconcile of every service requested by %s", _who(req.peer))
            return 202, {"ok": True, "message": "reconcile of every service queued"}
        m = re.fullmatch(r"/v1/services/([^/]+)/(reconcile|pause|resume)", path)
        if m:
            self._only(req, "POST", set())
            name, verb = check_service_name(unquote(m.group(1))), m.group(2)
            self._authorize(req, verb)
            return self._service_verb(req, name, verb)
        raise ApiError(404, f"no such endpoint: {path[:100]}")

    def _only(self, req: Request, method: str, params: set[str]) -> None:
        if req.method != method:
            raise ApiError(405, f"{req.path} takes {method}, not {req.method}")
        unknown = sorted(set(req.query) - params)
        if unknown:
            raise ApiError(400, f"unknown parameter(s): {', '.join(p[:40] for p in unknown)}")

    def _authorize(self, req: Request, what: str) -> None:
        d = self.policy.decide(req.peer, what)
        if not d.allowed:
            log.warning("refused %s %s from %s: %s", req.method, req.path, _who(req.peer), d.reason)
            raise ApiError(403, d.reason)

    # -- reading ------------------------------------------------------------------------

    def _service_filter(self, req: Request) -> str | None:
        name = req.one("service")
        return check_service_name(name) if name is not None else None

    def _containers(self, req: Request) -> tuple[int, Any]:
        service = self._service_filter(req)
        try:
            containers = self.daemon.controller.container_statuses(service)
        except EngineError as exc:
            raise ApiError(503, f"cannot list containers: engine unreachable: {exc}") from None
        now = time.time()
        rows = sorted(containers, key=lambda c: (c.service, c.name))
        return 200, {"containers": [container_view(c, now) for c in rows]}

    def _events(self, req: Request) -> tuple[int, Any]:
        log_ = self.daemon.controller.events
        after = int(req.number("after", 0, 0, 2**62))
        since_time = req.one("since_time")
        wall: float | None = None
        if since_time is not None:
            wall = req.number("since_time", 0, 0, 1e11)
        wait = req.number("wait", 0, 0, MAX_EVENT_WAIT)
        service = self._service_filter(req)

        def pick(events: list[Event]) -> list[Event]:
            return [
                e
                for e in events
                if e.seq > after
                and (wall is None or e.time >= wall)
                and (service is None or e.service == service)
            ]

        events = pick(log_.since(after, wall_time=wall))
        deadline = time.monotonic() + wait
        req.release_deadline()
        seq = max([after, *(e.seq for e in events)])
        while not events and wait > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            got = log_.wait(seq, min(left, 1.0))
            if got:
                seq = max(seq, *(e.seq for e in got))
            events = pick(got)
        last = max([log_.last_seq, *(e.seq for e in events)])
        return 200, {"events": [event_view(e) for e in events], "last_seq": last}

    def _diff(self, req: Request) -> tuple[int, Any]:
        service = self._service_filter(req)
        if service is not None and not self._known(service):
            raise ApiError(404, f"no such service: {service}")
        try:
            actions = self.daemon.controller.preview(service)
        except EngineError as exc:
            raise ApiError(503, f"cannot plan: engine unreachable: {exc}") from None
        return 200, {"actions": [action_view(a) for a in actions]}

    def _known(self, service: str) -> bool:
        c = self.daemon.controller
        return service in c.desired.services or any(s.name == service for s in c.statuses())

    # -- changing -------------------------------------------------------------------------

    def _reload(self, req: Request) -> tuple[int, Any]:
        c = self.daemon.controller
        before = c.desired
        self.daemon.request_reload()
        log.info("reload requested by %s", _who(req.peer))
        req.release_deadline()
        deadline = time.monotonic() + RELOAD_APPLY_WAIT
        while c.desired is before and time.monotonic() < deadline:
            time.sleep(0.02)
        after = c.desired
        applied = after is not before
        return 200 if applied else 202, {
            "ok": True,
            "applied": applied,
            "message": "configuration reloaded" if applied else "reload requested",
            "services": sorted(after.services),
            "config_errors": [config_error_view(e) for e in after.errors],
        }

    def _service_verb(self, req: Request, name: str, verb: str) -> tuple[int, Any]:
        c = self.daemon.controller
        if verb == "pause":
            if name not in c.desired.services:
                raise ApiError(404, f"no such service: {name} (only declared services pause)")
            already = name in c.paused_services()
            c.pause(name)
            msg = f"{name} {'was already' if already else 'is now'} paused"
        elif verb == "resume":
            if name not in c.paused_services() and not self._known(name):
                raise ApiError(404, f"no such service: {name}")
            was = name in c.paused_services()
            c.resume(name)
            msg = f"{name} resumed" if was else f"{name} was not paused"
        else:
            if not self._known(name):
                raise ApiError(404, f"no such service: {name}")
            c.reconcile_now(name)
            msg = f"reconcile of {name} queued"
        log.info("%s of %s requested by %s", verb, name, _who(req.peer))
        return 200, {"ok": True, "service": name, "message": msg}


def _who(peer: Peer | None) -> str:
    return "unknown peer" if peer is None else f"{peer.user} (uid {peer.uid}, pid {peer.pid})"


# -- the HTTP transport ------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server_version = f"healerd/{__version__}"
    sys_version = ""
    protocol_version = "HTTP/1.0"

    @property
    def srv(self) -> _ServerBase:
        return cast(_ServerBase, self.server)

    def setup(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(self.srv.options.io_timeout)
        self.peer = peer_of(sock) if self.srv.unix else None
        self._deadline_key = self.srv.watch_deadline(sock)
        super().setup()

    def finish(self) -> None:
        self.srv.release_deadline(self._deadline_key)
        with contextlib.suppress(OSError):
            super().finish()

    def address_string(self) -> str:
        return _who(self.peer) if self.srv.unix else str(self.client_address[0])

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
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                self.close_connection = True
                return
            if len(self.raw_requestline) > 65536:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414, "request line too long")
                return
            if not self.parse_request():
                return
            self._dispatch()
            self.wfile.flush()
        except (TimeoutError, OSError, ValueError) as exc:
            log.debug("connection from %s dropped: %s", self.address_string(), exc)
            self.close_connection = True

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
            )
            code, payload = self.srv.api.handle(req)
        except ApiError as exc:
            code, payload = exc.code, {"error": exc.message}
        except Exception:
            log.exception("API request %s %s failed", self.command, self.path[:200])
            code, payload = 500, {"error": "internal error (see healerd's log)"}
        self._send(code, payload)

    def _send(self, code: int, payload: Any) -> None:
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
                log.exception("metrics scrape failed")
                self._send(500, {"error": "internal error"})


class _ServerBase(socketserver.ThreadingMixIn):
    """Bounded concurrency and a per-request deadline enforced by a reaper thread."""

    daemon_threads = True
    block_on_close = False
    unix = True
    api: Api
    options: ApiOptions

    def _init_limits(self, api: Api, options: ApiOptions) -> None:
        self.api = api
        self.options = options
        self._slots = threading.BoundedSemaphore(options.max_connections)
        self._lock = threading.Lock()
        self._deadlines: dict[int, tuple[float, socket.socket]] = {}
        self._next_key = 0

    def watch_deadline(self, sock: socket.socket) -> int:
        with self._lock:
            self._next_key += 1
            key = self._next_key
            self._deadlines[key] = (time.monotonic() + self.options.request_deadline, sock)
            return key

    def release_deadline(self, key: int) -> None:
        with self._lock:
            self._deadlines.pop(key, None)

    def reap(self) -> None:
        """Cut off connections whose request did not arrive in time."""
        now = time.monotonic()
        with self._lock:
            late = [(k, s) for k, (t, s) in self._deadlines.items() if t <= now]
            for k, _ in late:
                del self._deadlines[k]
        for _, sock in late:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("local API: too many connections; refusing one")
            with contextlib.suppress(OSError):
                request.settimeout(0.2)
                request.sendall(
                    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b'Connection: close\r\n\r\n{"error":"too many connections"}\n'
                )
            self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("local API connection error", exc_info=True)


class UnixApiServer(_ServerBase, socketserver.UnixStreamServer):
    request_queue_size = 128

    def __init__(self, api: Api, options: ApiOptions) -> None:
        socketserver.UnixStreamServer.__init__(self, "", _Handler, bind_and_activate=False)
        self._init_limits(api, options)


class TcpMetricsServer(_ServerBase, socketserver.TCPServer):
    unix = False
    allow_reuse_address = True

    def __init__(self, api: Api, options: ApiOptions, host: str, port: int) -> None:
        if ":" in host:
            self.address_family = socket.AF_INET6
        socketserver.TCPServer.__init__(self, (host, port), _MetricsOnlyHandler)
        self._init_limits(api, options)


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT` or `:PORT` (all interfaces)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"metrics listen address must be HOST:PORT, not {value!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def _socket_in_use(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(str(path))
    except OSError:
        return False
    finally:
        s.close()
    return True


class ApiServer:
    """Serves the API on `daemon.settings.socket_path` (and /metrics on
    `options.metrics_listen`) from background threads."""

    def __init__(self, daemon: DaemonLike, options: ApiOptions | None = None) -> None:
        self.daemon = daemon
        self.options = options or ApiOptions()
        self.path = Path(daemon.settings.socket_path)
        self.metrics = Metrics(daemon.controller, node=daemon.node_report)
        daemon.controller.add_hooks(self.metrics)
        self.api = Api(daemon, AdminPolicy(self.options.admin_group), self.metrics)
        self._servers: list[UnixApiServer | TcpMetricsServer] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._inode: int | None = None

    def start(self) -> None:
        """Bind and serve in threads; never blocks. Raises OSError if the socket cannot
        be bound (another healerd serving it, a non-socket file in the way, ...)."""
        server = UnixApiServer(self.api, self.options)
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
                tcp = TcpMetricsServer(self.api, self.options, host, port)
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
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name=name, daemon=True
        )
        t.start()
        self._servers.append(server)
        self._threads.append(t)

    def _bind(self, server: UnixApiServer) -> None:
        path = self.path
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise OSError(f"{path} exists and is not a socket; not replacing it")
            if _socket_in_use(path):
                raise OSError(f"{path} is in use: is another healerd running?")
        # Bind under a temporary name, set mode and group, then rename into place, so the
        # socket is never reachable with looser permissions.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        server.socket.bind(str(tmp))
        try:
            os.chmod(tmp, self.options.socket_mode)
            gid = _group_id(self.options.socket_group)
            if gid is not None:
                os.chown(tmp, -1, gid)
            os.rename(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        self._inode = path.lstat().st_ino
        server.server_address = str(path)
        server.server_activate()
        group = self.options.socket_group if gid is not None else "root"
        log.info(
            "local API on %s (mode %o, group %s; changes need root or group %s)",
            path,
            self.options.socket_mode,
            group,
            self.options.admin_group or "-",
        )

    def _reap(self) -> None:
        while not self._stop.wait(0.25):
            for srv in self._servers:
                srv.reap()

    def stop(self) -> None:
        self._stop.set()
        for srv in self._servers:
            with contextlib.suppress(Exception):
                srv.shutdown()
            with contextlib.suppress(Exception):
                srv.server_close()
        # Remove the socket only if it is still ours (a newer healerd may have replaced it).
        with contextlib.suppress(OSError):
            if self._inode is not None and self.path.lstat().st_ino == self._inode:
                self.path.unlink()
        self._servers.clear()


def _group_id(name: str) -> int | None:
    try:
        return int(grp.getgrnam(name).gr_gid)
    except KeyError:
        return None


__all__ = ["AdminPolicy", "Api", "ApiError", "ApiOptions", "ApiServer", "Peer", "Request"]
