"""Many replicas: the engine's parallel create rate, a storm of kills, a cold start, the
cost of one pass, and healerd's cost while idle."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import psutil

from bench.lib import (
    BENCH_LABEL,
    IMAGE,
    BenchHealerd,
    EventClock,
    api,
    cleanup,
    docker_host,
    image_id,
    label_of,
    pct,
    swarm,
)
from healerd.config import DesiredStore, load_conf_dir
from healerd.core.clock import SystemClock
from healerd.core.controller import LoopSettings
from healerd.core.wiring import build_loop
from healerd.engine.docker import DockerEngine
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.polling import wait_for


def create_rate(client: docker.APIClient, n: int, parallel: int) -> float:
    """Containers created and started per second, `parallel` at a time."""

    def one(_: int) -> str:
        cid = client.create_container(IMAGE, COMMAND, labels={BENCH_LABEL: "1"})["Id"]
        client.start(cid)
        return str(cid)

    t0 = time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        ids = list(pool.map(one, range(n)))
    rate = n / (time.monotonic() - t0)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda c: client.remove_container(c, force=True), ids))
    return rate


def storm_and_cold(replicas: int = 100, killed: int = 50) -> dict[str, Any]:
    client = api()
    cluster = Cluster(client)
    image_id(client)
    cleanup(client)
    out: dict[str, Any] = {}
    rates = {f"parallel_{p}": create_rate(client, replicas, p) for p in (8, 4)}
    rates["sequential"] = create_rate(client, 30, 1)
    best = max(rates.values())
    out["engine_create_rate_per_s"] = rates
    h = BenchHealerd("fleet")
    try:
        with EventClock(client) as events:
            h.service("bench-fleet", 0)
            h.start()
            time.sleep(2)  # let it start up; the cold start is timed from the edit
            t0 = time.time()
            h.service("bench-fleet", replicas)
            wait_for("cold start", lambda: cluster.converged("bench-fleet", replicas), 300, 0.05)
            cold = time.time() - t0
            out["cold_start_s"] = cold
            out["cold_start_bound_s"] = replicas / best
            time.sleep(6)  # let them pass min_ready_seconds; nothing is timed here
            victims = [c["Id"] for c in cluster.running("bench-fleet")[:killed]]
            t0 = time.time()
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(client.kill, victims))
            wait_for(
                "storm healed",
                lambda: (
                    cluster.converged("bench-fleet", replicas)
                    and not set(victims) & {c["Id"] for c in cluster.containers("bench-fleet")}
                ),
                300,
                0.05,
            )
            storm = time.time() - t0
            time.sleep(2)
            creates = events.count(
                lambda e: (
                    e.get("Action") == "create"
                    and label_of(e, "io.healerd.service") == "bench-fleet"
                ),
                t0,
            )
            out["storm_s"] = storm
            out["storm_bound_s"] = killed / best
            out["storm_creates"] = creates
    finally:
        h.stop()
        cleanup(client)
    out["engine_kill_and_replace_s"] = _engine_storm(client, replicas, killed)
    compose = _compose_cold(replicas)
    if compose is not None:
        out["compose_up_scale_s"] = compose
    with swarm(client) as have_swarm:
        if have_swarm:
            out["swarm_cold_start_s"] = _swarm_cold(client, replicas)
    out["ratios"] = {
        "cold_over_bound": out["cold_start_s"] / out["cold_start_bound_s"],
        "storm_over_bound": out["storm_s"] / out["storm_bound_s"],
        "storm_over_engine_kill_and_replace": out["storm_s"] / out["engine_kill_and_replace_s"],
    }
    out["goals"] = {
        "storm <= 1.3 x (50 / best parallel create rate)": out["ratios"]["storm_over_bound"] <= 1.3,
        "storm: exactly 50 creates": out["storm_creates"] == killed,
        "cold start <= 1.3 x (100 / best parallel create rate)": out["ratios"]["cold_over_bound"]
        <= 1.3,
    }
    return out


def _engine_storm(client: docker.APIClient, replicas: int, killed: int) -> float:
    """The same storm with no healer: 16 threads kill `killed` of `replicas` bare
    containers, and a perfect script creates a replacement for each, 8 at a time, as soon
    as its kill returns. The engine's own cost of the storm, kills included."""

    def one(_: int) -> str:
        cid = client.create_container(IMAGE, COMMAND, labels={BENCH_LABEL: "storm"})["Id"]
        client.start(cid)
        return str(cid)

    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(one, range(replicas)))
    time.sleep(2)
    creator = ThreadPoolExecutor(8)
    t0 = time.time()
    with ThreadPoolExecutor(16) as killer:
        futures = [creator.submit(one, 0) for _ in killer.map(client.kill, ids[:killed])]
    for f in futures:
        f.result()
    elapsed = time.time() - t0
    creator.shutdown()
    cleanup(client)
    return elapsed


def _compose_cold(replicas: int) -> float | None:
    """`docker-compose up -d --scale` (Debian's docker-compose) to `replicas`, or None."""
    exe = shutil.which("docker-compose")
    if exe is None:
        print("docker-compose not installed: no compose figure", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory() as d:
        spec = {
            "version": "2.4",
            "services": {
                "web": {"image": IMAGE, "command": COMMAND, "labels": {BENCH_LABEL: "compose"}}
            },
        }
        path = Path(d) / "docker-compose.yml"
        path.write_text(json.dumps(spec))
        env = dict(os.environ, DOCKER_HOST=docker_host())
        base = [exe, "-p", "benchcompose", "-f", str(path)]
        t0 = time.time()
        subprocess.run(
            [*base, "up", "-d", "--scale", f"web={replicas}"],
            env=env,
            check=True,
            capture_output=True,
        )
        elapsed = time.time() - t0
        subprocess.run([*base, "down", "-t", "1"], env=env, check=False, capture_output=True)
    return elapsed


def _swarm_cold(client: docker.APIClient, replicas: int) -> float:
    import docker.types

    img = image_id(client)
    task = docker.types.TaskTemplate(
        container_spec=docker.types.ContainerSpec(img, COMMAND[0], args=COMMAND[1:]),
        restart_policy=docker.types.RestartPolicy(condition="any", delay=0),
    )
    t0 = time.time()
    client.create_service(
        task, name="bench-swarm-cold", mode=docker.types.ServiceMode("replicated", replicas)
    )
    label = "com.docker.swarm.service.name=bench-swarm-cold"
    try:
        wait_for(
            "swarm cold start",
            lambda: (
                len(
                    [
                        c
                        for c in client.containers(filters={"label": label})
                        if c["State"] == "running"
                    ]
                )
                >= replicas
            ),
            600,
            0.1,
        )
        return time.time() - t0
    finally:
        cleanup(client)
        wait_for(
            "swarm tasks gone",
            lambda: not client.containers(all=True, filters={"label": label}),
            120,
            0.2,
        )


def _metrics(sock: str) -> dict[str, float]:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(sock)
    s.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    out: dict[str, float] = {}
    for line in data.decode().split("\r\n\r\n", 1)[-1].splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def _import_floor() -> float:
    code = (
        "import docker, yaml, psutil\n"
        "try:\n import systemd.daemon\nexcept ImportError:\n pass\n"
        "print(psutil.Process().memory_info().rss)"
    )
    return int(subprocess.check_output([sys.executable, "-c", code])) / 2**20


def scale_and_idle(
    sizes: tuple[int, ...] = (10, 100, 300), idle_seconds: float = 120.0
) -> dict[str, Any]:
    """Time of one full pass next to a bare list call at each size, then the idle cost."""
    client = api()
    cluster = Cluster(client)
    image_id(client)
    cleanup(client)
    h = BenchHealerd("scale")
    out: dict[str, Any] = {"pass": {}}
    try:
        h.service("bench-scale", 0)
        h.start()
        for n in sizes:
            h.service("bench-scale", n)
            wait_for(f"{n} replicas", lambda n=n: cluster.converged("bench-scale", n), 600, 0.1)
            engine = DockerEngine(docker_host())
            ctrl = build_loop(engine, SystemClock(), LoopSettings())
            ctrl.set_desired(
                DesiredStore().update(load_conf_dir(h.conf.conf_d, strict_modes=False))
            )
            ctrl.process_once()  # warm up: first status, connection pool
            passes, lists = [], []
            for _ in range(20):
                ctrl.queue.add("bench-scale", force=True)
                t = time.perf_counter()
                ctrl.process_once()
                passes.append(time.perf_counter() - t)
                t = time.perf_counter()
                client.containers(all=True, filters={"label": "io.healerd.service"})
                lists.append(time.perf_counter() - t)
            assert ctrl.stats.creates == 0 and ctrl.stats.removes == 0
            ctrl.shutdown()
            out["pass"][n] = {
                "pass_p50_ms": pct(passes, 0.5) * 1000,
                "list_p50_ms": pct(lists, 0.5) * 1000,
                "ratio": pct(passes, 0.5) / pct(lists, 0.5),
            }
        time.sleep(10)  # settle: the last containers pass min_ready_seconds
        proc = psutil.Process(h.pid)
        sock = str(h.socket)
        m0, c0, t0 = _metrics(sock), proc.cpu_times(), time.monotonic()
        time.sleep(idle_seconds)
        m1, c1, t1 = _metrics(sock), proc.cpu_times(), time.monotonic()
        minutes = (t1 - t0) / 60

        def delta(key: str) -> float:
            return m1.get(key, 0.0) - m0.get(key, 0.0)

        actions = sum(v for k, v in m1.items() if k.startswith("healerd_actions_total")) - sum(
            v for k, v in m0.items() if k.startswith("healerd_actions_total")
        )
        out["idle"] = {
            "containers": sizes[-1],
            "seconds": t1 - t0,
            "cpu_percent_of_one_core": 100
            * ((c1.user + c1.system) - (c0.user + c0.system))
            / (t1 - t0),
            "list_calls_per_min": delta("healerd_engine_list_calls_total") / minutes,
            "actions": actions,
            "rss_mib": proc.memory_info().rss / 2**20,
            "import_floor_mib": _import_floor(),
        }
    finally:
        h.stop()
        cleanup(client)
    idle = out["idle"]
    out["goals"] = {
        f"pass <= 1.5 x bare list at {n}": v["ratio"] <= 1.5 for n, v in out["pass"].items()
    } | {
        "idle CPU < 0.5% of one core": idle["cpu_percent_of_one_core"] < 0.5,
        "idle RSS <= 45 MiB": idle["rss_mib"] <= 45,
        "idle RSS within 13 MiB of the import floor": idle["rss_mib"] - idle["import_floor_mib"]
        <= 13,
        "idle: no action, nothing per container": idle["actions"] == 0,
    }
    return out


def reload_latency(edits: int = 20) -> dict[str, Any]:
    """File edit -> the first action, through inotify (no SIGHUP)."""
    client = api()
    cluster = Cluster(client)
    image_id(client)
    cleanup(client)
    h = BenchHealerd("reload")
    samples = []
    try:
        with EventClock(client) as events:
            h.service("bench-reload", 1)
            h.start()
            wait_for("1 replica", lambda: cluster.converged("bench-reload", 1), 60)
            for i in range(edits):
                n = 2 + i
                t0 = time.time()
                h.service("bench-reload", n)
                ev = events.wait(
                    lambda e: (
                        e.get("Action") == "create"
                        and label_of(e, "io.healerd.service") == "bench-reload"
                    ),
                    after=t0,
                )
                samples.append(ev["timeNano"] / 1e9 - t0)
                wait_for(f"{n} replicas", lambda n=n: cluster.converged("bench-reload", n), 60)
    finally:
        h.stop()
        cleanup(client)
    out = {
        "edit_to_first_action": {
            "p50": pct(samples, 0.5),
            "p99": pct(samples, 0.99),
            "n": len(samples),
        }
    }
    out["goals"] = {"reload p99 < 1 s": out["edit_to_first_action"]["p99"] < 1.0}
    return out
