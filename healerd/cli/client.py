"""A small HTTP/JSON client for healerd's Unix socket, with errors an operator can act on."""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import os
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

T = TypeVar("T")
# A streamed answer is read in pieces of at most this many bytes; an error's body, at most
# this many.
STREAM_PIECE = 64 * 1024
ERROR_BODY_MAX = 64 * 1024


class DaemonUnreachable(Exception):
    """No answer from healerd: the message says where we looked and what we found."""


class ApiFailure(Exception):
    """healerd answered, with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def explain_unreachable(path: str, exc: BaseException) -> str:
    """One line: where healerctl looked, whether the socket exists, and what went wrong."""
    where = f"cannot reach healerd at {path}"
    hint = "(set --socket or HEALERD_SOCKET if it listens elsewhere)"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{where}: no such socket: healerd is not running or uses another socket {hint}"
    except PermissionError:
        return f"{where}: permission denied on the path to the socket {hint}"
    except OSError as e:
        return f"{where}: {e.strerror or e}"
    if not stat.S_ISSOCK(st.st_mode):
        return f"{where}: the file exists but is not a socket {hint}"
    if isinstance(exc, PermissionError) or getattr(exc, "errno", None) == errno.EACCES:
        return (
            f"{where}: permission denied: the socket exists but you may not open it "
            "(it is for root and group healerd)"
        )
    if isinstance(exc, ConnectionRefusedError):
        return f"{where}: the socket exists but nobody listens: healerd is not running"
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"{where}: the socket exists but healerd did not answer in time"
    return f"{where}: the socket exists but the connection failed: {exc}"


class Client:
    def __init__(self, socket_path: str, timeout: float = 30.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        raw: bool = False,
        body: dict[str, Any] | None = None,
    ) -> Any:
        """`body`: sent as JSON (what must not be in a URL: a request line may be logged)."""
        conn = self._connect(timeout)
        try:
            resp = self._ask(conn, method, path, params, body)
            data = self._read(conn, resp.read)
        finally:
            conn.close()
        if resp.status >= 400:
            raise _failure(resp, data)
        if raw:
            return data
        try:
            return json.loads(data)
        except ValueError:
            raise DaemonUnreachable(
                f"healerd at {self.socket_path} sent an answer that is not JSON"
            ) from None

    @contextlib.contextmanager
    def stream(self, path: str, params: dict[str, Any] | None = None) -> Iterator[Streamed]:
        """GET a body that healerd sends as it is made (a container's output), read in
        pieces as it comes; the timeout bounds each read."""
        conn = self._connect(None)
        try:
            resp = self._ask(conn, "GET", path, params)
            if resp.status >= 400:
                raise _failure(resp, self._read(conn, lambda: resp.read(ERROR_BODY_MAX)))

            def pieces() -> Iterator[bytes]:
                while data := self._read(conn, lambda: resp.read1(STREAM_PIECE)):
                    yield data

            yield Streamed(resp.headers, pieces())
        finally:
            conn.close()

    def _connect(self, timeout: float | None) -> _UnixConnection:
        return _UnixConnection(self.socket_path, self.timeout if timeout is None else timeout)

    def _ask(
        self,
        conn: _UnixConnection,
        method: str,
        path: str,
        params: dict[str, Any] | None,
        body: dict[str, Any] | None = None,
    ) -> http.client.HTTPResponse:
        given = {k: v for k, v in (params or {}).items() if v is not None}
        query = "?" + urlencode(given, doseq=True) if given else ""
        data = json.dumps(body).encode() if body is not None else b""
        headers = {"Content-Type": "application/json"} if body is not None else {}

        def ask() -> http.client.HTTPResponse:
            sent = data if method == "POST" else None
            conn.request(method, path + query, body=sent, headers=headers)
            return conn.getresponse()

        return self._read(conn, ask)

    def _read(self, conn: _UnixConnection, call: Callable[[], T]) -> T:
        """`call`, with its socket errors said as what they mean to an operator."""
        try:
            return call()
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, TimeoutError | socket.timeout) and conn.sock is not None:
                raise DaemonUnreachable(
                    f"healerd at {self.socket_path} did not answer within {conn.timeout:g}s"
                ) from None
            raise DaemonUnreachable(explain_unreachable(self.socket_path, exc)) from None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params)

    def post(self, path: str) -> Any:
        return self.request("POST", path)


@dataclass(frozen=True)
class Streamed:
    """A streamed answer: its headers, and its body's pieces as they come."""

    headers: Message
    pieces: Iterator[bytes]


def _failure(resp: http.client.HTTPResponse, data: bytes) -> ApiFailure:
    try:
        message = str(json.loads(data)["error"])
    except (ValueError, KeyError, TypeError):
        message = data.decode(errors="replace").strip()[:500] or resp.reason
    return ApiFailure(resp.status, message)


def service_path(name: str, verb: str) -> str:
    return f"/v1/services/{quote(name, safe='')}/{verb}"
