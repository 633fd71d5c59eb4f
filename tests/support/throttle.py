"""A TCP proxy on 127.0.0.1 in front of a real registry, with a slow link and faults.

The engine pulls `127.0.0.1:PROXYPORT/REPO:TAG`; the proxy relays every connection byte
for byte to the registry's port. A distribution v2 registry addresses its content by
repository and digest only (the host:port is only in the reference), so an image pushed
through the registry's own port can be pulled through the proxy's, and dockerd treats
both as insecure (plain http) registries on 127.0.0.0/8.

Nothing is parsed. The test controls the link:

- `throttle(bytes_per_second)`: the responses (registry to engine) of all connections
  together go no faster (a token bucket shared by every connection, as one slow uplink
  would); None: full speed; 0: a stall (connections stay open, nothing is delivered);
- `drop()`: close every open connection now, with a TCP reset (a dropped link mid-pull);
- `refuse()` / `accept()`: stop listening (connections are refused, open ones dropped)
  and listen again on the same port;
- `bytes_down`: response bytes delivered so far (to know a pull is under way).

Requests (engine to registry) are never throttled. Only loopback is ever touched.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable

_CHUNK = 16 * 1024


class _Bucket:
    """A token bucket in bytes: `take(n, stop)` waits until n bytes may go (or `stop`)."""

    def __init__(self) -> None:
        self.rate: float | None = None
        self._tokens = 0.0
        self._at = time.monotonic()
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)

    def set_rate(self, rate: float | None) -> None:
        with self._lock:
            self.rate = rate
            self._tokens = 0.0  # no burst saved up from before
            self._at = time.monotonic()
            self.changed.notify_all()

    def take(self, n: int, stop: threading.Event) -> bool:
        """False if `stop` was set while waiting."""
        with self._lock:
            while not stop.is_set():
                rate = self.rate
                if rate is None:
                    return True
                now = time.monotonic()
                # At most a tenth of a second of burst: the link stays smooth.
                self._tokens = min(self._tokens + (now - self._at) * rate, max(rate * 0.1, n))
                self._at = now
                if self._tokens >= n:
                    self._tokens -= n
                    return True
                wait = (n - self._tokens) / rate if rate > 0 else 0.1
                self.changed.wait(min(wait, 0.1))
            return False


class _Connection:
    def __init__(
        self, proxy: ThrottleProxy, client: socket.socket, upstream: socket.socket
    ) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.closed = threading.Event()
        self._pumps = 2
        self._lock = threading.Lock()

    def start(self) -> None:
        up = threading.Thread(target=self._pump, args=(self._up, self.upstream), daemon=True)
        down = threading.Thread(target=self._pump, args=(self._down, self.client), daemon=True)
        up.start()
        down.start()

    def drop(self) -> None:
        """A reset on both sides (SO_LINGER 0), as a link that went away mid-transfer."""
        for s in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close()

    def close(self) -> None:
        """Both sides closed now; the pumps wake up and finish."""
        self.closed.set()
        for s in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        with self.proxy.bucket.changed:
            self.proxy.bucket.changed.notify_all()

    def _pump(self, target: Callable[[], None], dest: socket.socket) -> None:
        try:
            target()
            # An end of stream passes on as one (a FIN after every byte, never a reset
            # that would throw away what the other side has not read yet).
            with contextlib.suppress(OSError):
                dest.shutdown(socket.SHUT_WR)
        except OSError:
            self.close()  # one side broke: both go
        finally:
            with self._lock:
                self._pumps -= 1
                last = self._pumps == 0
            if last:
                self.client.close()
                self.upstream.close()
                self.proxy._forget(self)

    def _up(self) -> None:
        while not self.closed.is_set():
            data = self.client.recv(65536)
            if not data:
                return
            self.upstream.sendall(data)

    def _down(self) -> None:
        while not self.closed.is_set():
            data = self.upstream.recv(_CHUNK)
            if not data:
                return
            for i in range(0, len(data), _CHUNK):
                piece = data[i : i + _CHUNK]
                if not self.proxy.bucket.take(len(piece), self.closed):
                    return
                self.client.sendall(piece)
                self.proxy._delivered(len(piece))


class ThrottleProxy:
    """`ThrottleProxy(upstream_port).start()`; `.host` is what image references name."""

    def __init__(self, upstream_port: int, *, rate: float | None = None) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.bucket = _Bucket()
        self.bucket.set_rate(rate)
        self.bytes_down = 0
        self.connections = 0  # accepted so far
        self._conns: set[_Connection] = set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def ref(self, repo: str, tag: str) -> str:
        return f"{self.host}/{repo}:{tag}"

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        self.accept()

    def accept(self) -> None:
        """Listen (again, on the same port once it has one)."""
        if self._listener is not None:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.1)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept_loop, args=(listener,), daemon=True)
        self._acceptor.start()

    def refuse(self) -> None:
        """Stop listening (a connect is refused) and drop every open connection."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._acceptor is not None:
            self._acceptor.join(timeout=2)
            self._acceptor = None
        self.drop()

    def stop(self) -> None:
        self.refuse()
        self.bucket.set_rate(None)

    # -- the link ---------------------------------------------------------------------

    def throttle(self, rate: float | None) -> None:
        """Bytes per second for all responses together; None: full speed; 0: a stall."""
        self.bucket.set_rate(rate)

    def drop(self) -> int:
        """Reset every open connection now; returns how many there were."""
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.drop()
        return len(conns)

    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns)

    # -- inside ---------------------------------------------------------------------

    def _accept_loop(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()  # the registry itself is away: the connection drops
                continue
            upstream.settimeout(None)
            conn = _Connection(self, client, upstream)
            with self._lock:
                self._conns.add(conn)
                self.connections += 1
            conn.start()

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            self._conns.discard(conn)

    def _delivered(self, n: int) -> None:
        with self._lock:
            self.bytes_down += n
