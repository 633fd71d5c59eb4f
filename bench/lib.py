"""Shared pieces of the benchmarks: the engine, a healerd process, event timing, stats.

Benchmarks run against a private dockerd of their own (like the integration tests), so
that they never touch the host's containers (a healerd here would remove another
healerd's containers as undeclared) and can turn it into a single-node Swarm for the
reference. Everything is removed at the end, the engine included.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.busybox_image import build  # noqa: E402

_HOST = {"url": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")}
BENCH_ROOT = Path("/var/lib/healerd-bench")


def docker_host() -> str:
    return _HOST["url"]


@contextlib.contextmanager
def private_engine() -> Iterator[str]:
    """Start a private dockerd for the run; yields its URL."""
    from tests.integration.harness import PrivateDockerd

    PrivateDockerd.reap_stale(BENCH_ROOT)
    d = PrivateDockerd(BENCH_ROOT / f"run-{os.getpid()}")
    d.start()
    _HOST["url"] = d.url
    try:
        yield d.url
    finally:
        d.remove_networks()
        d.stop()
        d.remove()


IMAGE = "healerd-bench/busybox:1"
BENCH_LABEL = "healerd-bench"
# Exits at once on SIGTERM; busybox sleep as PID 1 would ignore it.
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 100000 & wait"]


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


def wait_for(
    what: str, predicate: Callable[[], Any], timeout: float, interval: float = 0.01
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


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
        """The first event after wall time `after` for which `match` is true."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for ev in self._events:
                    if ev["timeNano"] / 1e9 >= after and match(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no matching event")
                self._cond.wait(left)

    def count(self, match: Callable[[dict[str, Any]], bool], after: float) -> int:
        with self._cond:
            return sum(1 for ev in self._events if ev["timeNano"] / 1e9 >= after and match(ev))


def label_of(ev: dict[str, Any], key: str) -> str | None:
    return (ev.get("Actor") or {}).get("Attributes", {}).get(key)


class Healerd:
    """healerd as a process with a config dir of its own."""

    def __init__(self, name: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"healerd-bench-{name}-"))
        (self.dir / "conf.d").mkdir()
        (self.dir / "healerd.yaml").write_text("log_level: warning\n")
        self.log = self.dir / "healerd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def service(self, name: str, replicas: int, **extra: str) -> None:
        lines = [
            "services:",
            f"  {name}:",
            f"    image: {IMAGE}",
            f"    command: {json.dumps(COMMAND)}",
            "    stop_grace_period: 2s",
            f"    replicas: {replicas}",
            *(f"    {k}: {v}" for k, v in extra.items()),
        ]
        path = self.dir / "conf.d" / f"{name}.yaml"
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(path)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "healerd",
                "--config-dir",
                str(self.dir),
                "--docker-host",
                docker_host(),
                "--socket",
                str(self.dir / "healerd.sock"),
            ],
            stdout=open(self.log, "ab"),  # noqa: SIM115 - handed to the child
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def managed(
    client: docker.APIClient, service: str, *, running_only: bool = True
) -> list[dict[str, Any]]:
    cs = client.containers(all=True, filters={"label": f"io.healerd.service={service}"})
    return [c for c in cs if c["State"] == "running"] if running_only else cs


def cleanup(client: docker.APIClient) -> None:
    """Remove every container and Swarm service the benchmarks made; leave the swarm."""
    with contextlib.suppress(Exception):
        for svc in client.services(filters={"name": "bench-"}):
            client.remove_service(svc["ID"])
    for filt in ({"label": BENCH_LABEL}, {"label": "io.healerd.service"}):
        for c in client.containers(all=True, filters=filt):
            with contextlib.suppress(docker.errors.NotFound):
                client.remove_container(c["Id"], force=True)


@contextlib.contextmanager
def swarm(client: docker.APIClient) -> Iterator[bool]:
    """A single-node swarm on loopback for the reference; left (and its bridge removed)
    afterwards if this run created it. Yields False where Swarm cannot start here."""
    created = False
    try:
        if client.info().get("Swarm", {}).get("LocalNodeState") != "active":
            client.init_swarm(advertise_addr="127.0.0.1", listen_addr="127.0.0.1:2378")
            created = True
        yield True
    except docker.errors.APIError as exc:
        print(f"swarm unavailable: {exc}", file=sys.stderr)
        yield False
    finally:
        if created:
            with contextlib.suppress(Exception):
                client.leave_swarm(force=True)
            with contextlib.suppress(Exception):
                client.remove_network("docker_gwbridge")


def fmt(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"
