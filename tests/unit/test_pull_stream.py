"""DockerEngine.pull against a scripted engine on a unix socket: engine_timeout bounds the
wait for the engine's next progress message, not the whole pull (issue 17, point 5).

A pull that keeps moving is never cut, however long it takes; one the engine says
nothing about (a registry that accepts and is silent) is ImagePullFailed, so that a
service whose image is on disk heals from it; an engine that drops the stream mid-pull
(it restarts) is EngineUnavailable, an ordinary retry, never an unexpected exception.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.engine import EngineUnavailable, ImagePullFailed
from healerd.engine.docker import DockerEngine

HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
    b"Api-Version: 1.41\r\n\r\n"
)


def chunk(obj: object) -> bytes:
    data = json.dumps(obj).encode() + b"\r\n"
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class Script:
    """What the fake engine does with a pull: `mode` and the progress gap."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.gap = 0.0
        self.messages = 3
        self.release = threading.Event()


def _handler(script: Script) -> type[socketserver.BaseRequestHandler]:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock: socket.socket = self.request
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            if script.mode == "silent":
                script.release.wait(10)
                return
            sock.sendall(HEAD + chunk({"status": "Pulling from app"}))
            if script.mode == "stall":
                script.release.wait(10)
                return
            if script.mode == "cut":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                sock.close()
                return
            for i in range(script.messages):
                time.sleep(script.gap)
                sock.sendall(chunk({"status": "Downloading", "progress": f"{i}"}))
            if script.mode == "error":
                sock.sendall(chunk({"error": "manifest unknown"}))
            sock.sendall(b"0\r\n\r\n")

    return Handler


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[DockerEngine, Script]]:
    script = Script()
    path = tmp_path / "engine.sock"
    server = socketserver.ThreadingUnixStreamServer(str(path), _handler(script))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    engine = DockerEngine(f"unix://{path}", timeout=1)
    engine._client.api_version = "1.41"  # negotiated: the script answers pulls only
    yield engine, script
    script.release.set()
    server.shutdown()
    server.server_close()


def test_a_pull_that_keeps_moving_is_not_cut_by_engine_timeout(
    engine: tuple[DockerEngine, Script],
) -> None:
    eng, script = engine
    script.gap, script.messages = 0.4, 6  # 2.4 s in all, a message every 0.4 s
    t0 = time.monotonic()
    eng.pull("127.0.0.1:5000/app:1")
    assert time.monotonic() - t0 > 2.0


@pytest.mark.parametrize("mode", ["silent", "stall"])
def test_a_pull_the_engine_says_nothing_about_fails_after_engine_timeout(
    engine: tuple[DockerEngine, Script], mode: str
) -> None:
    eng, script = engine
    script.mode = mode
    t0 = time.monotonic()
    with pytest.raises(ImagePullFailed, match="no progress for 1s"):
        eng.pull("127.0.0.1:5000/app:1")
    assert time.monotonic() - t0 < 5.0


def test_a_stream_cut_mid_pull_is_the_engine_unavailable(
    engine: tuple[DockerEngine, Script],
) -> None:
    eng, script = engine
    script.mode = "cut"
    with pytest.raises(EngineUnavailable) as info:
        eng.pull("127.0.0.1:5000/app:1")
    assert not isinstance(info.value, ImagePullFailed)


def test_an_error_in_the_stream_is_a_failed_pull(engine: tuple[DockerEngine, Script]) -> None:
    eng, script = engine
    script.mode = "error"
    with pytest.raises(ImagePullFailed, match="manifest unknown"):
        eng.pull("127.0.0.1:5000/app:1")
