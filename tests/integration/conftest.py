"""Fixtures for tests against a real, private dockerd (no mock engine here)."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from tests.integration.harness import IMAGE
from tests.support import engines
from tests.support.busybox_image import COMMAND, build
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.registry import Registry

PRIVATE_ROOT = Path("/var/lib/healerd-test")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an engine other than the default, only the `every_engine` tests run."""
    chosen = engines.kind()
    if chosen == engines.DEFAULT or os.environ.get("HEALERD_TEST_EVERY_TEST"):
        return  # HEALERD_TEST_EVERY_TEST=1: the whole suite on another engine
    skip = pytest.mark.skip(reason=f"runs on {engines.DEFAULT} only (HEALERD_TEST_ENGINE={chosen})")
    for item in items:
        if "every_engine" not in item.keywords and "/integration/" in str(item.path):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def dockerd() -> Iterator[PrivateDockerd]:
    # One engine per test run, so that two runs on one machine cannot disturb each other;
    # engines left behind by runs that died are stopped first.
    engines.reap_stale(PRIVATE_ROOT)
    d = engines.private_engine(PRIVATE_ROOT / f"run-{os.getpid()}")
    # A dockerd gives a pull up after two tries, not five: 5 s of its own retries before
    # healerd's backoff takes over, not 50 (test_pull_faults); one retry still resumes a
    # cut layer. (Podman's service takes no such flag.)
    d.extra_args.append("--max-download-attempts=2")
    d.start()
    yield d
    d.teardown()


@pytest.fixture(scope="session")
def image(dockerd: PrivateDockerd) -> str:
    api = dockerd.client(timeout=60)
    try:
        return build(api, IMAGE)
    finally:
        api.close()


@pytest.fixture
def api(dockerd: PrivateDockerd) -> Iterator[docker.APIClient]:
    client = dockerd.client()
    yield client
    client.close()


@pytest.fixture
def cluster(api: docker.APIClient, image: str) -> Iterator[Cluster]:
    c = Cluster(api)
    yield c
    c.remove_labelled()  # leave the engine as we found it: every container of healerd's goes


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


@pytest.fixture
def registry() -> Iterator[Registry]:
    """A real registry without auth on 127.0.0.1 (tests/support/registry.py), one per test."""
    r = Registry()
    r.start()
    yield r
    r.stop()


@pytest.fixture
def config(tmp_path: Path) -> ConfigDir:
    return ConfigDir(tmp_path / "etc-healerd", IMAGE)


@pytest.fixture
def healerd(
    config: ConfigDir, dockerd: PrivateDockerd, cluster: Cluster, foreign: str, tmp_path: Path
) -> Iterator[Healerd]:
    h = Healerd(config.root, dockerd.url, tmp_path / "healerd.log")
    yield h
    if h.alive():
        h.stop()
    print(f"--- healerd log ({h.log_path}) tail ---\n" + h.log(since_start=False)[-3000:])


@pytest.fixture
def forwarding() -> Iterator[Callable[[docker.APIClient, str], None]]:
    """Let traffic cross a network's bridge on this host: the host's own dockerd set the
    FORWARD policy to DROP with bridge netfilter on, and the private test engine runs
    without iptables (on a host whose engine manages iptables, Docker does this)."""
    rules: list[list[str]] = []

    def allow(api: docker.APIClient, network: str) -> None:
        bridge = f"br-{api.inspect_network(network)['Id'][:12]}"
        rule = ["FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"]
        subprocess.run(["iptables", "-I", *rule], check=True)
        rules.append(rule)

    yield allow
    for rule in rules:
        subprocess.run(["iptables", "-D", *rule], check=False)
