"""Heal in place: a Controller with a run book that outlives it."""

from __future__ import annotations

from collections.abc import Mapping

from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.runs import Run
from healerd.core.wiring import build_loop
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine


class DictBook:
    """A run book in memory that outlives one Controller (a restart of healerd)."""

    def __init__(self) -> None:
        self.runs: dict[str, Run] = {}
        self.saves = 0

    def load(self) -> Mapping[str, Run]:
        return dict(self.runs)

    def save(self, runs: Mapping[str, Run]) -> None:
        self.runs = dict(runs)
        self.saves += 1


def make(
    clock: FakeClock | None = None,
    engine: FakeEngine | None = None,
    book: DictBook | None = None,
) -> tuple[Controller, FakeEngine, FakeClock]:
    clock = clock or FakeClock()
    engine = engine or FakeEngine(clock, allow=LOOP_CALLS)
    ctrl = build_loop(engine, clock, LoopSettings(workers=2), runbook=book)
    return ctrl, engine, clock
