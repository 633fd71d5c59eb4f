"""The local API's socket servers, and how the Unix socket is bound.

A client cannot stall the daemon: connections are bounded in number, per user too (with
room kept for root and the admin group, see api.limits), and a reaper cuts off any whose
request has not arrived by its deadline. Refusals are logged at most once per kind per
10 s (ratelog). The socket is bound under a temporary name and renamed into place, so it
is never reachable with looser permissions.
"""

from __future__ import annotations

import contextlib
import grp
import json
import logging
import os
import socket
import socketserver
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healerd.daemon.api.access import Peer
from healerd.daemon.api.limits import ConnectionLimits, Refusal, Ticket
from healerd.daemon.api.logs import InspectLimits
from healerd.daemon.api.routes import Api

log = logging.getLogger("healerd.api")

HandlerClass = type[socketserver.BaseRequestHandler]


@dataclass(frozen=True)
class ApiOptions:
    admin_group: str | None = "healerd-admin"
    socket_group: str = "healerd"
    socket_mode: int = 0o660
    metrics_listen: str | None = None
    max_connections: int = 64
    # Each user but root at most this many; the last `reserved_connections` are for
    # root and the admin group only.
    max_connections_per_user: int = 16
    reserved_connections: int = 8
    # Every recv/send on a connection; and the whole request (line, headers, body).
    io_timeout: float = 10.0
    request_deadline: float = 10.0
    max_body: int = 64 * 1024
    # The request line and the headers together (the stdlib alone allows 100 lines
    # of 64 KiB each: 6.4 MiB a connection).
    max_head: int = 64 * 1024
    # Logs and describe: at once per user, a log's bytes and time (api.logs).
    inspect: InspectLimits = field(default_factory=InspectLimits)


PeerLookup = Callable[[socket.socket], Peer | None]


def _no_peer(sock: socket.socket) -> Peer | None:
    return None


class BoundedServer(socketserver.ThreadingMixIn):
    """Bounded concurrency (in all and per peer uid) and a per-request deadline
    enforced by a reaper thread."""

    daemon_threads = True
    block_on_close = False
    unix = True
    api: Api
    options: ApiOptions

    def _init_limits(self, api: Api, options: ApiOptions, peer_lookup: PeerLookup) -> None:
        self.api = api
        self.options = options
        self.peer_lookup = peer_lookup
        # Over TCP (metrics only) there is no peer uid: only the total counts.
        self.limits = ConnectionLimits(
            options.max_connections,
            options.max_connections_per_user if self.unix else options.max_connections,
            options.reserved_connections if self.unix else 0,
            # api.policy is looked up each time: tests (and nothing else) swap it.
            is_admin=lambda peer: self.api.policy.decide(peer, "connect").allowed,
        )
        self._lock = threading.Lock()
        self._deadlines: dict[int, tuple[float, socket.socket]] = {}
        self._next_key = 0
        self._conns: dict[socket.socket, tuple[Peer | None, Ticket]] = {}

    def watch_deadline(self, sock: socket.socket) -> int:
        with self._lock:
            self._next_key += 1
            key = self._next_key
            self._deadlines[key] = (time.monotonic() + self.options.request_deadline, sock)
            return key

    def next_deadline(self) -> float | None:
        """The monotonic time of the earliest request deadline, None when none runs."""
        with self._lock:
            return min((t for t, _ in self._deadlines.values()), default=None)

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

    def peer_for(self, request: socket.socket) -> Peer | None:
        """The peer of an admitted connection, as the kernel reported it at accept."""
        with self._lock:
            got = self._conns.get(request)
        return got[0] if got is not None else None

    def process_request(self, request: Any, client_address: Any) -> None:
        # In the accept loop: one getsockopt, no thread yet for a refused connection.
        peer = self.peer_lookup(request) if self.unix else None
        ticket = self.limits.admit(peer)
        if isinstance(ticket, Refusal):
            self._refuse(request, ticket)
            return
        with self._lock:
            self._conns[request] = (peer, ticket)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def _refuse(self, request: Any, refusal: Refusal) -> None:
        self.api.ratelog.warning(refusal.kind, "local API: %s; refusing it", refusal.message)
        body = json.dumps({"error": refusal.message}).encode() + b"\n"
        with contextlib.suppress(OSError):
            request.settimeout(0.2)
            request.sendall(
                b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
            )
        self.shutdown_request(request)

    def _forget(self, request: Any) -> None:
        with self._lock:
            got = self._conns.pop(request, None)
        if got is not None:
            self.limits.release(got[1])

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)  # if shutdown_request was not reached

    def shutdown_request(self, request: Any) -> None:
        # Free the slot before the client sees the close: its next connection fits.
        self._forget(request)
        super().shutdown_request(request)  # type: ignore[misc]

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("local API connection error", exc_info=True)


class UnixApiServer(BoundedServer, socketserver.UnixStreamServer):
    """Unbound until `bind_socket`: binding is where the permissions are set."""

    request_queue_size = 128

    def __init__(
        self, api: Api, options: ApiOptions, handler: HandlerClass, peer_lookup: PeerLookup
    ) -> None:
        socketserver.UnixStreamServer.__init__(self, "", handler, bind_and_activate=False)
        self._init_limits(api, options, peer_lookup)


class TcpMetricsServer(BoundedServer, socketserver.TCPServer):
    unix = False
    allow_reuse_address = True

    def __init__(
        self, api: Api, options: ApiOptions, host: str, port: int, handler: HandlerClass
    ) -> None:
        if ":" in host:
            self.address_family = socket.AF_INET6
        socketserver.TCPServer.__init__(self, (host, port), handler)
        self._init_limits(api, options, _no_peer)


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT` or `:PORT` (all interfaces)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"metrics listen address must be HOST:PORT, not {value!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def bind_socket(server: UnixApiServer, path: Path, options: ApiOptions) -> tuple[int, str]:
    """Bind `server`'s socket at `path` with the options' mode and group; returns the
    socket's inode (so that stop removes only this socket) and the group it got. Raises
    OSError if another healerd serves `path` or a non-socket file is in the way."""
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
        os.chmod(tmp, options.socket_mode)
        gid = _group_id(options.socket_group)
        if gid is not None:
            os.chown(tmp, -1, gid)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path.lstat().st_ino, options.socket_group if gid is not None else "root"


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


def _group_id(name: str) -> int | None:
    try:
        return int(grp.getgrnam(name).gr_gid)
    except KeyError:
        return None


__all__ = [
    "ApiOptions",
    "BoundedServer",
    "TcpMetricsServer",
    "UnixApiServer",
    "bind_socket",
    "parse_listen",
]
