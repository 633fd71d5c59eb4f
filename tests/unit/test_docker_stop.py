"""The Docker adapter's stop returns once the engine's container list says stopped (issue
31): Debian 13's dockerd 26.1 answers POST /containers/ID/stop 5-20 ms before its list
does (20.10 had the list in time), and the engine contract wants the list to agree once
stop returns. Against a stand-in for the adapter's DockerClient: pure, no engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from healerd.engine.api import EngineUnavailable
from healerd.engine.docker import containers
from healerd.engine.docker.client import DockerClient
from healerd.engine.docker.containers import DockerContainers
from healerd.model import ContainerState, ObservedContainer


class _Api:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def unpause(self, container_id: str) -> None:
        self.calls.append(f"unpause {container_id}")

    def stop(self, container_id: str, timeout: int | None = None) -> None:
        self.calls.append(f"stop {container_id}")


class _Client:
    """Lists the container in `states`, one list call each (the last one for ever)."""

    def __init__(self, states: list[str]) -> None:
        self.calls: list[str] = []
        self.api = _Api(self.calls)
        self.states = states

    @contextmanager
    def call(self, what: str) -> Iterator[None]:
        yield

    def container_rows(self, filters: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
        self.calls.append(f"list {filters}")
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        yield {"Id": "c1", "State": state}


def _container(state: ContainerState = ContainerState.RUNNING) -> ObservedContainer:
    return ObservedContainer(
        id="c1", name="web-1", service="web", spec_hash="h", state=state, created=0.0
    )


def _stop(states: list[str], state: ContainerState = ContainerState.RUNNING) -> list[str]:
    client = _Client(states)
    adapter = DockerContainers()
    adapter._client = cast(DockerClient, client)
    adapter.stop(_container(state), 1)
    return client.calls


def test_stop_returns_once_the_list_no_longer_says_running() -> None:
    calls = _stop(["running", "running", "exited"])
    assert calls == ["stop c1", *["list {'id': 'c1'}"] * 3]


def test_a_paused_container_is_unpaused_stopped_and_looked_at_until_stopped() -> None:
    calls = _stop(["paused", "exited"], ContainerState.PAUSED)
    assert calls == ["unpause c1", "stop c1", *["list {'id': 'c1'}"] * 2]


def test_a_list_that_never_agrees_costs_the_settle_deadline_only(monkeypatch: Any) -> None:
    monkeypatch.setattr(containers, "SETTLE_S", 0.05)
    calls = _stop(["running"])
    assert calls[0] == "stop c1" and 2 <= len(calls) <= 20, calls


def test_a_container_gone_from_the_list_is_stopped() -> None:
    client = _Client(["exited"])
    client.container_rows = lambda filters=None: iter(())  # type: ignore[method-assign]
    adapter = DockerContainers()
    adapter._client = cast(DockerClient, client)
    adapter.stop(_container(), 1)
    assert client.calls == ["stop c1"]


def test_a_list_that_fails_after_the_stop_does_not_fail_the_stop() -> None:
    client = _Client(["exited"])

    def broken(filters: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
        client.calls.append("list")
        raise EngineUnavailable("list containers: the engine went away")
        yield {}

    client.container_rows = broken  # type: ignore[method-assign]
    adapter = DockerContainers()
    adapter._client = cast(DockerClient, client)
    adapter.stop(_container(), 1)
    assert client.calls == ["stop c1", "list"]
