"""The benchmarks' own measuring pieces: event timing, stats, the Swarm reference, their
healerd flavour and cleanup. The engine, the healerd process, the config dir and waiting
come from tests/support, shared with the integration tests and the chaos soak.

Benchmarks run against a private dockerd of their own (like the integration tests), so
that they never touch the host's containers (a healerd here would remove another
healerd's containers as undeclared) and can turn it into a single-node Swarm for the
reference. Everything is removed at the end, the engine included.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker

from tests.support import engines
from tests.support.busybox_image import build
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd

_HOST = {"url": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")}
_ENGINE: dict[str, PrivateDockerd] = {}  # the run's private dockerd (restart benchmarks)
BENCH_ROOT = Path("/var/lib/healerd-bench")


def docker_host() -> str:
    return _HOST["url"]


@contextlib.contextmanager
def private_engine(save_log: Path | None = None, kind: str = engines.DEFAULT) -> Iterator[str]:
    """Start a private engine for the run (`kind`: one of tests/support/engines.py's);
    yields its URL (its log kept in `save_log`)."""
    PrivateDockerd.reap_stale(BENCH_ROOT, owner_marker="bench")
    d = engines.private_engine(BENCH_ROOT / f"run-{os.getpid()}", kind, bridge_prefix="hdb")
    d.start()
    _HOST["url"] = d.url
    _ENGINE["d"] = d
    try:
        yield d.url
    finally:
        _ENGINE.pop("d", None)
        d.teardown(save_log=save_log)


def engine() -> PrivateDockerd:
    """The run's private dockerd, for benchmarks that stop and start it."""
    return _ENGINE["d"]


IMAGE = "healerd-bench/busybox:1"
BENCH_LABEL = "healerd-bench"


def api() -> docker.APIClient:
    return docker.APIClient(base_url=docker_host(), version="1.41", timeout=120)


def image_id(client: docker.APIClient) -> str:
    build(client, IMAGE)
    return str(client.inspect_image(IMAGE)["Id"])


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": pct(values, 0.5),
        "p99": pct(values, 0.99),
        "mean": statistics.fmean(values) if values else float("nan"),
    }


class EventClock:
    """Reads the engine's event stream in a thread and remembers when each container
    event happened (engine time, seconds), so latencies need no polling."""

    def __init__(self, client: docker.APIClient) -> None:
        self._client = client
        self._events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> EventClock:
        self._stream = self._client.events(filters={"type": "container"}, decode=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()

    def _run(self) -> None:
        with contextlib.suppress(Exception):
            for ev in self._stream:
                with self._cond:
                    self._events.append(ev)
                    self._cond.notify_all()

    def wait(
        self, match: Callable[[dict[str, Any]], bool], after: float, timeout: float = 60.0
    ) -> dict[str, Any]:
        """The first event after wall time `after` for which `match` is true. The scan
        starts a second before `after` (the stream is in the engine's time order) and
        goes on from where it stopped: a run's list grows to tens of thousands, and a
        waiter that rescanned it all on each new event would be slow to see its own."""
        deadline = time.monotonic() + timeout
        with self._cond:
            scanned = bisect.bisect_left(
                self._events, (after - 1.0) * 1e9, key=lambda e: float(e["timeNano"])
            )
            while True:
                while scanned < len(self._events):
                    ev = self._events[scanned]
                    scanned += 1
                    if ev["timeNano"] / 1e9 >= after and match(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no matching event")
                self._cond.wait(left)

    def wait_count(
        self,
        match: Callable[[dict[str, Any]], bool],
        after: float,
        n: int,
        timeout: float,
    ) -> float:
        """Engine time of the n-th matching event after `after`: a convergence timed
        without polling the engine (a poll of 1,000 rows every 0.1 s is load of its own
        on the engine being measured, which the reference does not bear)."""
        deadline = time.monotonic() + timeout
        seen, scanned = 0, 0
        with self._cond:
            while True:
                while scanned < len(self._events):
                    ev = self._events[scanned]
                    scanned += 1
                    if ev["timeNano"] / 1e9 >= after and match(ev):
                        seen += 1
                        if seen >= n:
                            return float(ev["timeNano"]) / 1e9
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{seen} of {n} matching events in {timeout:.0f} s")
                self._cond.wait(left)

    def count(self, match: Callable[[dict[str, Any]], bool], after: float) -> int:
        with self._cond:
            return sum(1 for ev in self._events if ev["timeNano"] / 1e9 >= after and match(ev))


def label_of(ev: dict[str, Any], key: str) -> str | None:
    value = (ev.get("Actor") or {}).get("Attributes", {}).get(key)
    return None if value is None else str(value)


class BenchHealerd(Healerd):
    """healerd with a throwaway config dir of its own, logging warnings only (so start()
    does not wait for its READY line); stop() deletes the dir."""

    def __init__(self, name: str, *, handoff: bool = False) -> None:
        # Not under /tmp: healerd refuses config in a directory others can write.
        BENCH_ROOT.mkdir(mode=0o755, parents=True, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f"conf-{name}-", dir=BENCH_ROOT)
        self.conf = ConfigDir(Path(work), IMAGE)
        # The hand-off at a stop only where a benchmark measures it (bench/restart.py,
        # the stop at 1,000): elsewhere it is cleanup time, outside every figure.
        on = "true" if handoff else "false"
        self.conf.settings(f"log_level: warning\nhandoff_on_stop: {on}\n")
        self.dir = self.conf.root
        super().__init__(
            self.dir, docker_host(), self.dir / "healerd.log", log_level=None, ready_timeout=None
        )

    def service(self, name: str, replicas: int, **extra: str) -> None:
        self.conf.service(f"{name}.yaml", name, replicas, **extra)

    def stop(self, timeout: float = 10.0) -> int | None:
        try:
            return super().stop(timeout)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def cleanup(client: docker.APIClient) -> None:
    """Remove every container and Swarm service the benchmarks made; leave the swarm."""
    remove_references(client)
    Cluster(client).remove_labelled()


def remove_references(client: docker.APIClient, services: str = "bench-") -> None:
    """The references' containers and the Swarm services named `services`*; not
    healerd's (a failed reference's cleanup while healerd's steps go on)."""
    with contextlib.suppress(Exception):
        for svc in client.services(filters={"name": services}):
            client.remove_service(svc["ID"])
    Cluster(client).remove_labelled(BENCH_LABEL)


@contextlib.contextmanager
def swarm(client: docker.APIClient) -> Iterator[bool]:
    """A single-node swarm on loopback for the reference; left (and its bridge removed)
    afterwards if this run created it. Yields False where Swarm cannot start here."""
    created = False
    try:
        if client.info().get("Swarm", {}).get("LocalNodeState") != "active":
            client.init_swarm(advertise_addr="127.0.0.1", listen_addr="127.0.0.1:2378")
            created = True
    except docker.errors.APIError as exc:
        print(f"swarm unavailable: {exc}", file=sys.stderr)
        yield False
        return
    # The body's own errors are not "Swarm unavailable": they pass through, and the swarm
    # this run made is left in any case.
    try:
        yield True
    finally:
        if created:
            with contextlib.suppress(Exception):
                client.leave_swarm(force=True)
            with contextlib.suppress(Exception):
                client.remove_network("docker_gwbridge")


def fmt(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"
