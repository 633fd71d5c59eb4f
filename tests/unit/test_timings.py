"""One frozen `Timings` (issue 30, point 3): every recheck, backoff and window of the
loop has its default in healerd.core.timings, the loop takes them from
`LoopSettings.timings`, and a test can pass its own."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from healerd.config import DesiredState
from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import LoopSettings
from healerd.core.outcome import Facts, decide
from healerd.core.timings import Timings
from healerd.core.wiring import build_loop
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine

REPO = Path(__file__).resolve().parents[2]

# The constants they replaced, in the modules that kept them (review 2026-12-01, 3.2).
GONE = (
    "DEFAULT_BACKOFF", "IMAGE_BACKOFF", "LOOK_REUSE", "SUSPECT_RECHECK", "RESOURCE_RECHECK",
    "DEPENDENCY_RECHECK", "RECHECK_FAST", "RECHECK_SLOW", "FAST_FOR", "IMAGE_SEEN_TTL",
    "PULL_DISK_RECHECK", "SUSPECT_WINDOW", "START_ON_ITS_WAY", "SAMPLE_TTL",
    "RESERVATION_SECONDS", "RECONNECT_BACKOFF",
)  # fmt: skip


def test_timings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Timings().look_reuse = 0.0  # type: ignore[misc]


def test_no_module_keeps_a_timing_of_its_own() -> None:
    defined = re.compile(rf"^({'|'.join(GONE)}) = ", re.MULTILINE)
    found = [
        f"{p.relative_to(REPO)}: {m.group(1)}"
        for p in (REPO / "healerd").rglob("*.py")
        for m in defined.finditer(p.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_decide_looks_again_after_the_timings_it_is_given() -> None:
    t = Timings(dependency_recheck=7.0, resource_recheck=9.0, suspect_recheck=0.5)
    assert decide(Facts(dependency_wait="db"), t).after == (7.0,)
    assert decide(Facts(wait_reason="memory"), t).after == (9.0,)
    assert decide(Facts(actions=1, error="boom", suspect=True), t).after == (0.5,)


def test_the_loop_takes_its_timings_from_loop_settings() -> None:
    """An engine outage is looked at every engine_recheck_fast seconds for
    engine_fast_for, then every engine_recheck_slow: here the test's own."""
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS)
    t = Timings(
        backoff=Backoff(0.5, 60.0),
        engine_recheck_fast=0.3,
        engine_recheck_slow=4.0,
        engine_fast_for=5.0,
    )
    ctrl = build_loop(engine, clock, LoopSettings(workers=1, timings=t))
    ctrl.set_desired(DesiredState({"a": spec("a", 1)}, (), False, ()))
    ctrl.process_once()
    engine.down = True
    ctrl.queue.add("a", force=True)
    waits, start = [], clock.monotonic()
    while clock.monotonic() - start < 20.0:
        if ctrl.process_once():
            waits.append(ctrl.queue.next_delay())
        clock.advance(ctrl.queue.next_delay() or 0.01)
    assert waits[0] == pytest.approx(0.3) and waits[-1] == pytest.approx(4.0)
    assert "retry in 4.0s" in ctrl.statuses()[0].reason


def test_a_failed_pull_counts_on_the_one_failure_count_of_its_service() -> None:
    """The work queue keeps a service's failure count; a failed pull adds to it (the
    image policy keeps none of its own) and waits Timings.pull_backoff for it."""
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"pull"})
    engine.images = set()  # none present; none can be pulled yet
    t = Timings(backoff=Backoff(0.5, 8.0), pull_backoff=Backoff(2.0, 300.0))
    ctrl = build_loop(engine, clock, LoopSettings(workers=1, timings=t))
    ctrl.set_desired(DesiredState({"a": spec("a", 1, image="img:2")}, (), False, ()))
    retries = []
    for n in range(1, 4):
        ctrl.process_once()
        assert ctrl.queue.failures("a") == n
        retries.append(ctrl.statuses()[0].reason.rsplit("; ", 1)[1])
        clock.advance(ctrl.queue.next_delay() or 0.0)
    assert retries == ["retry in 2s", "retry in 4s", "retry in 8s"]
    engine.pullable.add("img:2")
    ctrl.process_once()  # pulled and created: the count starts again
    assert ctrl.queue.failures("a") == 0 and engine.calls.count("pull") == 4
