"""The engine contract (tests/contract/suite.py) held to the Docker adapter on the private
dockerd: the same tests the FakeEngine passes in tests/unit/test_engine_contract.py."""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import TypeVar

import docker
import docker.errors
import pytest

from healerd.engine.docker import DockerEngine
from healerd.model import LABEL_SERVICE, NetworkDecl, ServiceSpec
from tests.contract.suite import EngineContract
from tests.support import engines
from tests.support.busybox_image import COMMAND
from tests.support.dockerd import PrivateDockerd
from tests.support.polling import wait_for

T = TypeVar("T")


class DockerHarness:
    kill_signals = engines.engine_kind() != "podman"
    reports_health = engines.engine_kind() != "podman"

    def __init__(self, url: str, image: str, api: docker.APIClient, foreign: str) -> None:
        self.engine = DockerEngine(url, timeout=30)
        self._image, self._api, self._foreign = image, api, foreign
        self.tag = secrets.token_hex(3)
        self.project = f"contract{self.tag}"

    def spec(self, name: str, **fields: object) -> ServiceSpec:
        return ServiceSpec(
            name=f"ct-{name}-{self.tag}",
            image=self._image,
            command=tuple(COMMAND),
            stop_grace_period=1.0,
            **fields,  # type: ignore[arg-type]
        )

    def network_spec(self, name: str) -> ServiceSpec:
        net = NetworkDecl(f"{self.project}_default", self.project, "default")
        return self.spec(name, networks=(net.name,), networks_to_create=(net,))

    def failing_start(self, spec: ServiceSpec) -> ServiceSpec:
        return dataclasses.replace(spec, command=("/nonexistent",))

    def foreign(self) -> str:
        return self._foreign

    def kill(self, container_id: str) -> None:
        self._api.kill(container_id)

    def pause(self, container_id: str) -> None:
        self._api.pause(container_id)

    def remove_outside(self, container_id: str) -> None:
        self._api.remove_container(container_id, force=True, v=True)

    def remove_network(self, spec: ServiceSpec, container_id: str) -> bool:
        if engines.engine_kind() == "podman":
            # Podman 4.3 refuses while a container names the network ("network is being
            # used"): a start cannot find its network gone there.
            with pytest.raises(docker.errors.APIError, match="network is being used"):
                self._api.remove_network(spec.networks[0])
            return False
        self._api.remove_network(spec.networks[0])
        return True

    def volumes(self) -> set[str]:
        return {str(v["Name"]) for v in self._api.volumes().get("Volumes") or ()}

    def say(self, container_id: str, line: str) -> None:
        # Written to PID 1's stdout: the container's own output, as its log has it.
        run = self._api.exec_create(container_id, ["sh", "-c", f"echo {line} > /proc/1/fd/1"])
        self._api.exec_start(run["Id"])

    def now(self) -> float:
        return time.time()

    def later(self) -> None:
        then = time.time() + 0.3
        wait_for("the wall clock to move on", lambda: time.time() >= then, timeout=5)

    def run_health_checks(self) -> None:
        pass  # the engine runs them, every `interval`

    def eventually(self, what: str, cond: Callable[[], T]) -> T:
        return wait_for(what, cond, timeout=30)

    def clean(self) -> None:
        """The test's containers with their anonymous volumes, and its project network."""
        for c in self._api.containers(all=True, filters={"label": LABEL_SERVICE}):
            if c["Labels"].get(LABEL_SERVICE, "").endswith(self.tag):
                with suppress(docker.errors.NotFound):
                    self._api.remove_container(c["Id"], force=True, v=True)
        for net in self._api.networks(names=[f"{self.project}_default"]):
            with suppress(docker.errors.NotFound):
                self._api.remove_network(net["Id"])


@pytest.mark.every_engine
class TestDockerEngine(EngineContract):
    @pytest.fixture
    def harness(
        self, dockerd: PrivateDockerd, image: str, api: docker.APIClient, foreign: str
    ) -> Iterator[DockerHarness]:
        h = DockerHarness(dockerd.url, image, api, foreign)
        try:
            yield h
        finally:
            h.clean()
