"""What healerd cannot serve on Podman 4.3 is refused naming the key and the engine
(engine/docker/podman.py, docs/engines.md; issue 31); on Docker nothing changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from healerd.engine.api import EngineError, Unsupported
from healerd.engine.docker import podman
from healerd.engine.docker.engine import DockerEngine
from healerd.model import HealthcheckSpec, ServiceSpec
from tests.support.fakedockerd import FakeDockerd

CHECKED = HealthcheckSpec(test=("CMD", "true"))


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"healthcheck": CHECKED}, "healthcheck"),
        ({"network_mode": "service:db"}, "network_mode service:db"),
        ({"network_mode": "container:abc"}, "network_mode container:abc"),
    ],
)
def test_a_key_podman_cannot_serve_is_refused_by_name(fields: dict[str, object], key: str) -> None:
    spec = ServiceSpec(name="web", image="img:1", **fields)  # type: ignore[arg-type]
    with pytest.raises(EngineError, match=f"create web-1: {key}: not on Podman 4.3.1 \\("):
        podman.check("podman", "4.3.1", spec, "web-1")
    podman.check("docker", "20.10.24", spec, "web-1")  # Docker: nothing refused


def test_what_podman_serves_is_not_refused() -> None:
    off = HealthcheckSpec(disable=True)
    fields: list[dict[str, object]] = [{}, {"healthcheck": off}, {"network_mode": "host"}]
    for given in fields:
        spec = ServiceSpec(name="web", image="img:1", **given)  # type: ignore[arg-type]
        assert podman.refused(spec) == []


def test_the_restart_hand_off_is_unsupported_on_podman_without_a_request(tmp_path: Path) -> None:
    """Podman answers /containers/ID/update 404, which the adapter once took for a
    container gone: the hand-off said it handed off what it had not."""
    fake = FakeDockerd(tmp_path / "engine.sock", "1.41", component="Podman Engine")
    fake.start()
    try:
        engine = DockerEngine(f"unix://{fake.path}", timeout=5.0)
        with pytest.raises(Unsupported, match="restart hand-off: not on Podman"):
            engine.set_restart_policy("c" * 64, "unless-stopped")
        assert not any("/update" in p for p in fake.asked)
    finally:
        fake.stop()
