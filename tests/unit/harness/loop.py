"""The loop on a fake clock and engine: a Controller to drive, pass by pass."""

from __future__ import annotations

from healerd.config import DesiredState
from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.timings import Timings
from healerd.core.wiring import build_loop
from healerd.model import ServiceSpec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine


def desired(*specs: ServiceSpec, hold: bool = False) -> DesiredState:
    return DesiredState(
        services={s.name: s for s in specs}, errors=(), hold_orphans=hold, broken_files=()
    )


def make() -> tuple[Controller, FakeEngine, FakeClock]:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"pull"})
    settings = LoopSettings(
        workers=2,
        parallel_actions=4,
        timings=Timings(backoff=Backoff(0.5, 8.0), pull_backoff=Backoff(2.0, 8.0)),
    )
    return build_loop(engine, clock, settings), engine, clock


def drive(ctrl: Controller, clock: FakeClock, max_seconds: float = 120.0) -> float:
    """Run passes, jumping the clock to the next timer, for at most `max_seconds` of
    fake time (the clock ends there if a timer lies beyond) or until nothing is left."""
    start = clock.monotonic()
    for _ in range(100_000):
        if ctrl.process_once():
            continue
        delay = ctrl.queue.next_delay()
        if delay is None:
            return clock.monotonic() - start
        if clock.monotonic() + delay - start > max_seconds:
            clock.advance(start + max_seconds - clock.monotonic())
            return max_seconds
        clock.advance(delay)
    raise AssertionError("busy loop: passes without the clock moving")


def state(ctrl: Controller, name: str) -> str:
    return {s.name: s.state for s in ctrl.statuses()}[name]
