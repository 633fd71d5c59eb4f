"""An in-memory engine for unit tests of the loop (integration tests use a real dockerd)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

from healerd.engine import EngineError, EngineUnavailable
from healerd.model import ContainerState, EngineEvent, ObservedContainer, ServiceSpec


class FakeEngine:
    def __init__(self) -> None:
        self.containers: dict[str, ObservedContainer] = {}
        self.calls: list[str] = []
        self.down = False
        self.fail_creates = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def version(self) -> str:
        self._check()
        return "fake"

    def _check(self) -> None:
        if self.down:
            raise EngineUnavailable("fake engine down")

    def list_managed(self) -> list[ObservedContainer]:
        self.calls.append("list")
        self._check()
        with self._lock:
            return list(self.containers.values())

    def create_and_start(self, spec: ServiceSpec, name: str) -> str:
        self.calls.append("create")
        self._check()
        with self._lock:
            if self.fail_creates:
                self.fail_creates -= 1
                raise EngineError("fake create failure")
            n = next(self._ids)
            cid = f"id{n:04d}"
            self.containers[cid] = ObservedContainer(
                id=cid,
                name=name,
                service=spec.name,
                spec_hash=spec.spec_hash,
                state=ContainerState.RUNNING,
                created=float(n),
            )
            return cid

    def remove(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        self.calls.append("remove")
        self._check()
        with self._lock:
            self.containers.pop(container.id, None)

    def watch(
        self, on_event: Callable[[EngineEvent], None], on_connected: Callable[[], None]
    ) -> None:
        raise EngineUnavailable("no events in the fake")

    def stop_watch(self) -> None:
        pass

    # -- disruptions -------------------------------------------------------------

    def kill(self, cid: str) -> None:
        with self._lock:
            c = self.containers[cid]
            self.containers[cid] = ObservedContainer(
                id=c.id,
                name=c.name,
                service=c.service,
                spec_hash=c.spec_hash,
                state=ContainerState.EXITED,
                created=c.created,
            )

    def running(self, service: str) -> list[ObservedContainer]:
        return [c for c in self.containers.values() if c.service == service and c.running]
