"""A thousand containers on one node (issue 19): the same figures as at 100-300, side
by side with the engine in the same run, and how they grow with the number of
containers.

On the run's private dockerd (its /20 bridge holds 4,094 addresses; each container of
the suite takes one; dockerd inherits this shell's file-descriptor limit, 20,000 here,
and the kernel's pid_max 32,768 is well above the ~3,000 processes of 1,000 busybox
containers and their shims):

1. slope: one service scaled 10 -> 100 -> 300; at each size one full pass of a
   Controller next to a bare label-filtered list (samples interleaved, ratio of each
   pair), `healerctl status` and `healerctl get -o json` wall times;
2. bound: 1,000 bare containers created and started by 8 threads (the engine's best
   parallel rate at this scale), then the bare storm: 500 of them SIGKILLed by 16
   threads while a perfect script replaces each as its kill returns;
3. healerd: cold start 0 -> 1,000 (10 services x 100, one edit of conf.d each, timed
   from the first write); the pass, status and get figures at 1,000; idle for 120 s
   (CPU of one core from /proc, engine calls from healerd's metrics, RSS against the
   import floor); heal p50 after `docker kill` of one container (20 rounds, each next to
   a bare create+start); the storm: 500 of the 1,000 killed at once, to full
   convergence, counting creates.

Swarm and `docker-compose up --scale` at 1,000 are left out of this first version (each
takes several minutes more); the cold start is compared with the engine's own bare
creation of the same 1,000.

Run (outside CI, about 15 minutes): `python -m bench.scale1000` (prints JSON; writes
bench/scale1000.json).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import psutil

from bench.fleet import _import_floor, _metrics
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
    private_engine,
)
from healerd.config import DesiredStore, load_conf_dir
from healerd.core.clock import SystemClock
from healerd.core.controller import Controller, LoopSettings
from healerd.engine.docker_engine import DockerEngine
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.polling import wait_for

SERVICES = 10
PER_SERVICE = 100
TOTAL = SERVICES * PER_SERVICE
STORM = 500
SLOPE = (10, 100, 300)


def _spread(ratios: list[float]) -> dict[str, float]:
    return {
        "p50": pct(ratios, 0.5),
        "p25": pct(ratios, 0.25),
        "p75": pct(ratios, 0.75),
        "n": len(ratios),
    }


def _pass_vs_list(client: docker.APIClient, conf_d: Path, samples: int = 40) -> dict[str, Any]:
    """One full pass of every service (one list call, a reconcile each) next to a bare
    label-filtered list, interleaved; the ratio of each pair, with its spread."""
    ctrl = Controller(DockerEngine(docker_host()), SystemClock(), LoopSettings())
    ctrl.set_desired(DesiredStore().update(load_conf_dir(conf_d, strict_modes=False)))
    ctrl.process_once()  # warm up: the first status, the connection pool
    passes, lists = [], []
    for _ in range(samples):
        ctrl.enqueue_all(force=True)
        t = time.perf_counter()
        ctrl.process_once()
        passes.append(time.perf_counter() - t)
        t = time.perf_counter()
        client.containers(all=True, filters={"label": "io.healerd.service"})
        lists.append(time.perf_counter() - t)
    acted = ctrl.stats.creates + ctrl.stats.removes
    ctrl.shutdown()
    return {
        "pass_p50_ms": pct(passes, 0.5) * 1000,
        "list_p50_ms": pct(lists, 0.5) * 1000,
        "ratio": _spread([p / q for p, q in zip(passes, lists, strict=True)]),
        "actions": acted,
    }


def _ctl_ms(h: BenchHealerd, *args: str, rounds: int = 5) -> float:
    """Wall time of `healerctl ARGS` (a new process each, as a user runs it), p50."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "healerd.cli.healerctl", "--socket", str(h.socket), *args],
            capture_output=True,
            check=True,
        )
        times.append(time.perf_counter() - t)
    return pct(times, 0.5) * 1000


def _bare(client: docker.APIClient, n: int, tag: str) -> list[str]:
    def one(_: int) -> str:
        cid = client.create_container(IMAGE, COMMAND, labels={BENCH_LABEL: tag})["Id"]
        client.start(cid)
        return str(cid)

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(n)))


def _bound_and_bare_storm(client: docker.APIClient) -> dict[str, float]:
    """The engine alone: TOTAL bare containers, 8 at a time; then STORM of them killed
    while a perfect script replaces each the moment its kill returns."""
    t0 = time.time()
    ids = _bare(client, TOTAL, "bound")
    create_s = time.time() - t0
    time.sleep(5)
    creator = ThreadPoolExecutor(8)
    t0 = time.time()
    with ThreadPoolExecutor(16) as killer:
        futures = [
            creator.submit(_bare, client, 1, "bound") for _ in killer.map(client.kill, ids[:STORM])
        ]
    for f in futures:
        f.result()
    storm_s = time.time() - t0
    creator.shutdown()
    cleanup(client)
    return {"bare_create_1000_s": create_s, "bare_storm_s": storm_s}


def _write_services(h: BenchHealerd, replicas: int) -> None:
    for i in range(SERVICES):
        h.service(f"bench-k{i}", replicas)


def _all_converged(cluster: Cluster, replicas: int) -> bool:
    running = cluster.api.containers(filters={"label": "io.healerd.service", "status": "running"})
    return len(running) == SERVICES * replicas


def _replacement_of(service: str, victim: str) -> Callable[[dict[str, Any]], bool]:
    def match(e: dict[str, Any]) -> bool:
        return (
            e.get("Action") == "start"
            and label_of(e, "io.healerd.service") == service
            and e["id"] != victim
        )

    return match


def _heal_rounds(
    client: docker.APIClient, cluster: Cluster, events: EventClock, rounds: int = 20
) -> dict[str, Any]:
    heals, bare = [], []
    for i in range(rounds):
        service = f"bench-k{i % SERVICES}"
        wait_for("converged", lambda: _all_converged(cluster, PER_SERVICE), 120, 0.1)
        victim = cluster.running(service)[0]["Id"]
        t0 = time.time()
        client.kill(victim)
        ev = events.wait(_replacement_of(service, victim), after=t0)
        heals.append(ev["timeNano"] / 1e9 - t0)
        t0 = time.perf_counter()
        (cid,) = _bare(client, 1, "heal-ref")
        bare.append(time.perf_counter() - t0)
        client.remove_container(cid, force=True)
    return {
        "heal_p50_ms": pct(heals, 0.5) * 1000,
        "heal_p99_ms": pct(heals, 0.99) * 1000,
        "bare_create_start_p50_ms": pct(bare, 0.5) * 1000,
        "ratio": pct(heals, 0.5) / pct(bare, 0.5),
    }


def _idle(h: BenchHealerd, seconds: float) -> dict[str, Any]:
    proc = psutil.Process(h.pid)
    sock = str(h.socket)
    m0, c0, t0 = _metrics(sock), proc.cpu_times(), time.monotonic()
    time.sleep(seconds)
    m1, c1, t1 = _metrics(sock), proc.cpu_times(), time.monotonic()

    def delta(prefix: str) -> float:
        return sum(v for k, v in m1.items() if k.startswith(prefix)) - sum(
            v for k, v in m0.items() if k.startswith(prefix)
        )

    return {
        "seconds": t1 - t0,
        "cpu_percent_of_one_core": 100
        * ((c1.user + c1.system) - (c0.user + c0.system))
        / (t1 - t0),
        "engine_calls": delta("healerd_engine_calls_total"),
        "list_calls": delta("healerd_engine_list_calls_total"),
        "actions": delta("healerd_actions_total"),
        "rss_mib": proc.memory_info().rss / 2**20,
        "import_floor_mib": _import_floor(),
    }


def _storm(client: docker.APIClient, cluster: Cluster, events: EventClock) -> dict[str, Any]:
    wait_for("converged", lambda: _all_converged(cluster, PER_SERVICE), 300, 0.1)
    time.sleep(6)  # past min_ready_seconds
    running = client.containers(filters={"label": "io.healerd.service", "status": "running"})
    victims = [c["Id"] for c in running[:STORM]]
    t0 = time.time()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(client.kill, victims))
    gone = set(victims)
    wait_for(
        "storm healed",
        lambda: (
            _all_converged(cluster, PER_SERVICE)
            and not gone
            & {c["Id"] for c in client.containers(filters={"label": "io.healerd.service"})}
        ),
        600,
        0.1,
    )
    storm_s = time.time() - t0
    time.sleep(3)
    creates = events.count(
        lambda e: (
            e.get("Action") == "create"
            and str(label_of(e, "io.healerd.service") or "").startswith("bench-k")
        ),
        t0,
    )
    return {"storm_s": storm_s, "creates": creates}


def run() -> dict[str, Any]:
    client = api()
    cluster = Cluster(client)
    image_id(client)
    cleanup(client)
    out: dict[str, Any] = {"slope": {}}
    # 1. slope, one service
    h = BenchHealerd("scale1000-slope")
    try:
        h.service("bench-slope", 0)
        h.start()
        for n in SLOPE:
            h.service("bench-slope", n)
            wait_for(f"{n}", lambda n=n: cluster.converged("bench-slope", n), 600, 0.1)
            time.sleep(6)
            row = _pass_vs_list(client, h.conf.conf_d)
            row["status_ms"] = _ctl_ms(h, "status")
            row["get_json_ms"] = _ctl_ms(h, "get", "-o", "json")
            out["slope"][n] = row
            print(f"slope {n}: {json.dumps(row)}", flush=True)
    finally:
        h.stop()
        cleanup(client)
    # 2. the engine alone at 1,000
    out["engine"] = _bound_and_bare_storm(client)
    print(f"engine: {json.dumps(out['engine'])}", flush=True)
    # 3. healerd at 1,000
    h = BenchHealerd("scale1000")
    try:
        with EventClock(client) as events:
            _write_services(h, 0)
            h.start()
            time.sleep(2)
            t0 = time.time()
            _write_services(h, PER_SERVICE)
            wait_for("cold start", lambda: _all_converged(cluster, PER_SERVICE), 1800, 0.2)
            out["cold_start_s"] = time.time() - t0
            print(f"cold start: {out['cold_start_s']:.1f} s", flush=True)
            time.sleep(10)
            row = _pass_vs_list(client, h.conf.conf_d)
            row["status_ms"] = _ctl_ms(h, "status")
            row["get_json_ms"] = _ctl_ms(h, "get", "-o", "json")
            out["slope"][TOTAL] = row
            print(f"at {TOTAL}: {json.dumps(row)}", flush=True)
            out["idle"] = _idle(h, 120.0)
            print(f"idle: {json.dumps(out['idle'])}", flush=True)
            out["heal"] = _heal_rounds(client, cluster, events)
            print(f"heal: {json.dumps(out['heal'])}", flush=True)
            out["storm"] = _storm(client, cluster, events)
            print(f"storm: {json.dumps(out['storm'])}", flush=True)
    finally:
        h.stop()
        cleanup(client)
    return _judged(out)


def _judged(out: dict[str, Any]) -> dict[str, Any]:
    at = out["slope"][TOTAL]
    idle = out["idle"]
    eng = out["engine"]
    out["ratios"] = {
        "pass_over_list_at_1000": at["ratio"]["p50"],
        "cold_start_over_bare_create": out["cold_start_s"] / eng["bare_create_1000_s"],
        "storm_over_bare_storm": out["storm"]["storm_s"] / eng["bare_storm_s"],
        "heal_over_bare_create_start": out["heal"]["ratio"],
        "rss_over_floor_mib": idle["rss_mib"] - idle["import_floor_mib"],
    }
    r = out["ratios"]
    out["goals"] = {
        "pass <= 1.2 x list at 1000": r["pass_over_list_at_1000"] <= 1.2,
        "idle CPU < 0.5 % of one core": idle["cpu_percent_of_one_core"] < 0.5,
        "idle: no action": idle["actions"] == 0,
        "RSS <= floor + 20 MiB": r["rss_over_floor_mib"] <= 20,
        "cold start <= 1.1 x the bare creation of 1000": r["cold_start_over_bare_create"] <= 1.1,
        "storm <= 1.1 x the bare storm": r["storm_over_bare_storm"] <= 1.1,
        "storm: exactly 500 creates": out["storm"]["creates"] == STORM,
        "status < 300 ms": at["status_ms"] < 300,
        "get -o json < 300 ms": at["get_json_ms"] < 300,
        "heal p50 <= 1.3 x bare create+start": r["heal_over_bare_create_start"] <= 1.3,
    }
    return out


def main() -> int:
    with private_engine():
        out = run()
    text = json.dumps(out, indent=2, default=str)
    Path(__file__).with_name("scale1000.json").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
