"""The local API under abuse, against a running healerd and a real (private) dockerd
(issue 15, findings 3 and 4).

- Another uid (a real one: a child that drops to `nobody` before it connects, so the
  kernel's SO_PEERCRED says 65534) holds 100 connections, half of them long polls: root's
  `healerctl status` still answers within a second, the flood's refusals are logged
  rarely, and its long polls end when it goes away.
- Readers polling /v1/containers and /v1/diff as fast as they can while a replica is
  killed: the heal stays within its usual bound (tests/integration/test_heal.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.cli.client import ApiFailure, Client, DaemonUnreachable
from tests.integration.harness import HEAL_DEADLINE, heal_latency, unique
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import REPO, Healerd
from tests.support.polling import wait_for

NOBODY = 65534
# Connects `n` times as nobody (every other connection a 30 s long poll of the events),
# says "ready", and holds them until its stdin closes. Everything is imported before the
# drop: the interpreter may live where nobody cannot read.
FLOOD = f"""
import os, socket, sys
path, n = sys.argv[1], int(sys.argv[2])
os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})
assert os.getuid() == os.geteuid() == {NOBODY}
held = []
for i in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    if i % 2:
        try:
            s.sendall(b"GET /v1/events?after=999999999&wait=30 HTTP/1.0\\r\\n\\r\\n")
        except OSError:
            pass  # refused and closed already
    held.append(s)
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def sock() -> Iterator[Path]:
    """A socket path in a directory anyone may traverse (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="healerd-fair-"))
    d.chmod(0o755)
    yield d / "healerd.sock"
    shutil.rmtree(d, ignore_errors=True)


def ctl(sock: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "healerd.cli.healerctl", "--socket", str(sock), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    return p, time.monotonic() - t0


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def test_root_is_served_within_a_second_while_nobody_holds_100_connections(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, sock: Path
) -> None:
    svc = unique("fair")
    config.service("fair.yaml", svc, 1)
    healerd.start("--socket", str(sock))
    wait_for("the API socket", sock.exists, timeout=10)
    p, _ = ctl(sock, "wait", svc, "--timeout", "30s")
    assert p.returncode == 0, p.stderr
    sock.chmod(0o666)  # nobody may read, as a member of the socket's group would
    assert healerd.pid is not None
    idle_threads = threads_of(healerd.pid)
    _, cold = ctl(sock, "version")  # healerctl's own start-up, for the record

    flood = subprocess.Popen(
        [sys.executable, "-c", FLOOD, str(sock), "100"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert flood.stdout is not None and flood.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        # The request itself, and the whole `healerctl status` command.
        t0 = time.monotonic()
        data = Client(str(sock), timeout=5).get("/v1/status")
        request = time.monotonic() - t0
        p, command = ctl(sock, "status")
        print(
            f"status under the flood: request {request * 1000:.0f} ms, healerctl "
            f"{command * 1000:.0f} ms (healerctl version alone {cold * 1000:.0f} ms); "
            f"healerd's threads idle: {idle_threads}"
        )
        assert [s["name"] for s in data["services"]] == [svc]
        assert p.returncode == 0 and svc in p.stdout, (p.returncode, p.stderr)
        assert request < 1.0 and command < 1.0, (request, command)
        # nobody got its share (16 connections: 8 long polls and 8 slow requests).
        assert threads_of(healerd.pid) >= idle_threads + 16
    finally:
        assert flood.stdin is not None
        flood.stdin.close()
        flood.wait(timeout=10)
    # Gone: its long polls end at once, not after their 30 s.
    wait_for(
        "the flood's connections to end",
        lambda: threads_of(healerd.pid or 0) <= idle_threads,
        timeout=3,
    )
    log = healerd.log()
    refusals = [line for line in log.splitlines() if "refusing it" in line]
    assert 1 <= len(refusals) <= 2, refusals
    assert "nobody (uid 65534" in refusals[0] and "at most 16 per user" in refusals[0]


def test_readers_polling_containers_and_diff_do_not_slow_a_heal(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, sock: Path
) -> None:
    # A small host's engine budget: 2 calls a second, 5 at once. A heal of a kill (a list
    # and a start in place) fits in the burst; readers that spent it made it wait (3.9 s).
    config.settings("engine_calls_per_second: 2\nengine_call_burst: 5\n")
    svc = unique("readheal")
    config.service("readheal.yaml", svc, 1)
    healerd.start("--socket", str(sock))
    wait_for("the API socket", sock.exists, timeout=10)
    wait_for("1 replica", lambda: len(cluster.running(svc)) == 1, timeout=30)
    stop = threading.Event()
    reads = {"/v1/containers": 0, "/v1/diff": 0}

    def reader(path: str) -> None:
        # 50 reads a second, far more than any dashboard: a read used to cost a token.
        client = Client(str(sock), timeout=60)
        while not stop.wait(0.02):
            try:
                client.get(path)
                reads[path] += 1
            except (ApiFailure, DaemonUnreachable):
                pass

    readers = [threading.Thread(target=reader, args=(p,), daemon=True) for p in reads]
    for t in readers:
        t.start()
    latencies = []
    try:
        for _ in range(3):
            time.sleep(3)  # the bucket refills (and the readers go on reading)
            (victim,) = cluster.running(svc)
            latencies.append(
                heal_latency(cluster, svc, victim["Id"], lambda v=victim: cluster.api.kill(v["Id"]))
            )
    finally:
        stop.set()
        for t in readers:
            t.join(timeout=70)
    shown = ", ".join(f"{s * 1000:.0f} ms" for s in latencies)
    print(f"heal latencies with a reader of each ({reads}): {shown}")
    assert all(n > 10 for n in reads.values()), reads
    assert max(latencies) < HEAL_DEADLINE, latencies
