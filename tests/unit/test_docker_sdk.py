"""The docker SDK's private parts the adapter touches (healerd/engine/docker/sdk.py, the
one module that does) are there, in the SDK versions it was checked against: Debian 12's
python3-docker 5.0.3 and the venv's 7.x. A new SDK fails here first, naming the touch."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import docker
import docker.credentials
import pytest
import requests.exceptions

from healerd.engine.docker import sdk
from healerd.engine.docker.client import DockerClient, new_api
from healerd.engine.pacing import Meter


def test_the_sdk_is_one_the_private_touches_were_checked_against() -> None:
    major, minor = (int(p) for p in docker.__version__.split(".")[:2])
    assert (major, minor) in sdk.CHECKED_SDK, (
        f"docker SDK {docker.__version__}: check healerd/engine/docker/sdk.py against it, "
        "then add it to CHECKED_SDK"
    )


def test_a_client_holds_what_it_read_of_a_config_file_where_it_is_dropped() -> None:
    api = docker.APIClient(base_url="unix:///nonexistent.sock", version="1.41")
    assert isinstance(api._general_configs, dict)
    assert hasattr(api._auth_configs, "is_empty")
    sdk.forget_config_file(api)
    assert api._general_configs == {} and api._auth_configs.is_empty


def test_the_credential_store_runs_the_path_it_is_given(tmp_path: Path) -> None:
    helper = tmp_path / "not-on-path" / "docker-credential-fake"
    helper.parent.mkdir()
    helper.write_text('#!/bin/sh\necho \'{"Username": "u", "Secret": "s"}\'\n')
    helper.chmod(0o755)
    store = sdk.credential_store("fake", str(helper))
    assert isinstance(store, docker.credentials.Store)
    assert store.get("registry.example") == {"Username": "u", "Secret": "s"}


@pytest.fixture
def streaming(tmp_path: Path) -> Iterator[str]:
    """A unix socket that answers any request with a chunked response that never ends."""
    path = tmp_path / "engine.sock"
    done = threading.Event()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            line = json.dumps({"status": "start"}).encode() + b"\n"
            self.request.sendall(head + f"{len(line):x}\r\n".encode() + line + b"\r\n")
            done.wait(10)

    server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"unix://{path}"
    done.set()
    server.shutdown()
    server.server_close()


def test_a_streamed_response_shows_its_socket(streaming: str) -> None:
    client = DockerClient(streaming, None, 5, 1, Meter())
    response = client.get("/events", stream=True, timeout=None)
    sock = sdk.stream_socket(response)
    assert isinstance(sock, socket.socket)
    sock.shutdown(socket.SHUT_RDWR)  # what stop_watch does: the reader sees the end
    with suppress(requests.exceptions.RequestException):  # "ended prematurely"
        for _ in response.iter_content(chunk_size=1024):
            pass


def test_every_request_of_a_client_takes_from_its_meter(streaming: str) -> None:
    meter = Meter()
    api = new_api(streaming, None, meter, timeout=5)
    api.get(f"{api.base_url}/v1.41/events", stream=True).close()
    assert meter.stats.calls == 1


def test_a_client_speaks_the_negotiated_version_from_its_next_request() -> None:
    api = docker.APIClient(base_url="unix:///nonexistent.sock", version="1.41")
    sdk.speak(api, "1.44")
    assert api.api_version == "1.44"
    assert api._url("/containers/json").endswith("/v1.44/containers/json")
