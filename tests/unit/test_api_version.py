"""The Docker API version healerd speaks (issue 31): negotiated with the engine's
/version, against a tiny HTTP server on a unix socket that plays the engine."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import docker.constants
import pytest

from healerd.engine.api import EngineError, EngineUnavailable
from healerd.engine.docker import apiversion
from healerd.engine.docker.apiversion import EngineTooOld
from healerd.engine.docker.client import DockerClient
from healerd.engine.docker.engine import DockerEngine
from healerd.engine.pacing import Meter
from healerd.model import ServiceSpec, VolumeSpec
from healerd.vocabulary import VolumeKind
from tests.support.fakedockerd import FakeDockerd


@pytest.fixture
def dockerd(tmp_path: Path) -> Iterator[FakeDockerd]:
    fake = FakeDockerd(tmp_path / "engine.sock", "1.41")
    yield fake
    fake.stop()


def _client(fake: FakeDockerd) -> DockerClient:
    return DockerClient(f"unix://{fake.path}", None, 5.0, 2, Meter())


def _listed_at(fake: FakeDockerd, client: DockerClient) -> str:
    """The API version of the URL the container list went to."""
    assert list(client.container_rows()) == []
    [path] = [p for p in fake.asked if "/containers/json" in p]
    return path.split("/")[1]


def test_an_engine_below_the_floor_is_refused_naming_both_versions(
    dockerd: FakeDockerd,
) -> None:
    dockerd.api = "1.40"
    dockerd.start()
    client = _client(dockerd)
    with pytest.raises(EngineTooOld) as caught:
        list(client.container_rows())
    assert str(caught.value) == (
        "the engine speaks Docker API 1.40 (Docker 19.03); healerd needs 1.41 "
        "(Docker 20.10) or newer"
    )
    assert not any("/containers/json" in p for p in dockerd.asked)
    assert client.api_version is None


def test_an_engine_at_the_floor_is_spoken_to_at_the_floor(dockerd: FakeDockerd) -> None:
    dockerd.start()
    engine = DockerEngine(f"unix://{dockerd.path}", timeout=5.0)
    assert engine.api_version() is None  # not asked yet: no request
    assert engine.list_managed() == []
    assert engine.api_version() == "1.41"
    assert dockerd.asked[0] == "/version"


def test_a_newer_engine_is_spoken_to_at_the_newest_the_sdk_knows(
    dockerd: FakeDockerd,
) -> None:
    dockerd.api = "1.45"
    dockerd.start()
    client = _client(dockerd)
    expected = min("1.45", apiversion.sdk_newest(), key=apiversion.parsed)
    assert _listed_at(dockerd, client) == f"v{expected}"
    assert client.api_version == expected == client.api.api_version


def test_an_sdk_older_than_the_engine_caps_the_version(
    dockerd: FakeDockerd, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(docker.constants, "DEFAULT_DOCKER_API_VERSION", "1.41")  # SDK 5.0.3
    dockerd.api = "1.45"
    dockerd.start()
    assert _listed_at(dockerd, _client(dockerd)) == "v1.41"


def test_never_below_the_engine_s_own_minimum(
    dockerd: FakeDockerd, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Docker 29.0 refused every client below 1.44: spoken to at 1.44 even by SDK 5.0.3.
    monkeypatch.setattr(docker.constants, "DEFAULT_DOCKER_API_VERSION", "1.41")
    dockerd.api, dockerd.low = "1.52", "1.44"
    dockerd.start()
    assert _listed_at(dockerd, _client(dockerd)) == "v1.44"


def test_a_reconnect_after_an_engine_upgrade_negotiates_again(dockerd: FakeDockerd) -> None:
    dockerd.start()
    client = _client(dockerd)
    assert _listed_at(dockerd, client) == "v1.41"
    dockerd.stop()  # its open connections still answer, as a stopping dockerd's do
    with pytest.raises(EngineUnavailable):
        client.listening("start")
    assert client.api_version is None
    dockerd.api, dockerd.asked = "1.44", []
    dockerd.start()
    assert _listed_at(dockerd, client) == "v1.44"
    assert dockerd.asked[0] == "/version"


def test_an_event_stream_that_ends_makes_the_next_call_negotiate_again(
    dockerd: FakeDockerd,
) -> None:
    """An engine that restarts ends the stream; the calls' pooled connections may never
    fail (a fresh one is made), and the engine may come back upgraded."""
    dockerd.start()
    engine = DockerEngine(f"unix://{dockerd.path}", timeout=5.0)
    assert engine.list_managed() == [] and engine.api_version() == "1.41"
    dockerd.api = "1.44"
    engine.watch(lambda event: None, lambda: None)
    assert [p.split("?")[0] for p in dockerd.asked if "/events" in p] == ["/v1.41/events"]
    dockerd.asked = []
    assert engine.list_managed() == [] and engine.api_version() == "1.44"
    assert dockerd.asked[0] == "/version"


@pytest.mark.parametrize(("component", "kind"), [("Engine", "docker"), ("Podman Engine", "podman")])
def test_the_engine_kind_comes_from_the_version_answer(
    tmp_path: Path, component: str, kind: str
) -> None:
    fake = FakeDockerd(tmp_path / "engine.sock", "1.41", component=component)
    fake.start()
    try:
        engine = DockerEngine(f"unix://{fake.path}", timeout=5.0)
        assert engine.engine_kind() is None  # not asked yet: no request
        assert engine.list_managed() == [] and engine.engine_kind() == kind
        engine.watch(lambda event: None, lambda: None)
        [events] = [p for p in fake.asked if "/events" in p]
        assert ("label" in urllib.parse.unquote(events)) is (kind == "docker")
    finally:
        fake.stop()


@pytest.mark.parametrize(("api", "refused"), [("1.41", True), ("1.44", False)])
def test_a_create_needing_a_newer_api_is_refused_before_anything_is_made(
    dockerd: FakeDockerd, api: str, refused: bool
) -> None:
    dockerd.api = api
    dockerd.start()
    engine = DockerEngine(f"unix://{dockerd.path}", timeout=5.0)
    mount = VolumeSpec("/srv", "/srv", read_only=True, kind=VolumeKind.BIND, recursive="readonly")
    spec = ServiceSpec(name="web", image="busybox:1.36", volumes=(mount,))
    with pytest.raises(EngineError) as caught:
        engine.create_and_start(spec, "web-1", {})
    message = "create web-1: volume /srv: bind.recursive: readonly needs Docker 25.0 (API 1.44)"
    assert str(caught.value).startswith(message) == refused
    # Refused: nothing asked past /version (the fake makes no container either way).
    assert (dockerd.asked == ["/version"]) == refused
    assert any(p.startswith(f"/v{api}/containers/create") for p in dockerd.asked) != refused


def test_a_field_needing_a_newer_api_is_refused_naming_docker_and_the_api() -> None:
    apiversion.needs("1.44", "1.44", "bind.recursive")
    with pytest.raises(EngineError) as caught:
        apiversion.needs("1.41", "1.44", "bind.recursive")
    assert str(caught.value).startswith(
        "bind.recursive needs Docker 25.0 (API 1.44); healerd speaks API 1.41 with this engine"
    )


def test_a_garbled_version_is_an_engine_error() -> None:
    with pytest.raises(EngineError):
        apiversion.negotiate("", None, "1.45")
    assert apiversion.negotiate("1.45", None, "1.45") == "1.45"
    assert apiversion.docker_of("1.99") == "API 1.99"
