"""Fixtures for tests against a real, private dockerd (no mock engine here)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from healerd.model import LABEL_SERVICE
from tests.integration.harness import Cluster, Healerd, PrivateDockerd
from tests.support.busybox_image import build

IMAGE = "healerd-test/busybox:1"
# Exits at once on SIGTERM (busybox sleep as PID 1 would ignore it).
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
PRIVATE_ROOT = Path("/var/lib/healerd-test")


@pytest.fixture(scope="session")
def dockerd() -> Iterator[PrivateDockerd]:
    # One engine per test run, so that two runs on one machine cannot disturb each other;
    # engines left behind by runs that died are stopped first.
    PrivateDockerd.reap_stale(PRIVATE_ROOT)
    d = PrivateDockerd(PRIVATE_ROOT / f"run-{os.getpid()}")
    d.start()
    yield d
    d.remove_networks()
    d.stop()
    d.remove()


@pytest.fixture(scope="session")
def image(dockerd: PrivateDockerd) -> str:
    api = docker.APIClient(base_url=dockerd.url, version="1.41")
    try:
        return build(api, IMAGE)
    finally:
        api.close()


@pytest.fixture
def api(dockerd: PrivateDockerd) -> Iterator[docker.APIClient]:
    client = docker.APIClient(base_url=dockerd.url, version="1.41", timeout=30)
    yield client
    client.close()


@pytest.fixture
def cluster(api: docker.APIClient, image: str) -> Iterator[Cluster]:
    yield Cluster(api)
    # Leave the engine as we found it: every healerd-labelled container goes.
    for c in api.containers(all=True, filters={"label": LABEL_SERVICE}):
        with contextlib.suppress(docker.errors.NotFound):
            api.remove_container(c["Id"], force=True)


@pytest.fixture
def foreign(api: docker.APIClient, image: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """An unowned container (named like a service's) that healerd must never touch."""
    name = f"svc-foreign-{secrets.token_hex(3)}"
    cid = api.create_container(
        image, COMMAND, name=name, labels={"healerd-test": "foreign"}, stop_timeout=1
    )["Id"]
    api.start(cid)
    before = api.inspect_container(cid)
    yield cid
    after = api.inspect_container(cid)  # raises NotFound if healerd removed it
    assert after["Config"]["Labels"] == before["Config"]["Labels"]
    assert after["Name"] == before["Name"]
    if "engine_restart" not in request.keywords:
        assert after["State"]["Running"], "healerd stopped a container it does not own"
        assert after["State"]["StartedAt"] == before["State"]["StartedAt"]
    api.remove_container(cid, force=True)


class ConfigDir:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf_d = root / "conf.d"
        self.conf_d.mkdir(parents=True)

    def write(self, name: str, text: str) -> Path:
        path = self.conf_d / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(textwrap.dedent(text))
        tmp.replace(path)
        return path

    def service(self, file: str, name: str, replicas: int, **fields: Any) -> Path:
        """Write one service in the usual test shape."""
        lines = [
            "services:",
            f"  {name}:",
            f"    image: {IMAGE}",
            f"    command: {fields.pop('command', json.dumps(COMMAND))}",
            "    stop_grace_period: 2s",
            f"    replicas: {replicas}",
        ]
        for key, value in fields.items():
            lines.append(f"    {key}: {value}")
        return self.write(file, "\n".join(lines) + "\n")


@pytest.fixture
def config(tmp_path: Path) -> ConfigDir:
    return ConfigDir(tmp_path / "etc-healerd")


@pytest.fixture
def healerd(
    config: ConfigDir, dockerd: PrivateDockerd, cluster: Cluster, foreign: str, tmp_path: Path
) -> Iterator[Healerd]:
    h = Healerd(config.root, dockerd.url, tmp_path / "healerd.log")
    yield h
    if h.alive():
        h.stop()
    print(f"--- healerd log ({h.log_path}) tail ---\n" + h.log(since_start=False)[-3000:])


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(2)}"
