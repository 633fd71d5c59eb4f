"""Image updates: tags, digests and a Controller that follows them."""

from __future__ import annotations

from healerd.config import DesiredState
from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.timings import Timings
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
