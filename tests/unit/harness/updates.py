"""Image updates: tags, digests, a Controller that follows them, volume snapshots."""

from __future__ import annotations

import threading

from healerd.config import DesiredState
from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.timings import Timings
from healerd.core.updatedata import SnapshotFailed
from healerd.core.wiring import build_loop
from healerd.model import (
    ServiceSpec,
    UpdateConfig,
    UpdateOrder,
)
from healerd.vocabulary import AutoUpdate
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine

TAG = "reg.local:5000/app:stable"


REPO = "reg.local:5000/app"


V1, V2, V3, V4 = (f"sha256:{c * 64}" for c in "1234")


UPDATE_CALLS = LOOP_CALLS | {"pull", "registry_digest", "local_digests", "file_time"}


def desired(*specs: ServiceSpec) -> DesiredState:
    return DesiredState(
        services={s.name: s for s in specs}, errors=(), hold_orphans=False, broken_files=()
    )


def follower(replicas: int = 2, **kw: object) -> ServiceSpec:
    update = UpdateConfig(order=UpdateOrder.START_FIRST, progress_deadline=60.0)
    kw.setdefault("auto_update", AutoUpdate.REGISTRY)
    return spec("app", replicas, TAG, update_config=update, **kw)


def make(registry: str = V1) -> tuple[Controller, FakeEngine, FakeClock]:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=UPDATE_CALLS)
    engine.registry[TAG] = registry
    engine.repo_digests[TAG] = (f"{REPO}@{V1}",)
    engine.pullable = {f"{REPO}@{d}" for d in (V1, V2, V3, V4)}
    timings = Timings(backoff=Backoff(0.5, 8.0), pull_backoff=Backoff(2.0, 8.0))
    settings = LoopSettings(workers=2, timings=timings)
    return build_loop(engine, clock, settings), engine, clock


def images(engine: FakeEngine) -> list[str]:
    return sorted(c.image for c in engine.containers.values() if c.running)


def reason(ctrl: Controller) -> str:
    return {s.name: s.reason for s in ctrl.statuses()}["app"]


class FakeSnapshots:
    """The volume copies (healerd.core.updatedata.VolumeSnapshots) in memory: what was
    taken and restored, with how many containers ran then; failures on demand."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.taken: list[tuple[str, str, int]] = []  # (from, to, containers running then)
        self.restored: list[tuple[str, int]] = []
        self.fail = ""
        self.restore_fails = ""
        self.gate: threading.Event | None = None  # a restore waits for it
        self.take_raises: Exception | None = None

    def running(self) -> int:
        return sum(1 for c in self.engine.containers.values() if c.running)

    def take(self, spec: ServiceSpec, from_digest: str, to_digest: str) -> str:
        if self.take_raises is not None:
            raise self.take_raises
        if self.fail:
            raise SnapshotFailed(self.fail)
        self.taken.append((from_digest, to_digest, self.running()))
        return "taken"

    def restore(self, service: str, to_digest: str) -> str | None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.restore_fails:
            raise SnapshotFailed(self.restore_fails)
        self.restored.append((to_digest, self.running()))
        return "restored"


def restores_done() -> None:
    """Wait for the restores under way (each runs in a thread of its own)."""
    for t in threading.enumerate():
        if t.name.startswith("healerd-restore-"):
            t.join(timeout=10)
