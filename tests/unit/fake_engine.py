"""An in-memory engine for unit tests of the loop (integration tests use a real dockerd)."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable, Mapping

from healerd.core.clock import FakeClock
from healerd.engine import EngineError, EngineUnavailable, ImageMissing, ImagePullFailed
from healerd.model import ContainerState, EngineEvent, ObservedContainer, ServiceSpec


class FakeEngine:
    def __init__(self, clock: FakeClock | None = None) -> None:
        self.containers: dict[str, ObservedContainer] = {}
        self.calls: list[str] = []
        self.down = False
        self.fail_creates = 0
        self.images: set[str] | None = None  # None: every image is present
        self.pullable: set[str] = set()
        self.crash_images: set[str] = set()  # containers of these exit at once
        self.image_sizes: dict[str, int] = {}  # repository -> bytes of a local image
        self.root = "/fake/data-root"
        self.clock = clock
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def version(self) -> str:
        self._check()
        return "fake"

    def identity(self) -> str:
        self._check()
        return "fake-engine-id /fake/data-root"

    def data_root(self) -> str | None:
        return self.root

    def _check(self) -> None:
        if self.down:
            raise EngineUnavailable("fake engine down")

    def now(self) -> float:
        return self.clock.time() if self.clock else float(len(self.containers))

    def list_managed(self) -> list[ObservedContainer]:
        self.calls.append("list")
        self._check()
        with self._lock:
            return list(self.containers.values())

    def create_and_start(self, spec: ServiceSpec, name: str, labels: Mapping[str, str]) -> str:
        self.calls.append("create")
        self._check()
        with self._lock:
            if self.fail_creates:
                self.fail_creates -= 1
                raise EngineError("fake create failure")
            if self.images is not None and spec.image not in self.images:
                raise ImageMissing(f"no such image {spec.image}")
            n = next(self._ids)
            cid = f"id{n:04d}"
            crash = spec.image in self.crash_images
            self.containers[cid] = ObservedContainer(
                id=cid,
                name=name,
                service=spec.name,
                spec_hash=spec.spec_hash,
                state=ContainerState.EXITED if crash else ContainerState.RUNNING,
                created=self.now(),
                exit_code=1 if crash else None,
                restarts=int(labels.get("io.healerd.restarts", "0")),
                crash_streak=int(labels.get("io.healerd.crash-streak", "0")),
                source_file=labels.get("io.healerd.source-file", ""),
            )
            return cid

    def image_present(self, image: str) -> bool:
        self.calls.append("image_present")
        self._check()
        return self.images is None or image in self.images

    def image_size_hint(self, image: str) -> int | None:
        self.calls.append("image_size_hint")
        self._check()
        return self.image_sizes.get(image.rsplit(":", 1)[0])

    def pull(self, image: str) -> None:
        self.calls.append("pull")
        self._check()
        if image not in self.pullable:
            raise ImagePullFailed(f"pull {image}: no registry")
        if self.images is not None:
            self.images.add(image)

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

    def kill(self, cid: str, exit_code: int = 137) -> None:
        self.set(cid, state=ContainerState.EXITED, exit_code=exit_code)

    def set(self, cid: str, **changes: object) -> None:
        with self._lock:
            c = self.containers[cid]
            self.containers[cid] = dataclasses.replace(c, **changes)  # type: ignore[arg-type]

    def running(self, service: str) -> list[ObservedContainer]:
        return [c for c in self.containers.values() if c.service == service and c.running]
