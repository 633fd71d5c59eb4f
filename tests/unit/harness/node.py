"""Node limits: a Controller with admission on a fake host probe."""

from __future__ import annotations

import dataclasses

from healerd.core.admission import Admission
from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.timings import Timings
from healerd.core.wiring import build_loop
from healerd.host import HostSample, SelfSample
from healerd.model import NodeLimits
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine

Mi = 2**20


Gi = 2**30


def host(
    mem_avail: int = 4 * Gi, disk_free: int = 50 * Gi, inodes_free: int = 900_000
) -> HostSample:
    return HostSample(
        memory_total=8 * Gi,
        memory_available=mem_avail,
        disk_path="/var/lib/docker",
        disk_total=100 * Gi,
        disk_free=disk_free,
        inodes_total=1_000_000,
        inodes_free=inodes_free,
        load=(0.5, 0.4, 0.3),
        cpus=2,
    )


class FakeProbe:
    def __init__(self, sample: HostSample) -> None:
        self.host = sample
        self.samples = 0

    def sample(self, disk_path: str) -> HostSample:
        self.samples += 1
        return self.host

    def self_sample(self) -> SelfSample:
        return SelfSample(rss=40 * Mi, cpu_percent=0.5, cpu_seconds=1.0, open_fds=12, threads=6)


def admission(sample: HostSample, **limits: object) -> tuple[Admission, FakeProbe, FakeClock]:
    clock, probe = FakeClock(), FakeProbe(sample)
    lim = dataclasses.replace(NodeLimits(), **limits)  # type: ignore[arg-type]
    return Admission(probe, clock, lim, lambda: "/var/lib/docker"), probe, clock


def loop(
    sample: HostSample, **limits: object
) -> tuple[Controller, FakeEngine, FakeClock, FakeProbe]:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"image_size_hint", "pull"})
    probe = FakeProbe(sample)
    lim = dataclasses.replace(NodeLimits(), **limits)  # type: ignore[arg-type]
    adm = Admission(probe, clock, lim, lambda: "/var/lib/docker")
    settings = LoopSettings(
        workers=2, parallel_actions=4, timings=Timings(backoff=Backoff(0.5, 8.0))
    )
    return build_loop(engine, clock, settings, admission=adm), engine, clock, probe


def drive(ctrl: Controller, clock: FakeClock, seconds: float) -> None:
    end = clock.monotonic() + seconds
    while clock.monotonic() < end:
        if ctrl.process_once():
            continue
        delay = ctrl.queue.next_delay()
        if delay is None:
            return
        clock.advance(min(delay, max(0.0, end - clock.monotonic())) or 0.01)
