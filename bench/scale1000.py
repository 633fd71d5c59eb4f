"""A thousand containers on one node (issue 19): the same figures as at 100-300, side
by side with the engine in the same run, and how they grow with the number of
containers.

On the run's private dockerd (its /20 bridge holds 4,094 addresses; each container of
the suite takes one; dockerd inherits this shell's file-descriptor limit, 20,000 here,
and the kernel's pid_max 32,768 is well above the ~3,000 processes of 1,000 busybox
containers and their shims):

1. slope: one service scaled 10 -> 100 -> 300; at each size one full pass of a
   Controller next to a bare label-filtered list (samples interleaved, ratio of each
   pair), `healerctl status` and `healerctl get -o json` wall times, idle, heals;
2. cold start 0 -> 1,000 in ten steps of 100, each step healerd's (one more service
   file of 100 replicas, to its 100th start event) next to the bound's (100 bare
   containers made by 8 threads, the engine's best parallelism at this size),
   docker-compose's (`up -d --scale kI=100 kI`) and Swarm's (on a single-node swarm
   for these steps only: what `docker stack deploy` of the step's file makes, an overlay
   network and a service of 100 replicas on it), in a rotating order, the references'
   containers removed after each step; then at 1,000: the pass, status and get figures,
   idle for 120 s (CPU of one core from /proc, engine calls from healerd's metrics, RSS
   against the import floor), heal p50 after `docker kill` of one container (30 rounds,
   each next to a bare create+start and a perfect script's heal of a bare container),
   healerd's storm (500 of the 1,000 killed at once, to the 500th replacement's start
   event, counting creates), healerd's stop (which hands the 1,000 to the engine's
   restart policy), and the bare storm from the same engine state (healerd's history
   removed; 500 of its containers killed by 16 threads while a perfect script replaces
   each on its own network the moment its kill returns).

Every convergence is timed by the engine's events, not by polling a list of 1,000 rows
(which loads the engine being measured). The reference containers sit on user-defined
bridges with an alias, as healerd's do on their project's network.

Run (outside CI, about 60 minutes): `python -m bench.scale1000` (prints JSON; writes
bench/scale1000.json and the slope as bench/scale1000.svg; SCALE1000_OUT=name to keep
another run's files beside them; SCALE1000_TOOLS=compose leaves Swarm out, and
SCALE1000_SLOPE=no the slope, about 35 minutes, for a second run of the ratios). The
engine's log is kept as bench/NAME-dockerd.log. `python -m bench.scale1000 --at-1000`:
healerd's cold start, pass, healerctl and idle figures alone (bench/scale1000-at1000.json,
about 15 minutes). `python -m bench.scale1000 --compare A.json B.json`: how far two runs'
ratios are apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import docker.types
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
    remove_references,
    swarm,
)
from healerd.config import DesiredStore, load_conf_dir
from healerd.core.clock import SystemClock
from healerd.core.controller import LoopSettings
from healerd.core.wiring import build_loop
from healerd.engine.docker import DockerEngine
from healerd.model import LABEL_REPLACES
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.polling import wait_for

SERVICES = 10
PER_SERVICE = 100
TOTAL = SERVICES * PER_SERVICE
STORM = 500
SLOPE = (10, 100, 300)
SLOPE_IDLE = 40.0  # seconds of idle at each size of the slope
IDLE_AT_1000 = 120.0


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
    ctrl = build_loop(DockerEngine(docker_host()), SystemClock(), LoopSettings())
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
            # This checkout's healerctl, as the daemon under test is this checkout's.
            env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])),
        )
        times.append(time.perf_counter() - t)
    return pct(times, 0.5) * 1000


REF_NETS = [f"bench-ref-k{i}" for i in range(SERVICES)]


def _ref_networks(client: docker.APIClient) -> None:
    """The reference's containers sit on a user-defined bridge each, with an alias, as
    healerd's do on their project's `default` network: the same container, so that the
    bound is the engine's rate for what healerd asks of it. Their subnets (/20s of
    100.64.0.0/16, which nothing else here uses) are given, not drawn from the engine's
    default pools (the free /16s of 172.17-31 and the /20s of 192.168.0.0/16): with
    healerd's ten projects, docker-compose's and Swarm's docker_gwbridge, these ten
    more left healerd's last project no subnet (run F stopped there)."""
    for i, net in enumerate(REF_NETS):
        if not client.networks(names=[net]):
            pool = docker.types.IPAMPool(subnet=f"100.64.{16 * i}.0/20")
            client.create_network(
                net,
                driver="bridge",
                labels={BENCH_LABEL: "ref"},
                ipam=docker.types.IPAMConfig(pool_configs=[pool]),
            )


def _drop_ref_networks(client: docker.APIClient) -> None:
    for net in client.networks(filters={"label": BENCH_LABEL}):
        with contextlib.suppress(docker.errors.APIError):
            client.remove_network(net["Id"])


def _make(client: docker.APIClient, i: int, tag: str) -> str:
    """One bare container made and started on REF_NETS[i % 10], with its alias."""
    net = REF_NETS[i % SERVICES]
    cid = client.create_container(
        IMAGE,
        COMMAND,
        labels={BENCH_LABEL: tag},
        host_config=client.create_host_config(network_mode=net),
        networking_config=client.create_networking_config(
            {net: client.create_endpoint_config(aliases=[f"k{i % SERVICES}"])}
        ),
    )["Id"]
    client.start(cid)
    return str(cid)


def _bare(client: docker.APIClient, n: int, tag: str, first: int = 0) -> list[str]:
    """`n` containers made and started by 8 threads, the i-th on REF_NETS[i % 10]."""
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda i: _make(client, i, tag), range(first, first + n)))


def _remove(client: docker.APIClient, ids: list[str]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda cid: client.remove_container(cid, force=True), ids))


def _step_bare(client: docker.APIClient, step: int) -> float:
    """The bound's step: 100 bare containers, 8 at a time (the engine's best: at 900
    containers 100 took 26.9 s at 8, 26.6 at 16, 30.4 at 32, 29.6 at 64); then removed,
    untimed, so that the next step starts where healerd's does."""
    t0 = time.perf_counter()
    ids = _bare(client, PER_SERVICE, "bound", step * PER_SERVICE)
    took = time.perf_counter() - t0
    _remove(client, ids)
    return took


def _step_healerd(h: BenchHealerd, events: EventClock, step: int) -> float:
    """healerd's step: service k<step> from 0 to 100 replicas (one edit of its file),
    timed from the write to the 100th start event."""
    service = f"bench-k{step}"
    t0 = time.time()
    h.service(service, PER_SERVICE)
    started = events.wait_count(
        lambda e: e.get("Action") == "start" and label_of(e, "io.healerd.service") == service,
        t0,
        PER_SERVICE,
        900,
    )
    return started - t0


class _ComposeSteps:
    """Debian's docker-compose (its own parallelism, 64), a step at a time: `up -d
    --scale k<step>=100 k<step>` until it returns with the 100 running; then they are
    removed, untimed."""

    def __init__(self, client: docker.APIClient, exe: str, work: Path) -> None:
        self._client = client
        services = {
            f"k{i}": {"image": IMAGE, "command": COMMAND, "labels": {BENCH_LABEL: "compose"}}
            for i in range(SERVICES)
        }
        path = work / "docker-compose.yml"
        path.write_text(json.dumps({"version": "2.4", "services": services}))
        self._env = dict(os.environ, DOCKER_HOST=docker_host(), COMPOSE_HTTP_TIMEOUT="600")
        self._base = [exe, "-p", "benchcompose", "-f", str(path)]

    def step(self, step: int) -> float:
        t0 = time.perf_counter()
        done = subprocess.run(
            [*self._base, "up", "-d", "--scale", f"k{step}={PER_SERVICE}", f"k{step}"],
            env=self._env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        took = time.perf_counter() - t0
        ids = [
            str(c["Id"])
            for c in self._client.containers(filters={"label": f"{BENCH_LABEL}=compose"})
        ]
        if done.returncode != 0 or len(ids) != PER_SERVICE:
            raise RuntimeError(
                f"docker-compose step {step}: rc {done.returncode}, {len(ids)} running: "
                f"{done.stderr[-300:]}"
            )
        _remove(self._client, ids)
        return took

    def close(self) -> None:
        subprocess.run([*self._base, "down"], env=self._env, check=False, capture_output=True)


def _cold_steps(
    client: docker.APIClient, h: BenchHealerd, events: EventClock, work: Path, tools: list[str]
) -> dict[str, Any]:
    """Cold start 0 -> 1,000 in ten steps of 100, each step healerd's next to the bound's,
    docker-compose's and Swarm's at the same size of the engine, in a rotating order: the
    ratio of each step, and of the sums. (Measured 15 minutes apart, the engine's own rate
    moved by 40 %: no ratio to a bound from another part of the run holds still.) A
    reference that fails says so in the results and leaves the rotation."""
    runners: dict[str, Callable[[int], float]] = {
        "healerd": lambda i: _step_healerd(h, events, i),
        "bare": lambda i: _step_bare(client, i),
    }
    exe = shutil.which("docker-compose") if "compose" in tools else None
    compose = _ComposeSteps(client, exe, work) if exe else None
    if compose is not None:
        runners["compose"] = compose.step
    with contextlib.ExitStack() as stack:
        if compose is not None:
            stack.callback(compose.close)
        no_swarm = "swarm" in tools and not stack.enter_context(swarm(client))
        if "swarm" in tools and not no_swarm:
            runners["swarm"] = _SwarmSteps(client, events).step
        out = _rotate(client, runners)
        if no_swarm:
            out["failed"]["swarm"] = "swarm unavailable on this engine"
        return out


def _rotate(client: docker.APIClient, runners: dict[str, Callable[[int], float]]) -> dict[str, Any]:
    names = list(runners)
    times: dict[str, list[float]] = {n: [] for n in names}
    failed: dict[str, str] = {}
    for i in range(SERVICES):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            if n in failed:
                continue
            try:
                times[n].append(runners[n](i))
            except Exception as exc:
                if n not in ("compose", "swarm"):
                    raise
                failed[n] = f"step {i}: {type(exc).__name__}: {exc}"
                remove_references(client, "bench-swarm-")
            time.sleep(2)
        print(
            f"step {i}: "
            + ", ".join(f"{n} {times[n][-1]:.1f} s" for n in names if n not in failed),
            flush=True,
        )
    done = [n for n in names if n not in failed]
    out: dict[str, Any] = {
        "steps_s": times,
        "failed": failed,
        **{f"{n}_s": sum(times[n]) for n in done},
    }
    for ref in done[1:]:
        ratios = [x / y for x, y in zip(times["healerd"], times[ref], strict=True)]
        out[f"over_{ref}"] = {"sums": out["healerd_s"] / out[f"{ref}_s"], **_spread(ratios)}
    return out


def _bare_storm_like(client: docker.APIClient) -> dict[str, Any]:
    """The storm's reference on the very engine state healerd's storm began from:
    healerd stopped and its history removed, 500 of its 1,000 containers SIGKILLed by
    16 threads while a perfect script replaces each the moment its kill returns, on the
    victim's own network with its service's alias (8 creators, as healerd's executor)."""
    dead = client.containers(all=True, filters={"label": "io.healerd.service", "status": "exited"})
    _remove(client, [str(c["Id"]) for c in dead])
    time.sleep(5)
    running = client.containers(filters={"label": "io.healerd.service", "status": "running"})
    if len(running) != TOTAL:
        raise RuntimeError(f"{len(running)} running after healerd stopped, not {TOTAL}")

    def killed(row: dict[str, Any]) -> dict[str, Any]:
        client.kill(row["Id"])
        return row

    def like(row: dict[str, Any]) -> str:
        net = str(row["HostConfig"]["NetworkMode"])
        alias = str(row["Labels"]["io.healerd.service"])
        cid = client.create_container(
            IMAGE,
            COMMAND,
            labels={BENCH_LABEL: "storm-ref"},
            host_config=client.create_host_config(network_mode=net),
            networking_config=client.create_networking_config(
                {net: client.create_endpoint_config(aliases=[alias])}
            ),
        )["Id"]
        client.start(cid)
        return str(cid)

    creator = ThreadPoolExecutor(8)
    t0 = time.time()
    with ThreadPoolExecutor(16) as killer:
        futures = [creator.submit(like, row) for row in killer.map(killed, running[:STORM])]
    for f in futures:
        f.result()
    storm_s = time.time() - t0
    creator.shutdown()
    return {"bare_storm_s": storm_s, "history_removed_first": len(dead)}


class _SwarmSteps:
    """A single-node Swarm, a step at a time, as `docker stack deploy` of the step's file
    makes it: the stack's overlay network (Compose's service-name DNS needs one on
    Swarm; a service without one sits on the default bridge with no DNS, which is not the
    same container) and a service of 100 replicas on it with the Compose name as alias,
    timed from the network's create to the 100th task's start event; then removed,
    untimed, as `docker stack rm` would."""

    def __init__(self, client: docker.APIClient, events: EventClock) -> None:
        self._client = client
        self._events = events
        self._image = image_id(client)

    def _service(self, name: str, net: str, alias: str) -> None:
        task = docker.types.TaskTemplate(
            container_spec=docker.types.ContainerSpec(self._image, COMMAND[0], args=COMMAND[1:]),
            restart_policy=docker.types.RestartPolicy(condition="any", delay=0),
            networks=[docker.types.NetworkAttachmentConfig(net, aliases=[alias])],
        )
        mode = docker.types.ServiceMode("replicated", PER_SERVICE)
        self._client.create_service(task, name=name, mode=mode)

    def step(self, step: int) -> float:
        stack, label = f"bench-swarm-k{step}", "com.docker.swarm.service.name"
        t0 = time.time()
        net = self._client.create_network(
            f"{stack}_default",
            driver="overlay",
            labels={"com.docker.stack.namespace": stack, BENCH_LABEL: "swarm"},
        )
        try:
            self._service(stack, net["Id"], f"k{step}")
            started = self._events.wait_count(
                lambda e: e.get("Action") == "start" and label_of(e, label) == stack,
                t0,
                PER_SERVICE,
                900,
            )
        finally:
            with contextlib.suppress(docker.errors.NotFound):
                self._client.remove_service(stack)
            wait_for(
                f"{stack} gone",
                lambda: (
                    not self._client.containers(all=True, filters={"label": f"{label}={stack}"})
                ),
                600,
                0.5,
            )
            # The network outlives its last task by a moment (the endpoints' release).
            wait_for(f"{stack} network gone", lambda: self._removed(net["Id"]), 120, 0.5)
        return started - t0

    def _removed(self, net: str) -> bool:
        try:
            self._client.remove_network(net)
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError:
            return False
        return True


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
    client: docker.APIClient,
    cluster: Cluster,
    events: EventClock,
    services: list[str],
    per_service: int,
    rounds: int = 30,
) -> dict[str, Any]:
    """`docker kill` of one container to its replacement's start event, each round next
    to a bare create+start (on a user-defined bridge, as healerd's containers are) and a
    perfect script's heal (kill a bare container, its die event, create+start at once):
    where the heal's time goes is in the die and create events' times."""
    heals, bare, script, pruned = [], [], [], []
    parts: dict[str, list[float]] = {"die": [], "create": [], "kill_returned": []}

    def converged() -> bool:  # one list, not one per service, while 1,000 run
        running = client.containers(filters={"label": "io.healerd.service", "status": "running"})
        return len(running) == len(services) * per_service

    for i in range(rounds):
        service = services[i % len(services)]
        wait_for("converged", converged, 120, 0.1)
        rows = cluster.containers(service, history=True)
        row = cluster.running(service)[0]
        victim = row["Id"]
        # A slot that already keeps a failed container as history: with history_limit 1
        # the heal removes that one before it creates (the limit is never exceeded).
        before = row["Labels"].get(LABEL_REPLACES, "")
        pruned.append(any(c["Id"] == before and c["State"] != "running" for c in rows))
        t0 = time.time()
        client.kill(victim)
        parts["kill_returned"].append(time.time() - t0)
        ev = events.wait(_replacement_of(service, victim), after=t0)
        heals.append(ev["timeNano"] / 1e9 - t0)
        for action, cid in (("die", victim), ("create", ev["id"])):
            parts[action].append(_event_at(events, action, cid, t0) - t0)
        t0 = time.perf_counter()
        (cid,) = _bare(client, 1, "heal-ref", i)
        bare.append(time.perf_counter() - t0)
        client.remove_container(cid, force=True)
        script.append(_script_heal(client, events, i))
    ratios = [h / b for h, b in zip(heals, bare, strict=True)]
    split = {
        name: [r for r, p in zip(ratios, pruned, strict=True) if p is want]
        for name, want in (("history_removed_first", True), ("no_history_yet", False))
    }
    return {
        "heals_ms": [h * 1000 for h in heals],
        "bare_ms": [b * 1000 for b in bare],
        "script_ms": [x * 1000 for x in script],
        "history_removed_first": pruned,
        "pair_ratio_by_slot": {k: _spread(v) for k, v in split.items() if v},
        "heal_p50_ms": pct(heals, 0.5) * 1000,
        "heal_p99_ms": pct(heals, 0.99) * 1000,
        "bare_create_start_p50_ms": pct(bare, 0.5) * 1000,
        "script_heal_p50_ms": pct(script, 0.5) * 1000,
        **{f"{k}_p50_ms": pct(v, 0.5) * 1000 for k, v in parts.items()},
        "ratio": pct(heals, 0.5) / pct(bare, 0.5),
        "pair_ratio": _spread(ratios),
        "over_script": _spread([h / x for h, x in zip(heals, script, strict=True)]),
    }


def _event_at(events: EventClock, action: str, cid: str, after: float) -> float:
    def match(e: dict[str, Any]) -> bool:
        return e.get("Action") == action and e["id"] == cid

    return float(events.wait(match, after)["timeNano"] / 1e9)


def _script_heal(client: docker.APIClient, events: EventClock, i: int) -> float:
    """A perfect script's heal: a bare container killed, and at its die event (which
    the script is shown at once, as healerd is shown its events) a bare create+start;
    from before the kill to the replacement's start event, as healerd's heal is timed."""
    (victim,) = _bare(client, 1, "script-victim", i)
    t0 = time.time()
    threading.Thread(target=client.kill, args=(victim,), daemon=True).start()
    _event_at(events, "die", victim, t0)
    cid = _make(client, i, "script-heal")
    took = _event_at(events, "start", cid, t0) - t0
    _remove(client, [victim, cid])
    return took


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


def _ours(e: dict[str, Any]) -> bool:
    return str(label_of(e, "io.healerd.service") or "").startswith("bench-k")


def _storm(
    client: docker.APIClient, cluster: Cluster, events: EventClock, h: BenchHealerd
) -> dict[str, Any]:
    wait_for("converged", lambda: _all_converged(cluster, PER_SERVICE), 300, 0.1)
    time.sleep(6)  # past min_ready_seconds
    running = client.containers(filters={"label": "io.healerd.service", "status": "running"})
    victims = [c["Id"] for c in running[:STORM]]
    m0 = _metrics(str(h.socket))
    cpu0 = psutil.Process(h.pid).cpu_times()
    gone = set(victims)
    t0 = time.time()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(client.kill, victims))
    # Timed by the start event of the 500th replacement, not by polling the engine.
    healed = events.wait_count(
        lambda e: e.get("Action") == "start" and _ours(e) and e["id"] not in gone, t0, STORM, 900
    )
    storm_s = healed - t0
    cpu1 = psutil.Process(h.pid).cpu_times()
    wait_for(  # and confirmed by the level: 1,000 run, none of them a victim
        "storm healed",
        lambda: (
            _all_converged(cluster, PER_SERVICE)
            and not gone
            & {c["Id"] for c in client.containers(filters={"label": "io.healerd.service"})}
        ),
        120,
        1.0,
    )
    m1 = _metrics(str(h.socket))
    time.sleep(3)
    creates = events.count(lambda e: e.get("Action") == "create" and _ours(e), t0)
    calls = ("healerd_engine_list_calls_total", "healerd_reconcile_passes_total")
    return {
        "storm_s": storm_s,
        "creates": creates,
        "healerd_cpu_s": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
        **{k.removeprefix("healerd_"): m1.get(k, 0) - m0.get(k, 0) for k in calls},
    }


def run() -> dict[str, Any]:
    client = api()
    cluster = Cluster(client)
    image_id(client)
    cleanup(client)
    out: dict[str, Any] = {"slope": {}}
    # 1. slope, one service (SCALE1000_SLOPE=no leaves it out, for a second run's ratios)
    _ref_networks(client)
    h = BenchHealerd("scale1000-slope")
    try:
        h.service("bench-slope", 0)
        h.start()
        for n in SLOPE if os.environ.get("SCALE1000_SLOPE") != "no" else ():
            h.service("bench-slope", n)
            wait_for(f"{n}", lambda n=n: cluster.converged("bench-slope", n), 600, 0.1)
            time.sleep(6)
            row = _pass_vs_list(client, h.conf.conf_d)
            row["status_ms"] = _ctl_ms(h, "status")
            row["get_json_ms"] = _ctl_ms(h, "get", "-o", "json")
            row["idle"] = _idle(h, SLOPE_IDLE)
            with EventClock(client) as events:
                row["heal"] = _heal_rounds(client, cluster, events, ["bench-slope"], n, 6)
            out["slope"][n] = row
            print(f"slope {n}: {json.dumps(row)}", flush=True)
    finally:
        h.stop()
        cleanup(client)
    # 2. healerd to 1,000, a step of 100 at a time, next to the bound and docker-compose
    _ref_networks(client)
    h = BenchHealerd("scale1000", handoff=True)
    tools = os.environ.get("SCALE1000_TOOLS", "compose,swarm").split(",")
    try:
        with EventClock(client) as events, tempfile.TemporaryDirectory() as work:
            _write_services(h, 0)
            h.start()
            time.sleep(2)
            out["cold"] = _cold_steps(client, h, events, Path(work), tools)
            out["cold_start_s"] = out["cold"]["healerd_s"]
            wait_for("cold start", lambda: _all_converged(cluster, PER_SERVICE), 120, 1.0)
            time.sleep(10)
            row = _at_1000_figures(client, h)
            out["slope"][TOTAL] = row
            out["idle"] = row["idle"]
            names = [f"bench-k{i}" for i in range(SERVICES)]
            out["heal"] = _heal_rounds(client, cluster, events, names, PER_SERVICE)
            row["heal"] = out["heal"]
            print(f"heal: {json.dumps(out['heal'])}", flush=True)
            # 3. the storm: healerd's, then the bare one from the same engine state
            out["storm"] = _storm(client, cluster, events, h)
            print(f"storm: {json.dumps(out['storm'])}", flush=True)
        # The stop at 1,000, which hands 1,000 containers to the engine's restart policy.
        t0 = time.perf_counter()
        h.stop(timeout=20)
        out["stop_with_handoff_s"] = time.perf_counter() - t0
        print(f"stop with the hand-off: {out['stop_with_handoff_s']:.1f} s", flush=True)
        out["engine"] = {
            "bare_create_1000_s": out["cold"]["bare_s"],
            **_bare_storm_like(client),
        }
        print(f"engine: {json.dumps(out['engine'])}", flush=True)
    finally:
        h.stop()
        cleanup(client)
        _drop_ref_networks(client)
    return _judged(out)


def _cold_start_and_idle(
    client: docker.APIClient,
    cluster: Cluster,
    h: BenchHealerd,
    out: dict[str, Any],
    events: EventClock,
) -> dict[str, Any]:
    """healerd 0 -> 1,000 (out["cold_start_s"], from the write of the files), then at
    1,000: the pass against a bare list, healerctl, 120 s idle (the returned row)."""
    _write_services(h, 0)
    h.start()
    time.sleep(2)
    t0 = time.time()
    _write_services(h, PER_SERVICE)
    started = lambda e: e.get("Action") == "start" and _ours(e)  # noqa: E731
    out["cold_start_s"] = events.wait_count(started, t0, TOTAL, 1800) - t0
    wait_for("cold start", lambda: _all_converged(cluster, PER_SERVICE), 120, 1.0)
    print(f"cold start: {out['cold_start_s']:.1f} s", flush=True)
    time.sleep(10)
    return _at_1000_figures(client, h)


def _at_1000_figures(client: docker.APIClient, h: BenchHealerd) -> dict[str, Any]:
    """At 1,000 converged: the pass against a bare list, healerctl, 120 s idle."""
    row = _pass_vs_list(client, h.conf.conf_d)
    row["status_ms"] = _ctl_ms(h, "status")
    row["get_json_ms"] = _ctl_ms(h, "get", "-o", "json")
    print(f"at {TOTAL}: {json.dumps(row)}", flush=True)
    row["idle"] = _idle(h, IDLE_AT_1000)
    print(f"idle: {json.dumps(row['idle'])}", flush=True)
    return row


def at_1000() -> dict[str, Any]:
    """healerd alone at 1,000 (10 x 100): cold start, one pass against a bare list,
    healerctl, 120 s idle. The figures that healerd's own costs move, in about 15
    minutes (`--at-1000`), without the references the ratios of the full run need."""
    client = api()
    cluster = Cluster(client)
    image_id(client)
    cleanup(client)
    out: dict[str, Any] = {}
    h = BenchHealerd("scale1000")
    try:
        with EventClock(client) as events:
            out["at_1000"] = _cold_start_and_idle(client, cluster, h, out, events)
    finally:
        h.stop()
        cleanup(client)
    return out


def _judged(out: dict[str, Any]) -> dict[str, Any]:
    at = out["slope"][TOTAL]
    idle = out["idle"]
    eng = out["engine"]
    cold = out["cold"]
    out["ratios"] = {
        "pass_over_list_at_1000": at["ratio"]["p50"],
        "cold_start_over_bare_create": cold["over_bare"]["sums"],
        "storm_over_bare_storm": out["storm"]["storm_s"] / eng["bare_storm_s"],
        "heal_over_bare_create_start": out["heal"]["ratio"],
        "rss_over_floor_mib": idle["rss_mib"] - idle["import_floor_mib"],
    }
    if "over_compose" in cold:
        out["ratios"]["cold_start_over_compose"] = cold["over_compose"]["sums"]
    if "over_swarm" in cold:
        out["ratios"]["cold_start_over_swarm"] = cold["over_swarm"]["sums"]
    r = out["ratios"]
    out["goals"] = {
        "cold start faster than docker-compose --scale": r.get("cold_start_over_compose", 9) < 1,
        "cold start faster than Swarm": r.get("cold_start_over_swarm", 9) < 1,
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


def plot(out: dict[str, Any], path: Path) -> None:
    """The slope as an SVG: each figure against the number of containers (log scale),
    healerd next to its reference where it has one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(int(n) for n in out["slope"])
    rows = [out["slope"][n if n in out["slope"] else str(n)] for n in sizes]

    def col(f: Callable[[dict[str, Any]], float]) -> list[float]:
        return [f(r) for r in rows]

    fig, ax = plt.subplots(2, 3, figsize=(13, 7.5))
    panels: list[tuple[str, list[tuple[str, list[float]]]]] = [
        ("one full pass vs a bare list (ms)", [
            ("healerd pass", col(lambda r: r["pass_p50_ms"])),
            ("bare list", col(lambda r: r["list_p50_ms"])),
        ]),
        ("pass / list (p50 of pairs)", [("ratio", col(lambda r: r["ratio"]["p50"]))]),
        ("healerctl, new process (ms)", [
            ("status", col(lambda r: r["status_ms"])),
            ("get -o json", col(lambda r: r["get_json_ms"])),
        ]),
        ("heal after docker kill, p50 (ms)", [
            ("healerd", col(lambda r: r["heal"]["heal_p50_ms"])),
            ("bare create+start", col(lambda r: r["heal"]["bare_create_start_p50_ms"])),
        ]),
        ("idle CPU (% of one core)", [
            ("healerd", col(lambda r: r["idle"]["cpu_percent_of_one_core"]))
        ]),
        ("RSS above the import floor (MiB)", [
            ("healerd", col(lambda r: r["idle"]["rss_mib"] - r["idle"]["import_floor_mib"]))
        ]),
    ]  # fmt: skip
    for a, (title, lines) in zip(ax.flat, panels, strict=True):
        for label, ys in lines:
            a.plot(sizes, ys, marker="o", label=label)
        a.set_xscale("log")
        a.set_xticks(sizes, [str(n) for n in sizes])
        a.set_title(title, fontsize=10)
        a.set_xlabel("containers (1 service; 10 x 100 at 1,000)", fontsize=8)
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    fig.suptitle(f"healerd from 10 to 1,000 containers ({out.get('commit', '')})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "?"


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each ratio of two runs, and how far apart they are (relative to their mean)."""
    out = {}
    for key in sorted(set(a["ratios"]) & set(b["ratios"])):
        x, y = float(a["ratios"][key]), float(b["ratios"][key])
        mean = (x + y) / 2
        out[key] = {"run1": x, "run2": y, "apart": abs(x - y) / mean if mean else 0.0}
    return out


def main() -> int:
    if sys.argv[1:2] == ["--compare"]:  # --compare RUN1.json RUN2.json
        a, b = (json.loads(Path(f).read_text()) for f in sys.argv[2:4])
        print(json.dumps(compare(a, b), indent=2))
        return 0
    commit = _commit()
    quick = sys.argv[1:2] == ["--at-1000"]
    name = os.environ.get("SCALE1000_OUT", "scale1000-at1000" if quick else "scale1000")
    with private_engine(save_log=Path(__file__).with_name(f"{name}-dockerd.log")):
        out = at_1000() if quick else run()
    out["commit"] = commit
    out["finished_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    text = json.dumps(out, indent=2, default=str)
    Path(__file__).with_name(f"{name}.json").write_text(text + "\n")
    if not quick:
        plot(out, Path(__file__).with_name(f"{name}.svg"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
