"""What the engine contract suite (suite.py) needs of an engine under test besides the
engine itself: the disruptions only something outside healerd makes (`docker kill`,
`docker pause`, a network removed by hand), a container healerd does not own, and a way
to let time pass or wait for the engine. tests/unit/test_engine_contract.py gives one
for the FakeEngine, tests/integration/test_engine_contract.py one for the Docker adapter
on the private dockerd: a second engine is one more harness.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from healerd.engine import Engine
from healerd.model import ObservedContainer, ServiceSpec

T = TypeVar("T")


class Harness(Protocol):
    engine: Engine
    # Where engines differ, what healerd relies on instead (docs/engines.md):
    # - kill_signals: the engine's kill events name the signal (Docker); Podman 4.3's
    #   carry none, which core takes for a stop on purpose, as a SIGKILL;
    # - reports_health: its container list says each container's health (Docker);
    #   Podman 4.3's does not, and healerd refuses a healthcheck there at create time.
    kill_signals: bool
    reports_health: bool

    def spec(self, name: str, **fields: object) -> ServiceSpec:
        """A service of the engine's test image (whose command runs until stopped), its
        `name` made unique for the test; `fields` as ServiceSpec takes them."""
        ...

    def network_spec(self, name: str) -> ServiceSpec:
        """As `spec`, on a network of its project that the create makes."""
        ...

    def failing_start(self, spec: ServiceSpec) -> ServiceSpec:
        """`spec` changed so that the engine creates its container and its start fails
        (a command that does not exist)."""
        ...

    def foreign(self) -> str:
        """A running container without healerd's labels; its id."""
        ...

    def kill(self, container_id: str) -> None:
        """`docker kill` (SIGKILL) from outside healerd."""
        ...

    def pause(self, container_id: str) -> None:
        """`docker pause` from outside healerd."""
        ...

    def remove_outside(self, container_id: str) -> None:
        """`docker rm -f` from outside healerd."""
        ...

    def remove_network(self, spec: ServiceSpec, container_id: str) -> bool:
        """Remove the network the (stopped) container names, from outside healerd;
        False where the engine refuses while a container names it (Podman)."""
        ...

    def volumes(self) -> set[str]:
        """The names of the engine's volumes."""
        ...

    def say(self, container_id: str, line: str) -> None:
        """The container writes `line` to its output now."""
        ...

    def now(self) -> float:
        """The wall clock the engine stamps log lines with."""
        ...

    def later(self) -> None:
        """Let the wall clock move on, so that what comes next is told apart in time."""
        ...

    def run_health_checks(self) -> None:
        """Let the engine run the containers' healthchecks (the fake runs none itself)."""
        ...

    def eventually(self, what: str, cond: Callable[[], T]) -> T:
        """Poll `cond` until it is truthy (within a deadline) and return it."""
        ...


def listed(engine: Engine, container_id: str) -> ObservedContainer | None:
    return next((c for c in engine.list_managed() if c.id == container_id), None)


def created(h: Harness, spec: ServiceSpec, name: str | None = None) -> ObservedContainer:
    """Create and start one container of `spec`; as the list shows it."""
    cid = h.engine.create_and_start(spec, name or f"{spec.name}-1", {})
    got = listed(h.engine, cid)
    assert got is not None, f"{cid} is not listed"
    return got
