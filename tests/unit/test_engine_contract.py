"""The engine contract (tests/contract/suite.py) held to the FakeEngine that the loop's
unit tests run on: it behaves as the real engine does (tests/integration/
test_engine_contract.py holds the Docker adapter to the same tests)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

import pytest

from healerd.core.clock import FakeClock
from healerd.model import ContainerState, ObservedContainer, ServiceSpec
from tests.contract.suite import EngineContract
from tests.support.polling import wait_for
from tests.unit.harness.fake_engine import ALL_CALLS, FakeEngine

T = TypeVar("T")


class FakeHarness:
    kill_signals = True
    reports_health = True

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.clock.now = 1_800_000_000.0
        self.engine = FakeEngine(self.clock, allow=ALL_CALLS)

    def spec(self, name: str, **fields: object) -> ServiceSpec:
        return ServiceSpec(name=name, image="img:1", **fields)  # type: ignore[arg-type]

    def network_spec(self, name: str) -> ServiceSpec:
        return self.spec(name, networks=(f"{name}_default",))

    def failing_start(self, spec: ServiceSpec) -> ServiceSpec:
        self.engine.broken_images.add("no-command:1")
        return dataclasses.replace(spec, image="no-command:1")

    def foreign(self) -> str:
        c = ObservedContainer("f" * 64, "foreign", "", "", ContainerState.RUNNING, 0.0)
        self.engine.containers[c.id] = c
        return c.id

    def kill(self, container_id: str) -> None:
        self.engine.kill(container_id, 137, signal=9)

    def pause(self, container_id: str) -> None:
        self.engine.pause(container_id)

    def remove_outside(self, container_id: str) -> None:
        self.engine.containers.pop(container_id)

    def remove_network(self, spec: ServiceSpec, container_id: str) -> bool:
        self.engine.unstartable[container_id] = f"network {spec.networks[0]} not found"
        return True

    def volumes(self) -> set[str]:
        return set(self.engine.volumes)

    def say(self, container_id: str, line: str) -> None:
        self.engine.say(container_id, line)

    def now(self) -> float:
        return self.clock.time()

    def later(self) -> None:
        self.clock.advance(1.0)

    def run_health_checks(self) -> None:
        self.engine.run_health_checks()

    def eventually(self, what: str, cond: Callable[[], T]) -> T:
        return wait_for(what, cond, timeout=10)


class TestFakeEngine(EngineContract):
    @pytest.fixture
    def harness(self) -> FakeHarness:
        return FakeHarness()
