"""Heal latency (issue 28): healerd next to the references that heal the same fault the
same way, in one run, interleaved, each round's order rotated.

Every heal is timed from just before the fault to the engine's `start` event of what
heals it (event times, no polling), and judged by the p50 of its samples:

- `docker kill` of healerd's replica, healed in place, next to a perfect script that
  runs `docker start` on the same (bare) container the moment the engine's `die` event
  reaches it: the floor of an in-place heal;
- a crash from the host (SIGKILL to the container's main process) of healerd's replica,
  next to Docker's own restart policy (`always`) after the same crash, the anchor that
  restarts in place (both after 11 s of running: Docker's backoff resets after 10 s, and
  the bench's service has `restart_policy.window: 10s` to match);
- `docker rm -f` of healerd's replica, healed by a new container, next to a bare
  create+start of the same container (on a project network with the service's alias, as
  healerd's is), to the perfect replacing script (a create+start of a new bare container
  the moment the `die` of the removed one reaches it: the floor of any healer that learns
  of the removal from the engine, as healerd must) and to Swarm with `--restart-delay 0`
  (as `docker stack deploy` makes it: the stack's overlay network, the alias);
- a storm: 50 of 100 replicas killed at once (16 threads), to the 50th start, next to the
  same perfect script on 100 bare containers.

The references' containers sit on a network like healerd's (a user-defined bridge, the
service name as alias): what a heal costs in network endpoints is the engine's, and the
same on both sides. The default-bridge create+start of earlier versions is measured too,
for the record (`bare_default_bridge`).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import Any

import docker
import docker.types

from bench.lib import (
    BENCH_LABEL,
    IMAGE,
    BenchHealerd,
    EventClock,
    api,
    cleanup,
    image_id,
    label_of,
    summary,
    swarm,
)
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.polling import wait_for

SWARM_LABEL = "com.docker.swarm.service.name"
SERVICE_LABEL = "io.healerd.service"
REF_NET = "benchref_default"
# Docker's restart manager resets its backoff after 10 s of running; the crash arms wait
# one second more, and healerd's bench service forgives a run of 10 s (its window).
UPTIME = 11.0
ROUNDS = int(os.environ.get("HEAL_ROUNDS", "40"))
CRASHES = int(os.environ.get("HEAL_CRASHES", "20"))
STORMS = int(os.environ.get("HEAL_STORMS", "3"))


# -- the references ------------------------------------------------------------------


def _bare(client: docker.APIClient, role: str, policy: str | None = None) -> str:
    """A bare container on the references' project network, with an alias, as healerd
    makes its own; created, not started."""
    host = client.create_host_config(
        network_mode=REF_NET, restart_policy={"Name": policy} if policy else None
    )
    net = client.create_networking_config({REF_NET: client.create_endpoint_config(aliases=[role])})
    return str(
        client.create_container(
            IMAGE, COMMAND, labels={BENCH_LABEL: role}, host_config=host, networking_config=net
        )["Id"]
    )


class Script:
    """The perfect in-place healer: one event stream (read as healerd reads its own, a
    chunk at a time, so that no event is held back), and `docker start` of the container
    whose `die` it reads, at once, on a pool of 8 (healerd's parallel actions)."""

    def __init__(
        self, client: docker.APIClient, role: str, *, replace: bool = False, any_label: bool = False
    ) -> None:
        """`replace`: the perfect replacing healer instead (the `rm -f` floor): on the
        `die` of an armed container, create and start a new bare one of the role.
        `any_label`: it reads every container's `die`, to heal armed ones that are not
        its role's (healerd's own, while healerd is stopped: bench/engines.py)."""
        self._client = client
        self._role = role
        self._replace = replace
        self._any_label = any_label
        self._pool = ThreadPoolExecutor(8)
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.armed: set[str] = set()  # the containers it heals now

    def __enter__(self) -> Script:
        filters = {
            "type": ["container"],
            "event": ["die", "died"],  # Podman names it `died` (docs/engines.md)
            "label": [f"{BENCH_LABEL}={self._role}"],
        }
        if self._any_label:
            del filters["label"]
        c = self._client
        self._resp = c._get(
            c._url("/events"), params={"filters": json.dumps(filters)}, stream=True, timeout=None
        )
        c._raise_for_status(self._resp)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        # close() would wait for the reader's lock; a shut down socket wakes the reader
        # with end-of-stream (as healerd's own stop_watch does).
        sock = getattr(getattr(self._resp.raw, "_connection", None), "sock", None)
        if isinstance(sock, socket.socket):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)
        with suppress(Exception):
            self._resp.close()
        self._pool.shutdown(wait=False)

    def _run(self) -> None:
        with suppress(Exception):
            for line in self._resp.iter_lines(chunk_size=None):
                if not line:
                    continue
                cid = json.loads(line).get("id", "")
                if cid in self.armed:
                    self._pool.submit(self._heal, cid)

    def _heal(self, cid: str) -> None:
        if not self._replace:
            self._client.start(cid)
            return
        self.armed.discard(cid)
        new = _bare(self._client, self._role)
        self.armed.add(new)
        self._client.start(new)


# -- one sample each ----------------------------------------------------------------------


def _start_of(events: EventClock, cid: str, t0: float) -> float:
    ev = events.wait(lambda e: e.get("Action") == "start" and e.get("id") == cid, after=t0)
    return float(ev["timeNano"]) / 1e9 - t0


def _replacement(events: EventClock, key: str, value: str, victim: str, t0: float) -> float:
    ev = events.wait(
        lambda e: e.get("Action") == "start" and label_of(e, key) == value and e["id"] != victim,
        after=t0,
    )
    return float(ev["timeNano"]) / 1e9 - t0


def _uptime(client: docker.APIClient, cid: str) -> float:
    from datetime import datetime

    state = client.inspect_container(cid)["State"]
    started = state.get("StartedAt", "")
    if not state.get("Running") or not started or started.startswith("0001"):
        return 0.0
    ts = datetime.fromisoformat(started[:26].rstrip("Z") + "+00:00")
    return time.time() - ts.timestamp()


class Arms:
    """The run's containers and how each arm takes one sample."""

    def __init__(self, client: docker.APIClient, events: EventClock, img: str) -> None:
        self.c, self.events, self.img = client, events, img
        self.cluster = Cluster(client)
        self.script_box = _bare(client, "script")
        client.start(self.script_box)
        self.policy_box = _bare(client, "policy", "always")
        client.start(self.policy_box)

    def _healerd_one(self, service: str) -> str:
        (victim,) = wait_for(
            f"{service} running", lambda: self.cluster.running(service), 60, interval=0.02
        )
        return str(victim["Id"])

    def healerd_kill(self) -> float:
        victim = self._healerd_one("bench-heal")
        t0 = time.time()
        self.c.kill(victim)
        return _start_of(self.events, victim, t0)

    def script_kill(self, script: Script) -> float:
        wait_for("script's box running", lambda: _uptime(self.c, self.script_box) > 0, 30, 0.02)
        t0 = time.time()
        self.c.kill(self.script_box)
        return _start_of(self.events, self.script_box, t0)

    def healerd_rm(self) -> float:
        victim = self._healerd_one("bench-heal")
        t0 = time.time()
        self.c.remove_container(victim, force=True)
        return _replacement(self.events, SERVICE_LABEL, "bench-heal", victim, t0)

    def script_rm(self, script: Script) -> float:
        """The perfect replacing script's heal of a `docker rm -f` (its floor: it learns
        of the removal from the `die` event, as healerd does)."""
        (victim,) = tuple(script.armed) or (self._spare(script),)
        wait_for("script-rm's box running", lambda: _uptime(self.c, victim) > 0, 30, 0.02)
        t0 = time.time()
        self.c.remove_container(victim, force=True)
        return _replacement(self.events, BENCH_LABEL, "script-rm", victim, t0)

    def _spare(self, script: Script) -> str:
        cid = _bare(self.c, "script-rm")
        script.armed.add(cid)
        self.c.start(cid)
        return cid

    def bare(self) -> float:
        t0 = time.time()
        cid = _bare(self.c, "bare")
        self.c.start(cid)
        elapsed = _start_of(self.events, cid, t0)
        self.c.remove_container(cid, force=True)
        return elapsed

    def bare_default_bridge(self) -> float:
        t0 = time.time()
        cid = self.c.create_container(IMAGE, COMMAND, labels={BENCH_LABEL: "bare0"})["Id"]
        self.c.start(cid)
        elapsed = _start_of(self.events, cid, t0)
        self.c.remove_container(cid, force=True)
        return elapsed

    def swarm(self, name: str) -> float:
        (victim,) = wait_for(f"{name} task", lambda: _swarm_running(self.c, name), 60, 0.05)
        t0 = time.time()
        self.c.kill(victim["Id"])
        return _replacement(self.events, SWARM_LABEL, name, victim["Id"], t0)

    def crash_ready(self) -> bool:
        (victim,) = self.cluster.running("bench-crash") or [{"Id": ""}]
        return (
            bool(victim["Id"])
            and min(_uptime(self.c, victim["Id"]), _uptime(self.c, self.policy_box)) > UPTIME
        )

    def healerd_crash(self) -> float:
        victim = self._healerd_one("bench-crash")
        pid = int(self.c.inspect_container(victim)["State"]["Pid"])
        t0 = time.time()
        os.kill(pid, 9)
        return _start_of(self.events, victim, t0)

    def policy_crash(self) -> float:
        pid = int(self.c.inspect_container(self.policy_box)["State"]["Pid"])
        t0 = time.time()
        os.kill(pid, 9)
        return _start_of(self.events, self.policy_box, t0)


def _swarm_running(client: docker.APIClient, name: str) -> list[dict[str, Any]]:
    cs = client.containers(filters={"label": f"{SWARM_LABEL}={name}"})
    return [c for c in cs if c["State"] == "running"]


def _swarm_service(client: docker.APIClient, name: str, img: str, delay_ns: int | None) -> None:
    """As `docker stack deploy` makes a Compose service: on its stack's overlay network,
    with the service name as alias."""
    net = client.create_network(f"{name}_default", driver="overlay", labels={BENCH_LABEL: "swarm"})
    task = docker.types.TaskTemplate(
        container_spec=docker.types.ContainerSpec(img, COMMAND[0], args=COMMAND[1:]),
        restart_policy=docker.types.RestartPolicy(condition="any", delay=delay_ns),
        networks=[docker.types.NetworkAttachmentConfig(net["Id"], aliases=[name])],
    )
    client.create_service(task, name=name, mode=docker.types.ServiceMode("replicated", 1))


# -- the run ---------------------------------------------------------------------------


@contextmanager
def _references(client: docker.APIClient) -> Iterator[None]:
    with suppress(docker.errors.APIError):
        client.create_network(REF_NET, labels={BENCH_LABEL: "net"})
    try:
        yield
    finally:
        cleanup(client)
        with suppress(docker.errors.APIError):
            client.remove_network(REF_NET)


def _healerd() -> BenchHealerd:
    h = BenchHealerd("heal")
    h.service("bench-heal", 1)
    # Forgives a run of 10 s, as Docker's restart manager does (the crash arms).
    h.service("bench-crash", 1, restart_policy="{window: 10s}")
    return h


def run(rounds: int = ROUNDS, crashes: int = CRASHES, storms: int = STORMS) -> dict[str, Any]:
    client = api()
    img = image_id(client)
    cleanup(client)
    h = _healerd()
    samples: dict[str, list[float]] = {}

    def take(name: str, fn: Callable[[], float]) -> None:
        samples.setdefault(name, []).append(fn())

    try:
        with _references(client), EventClock(client) as events, swarm(client) as have_swarm:
            h.start()
            cluster = Cluster(client)
            for svc in ("bench-heal", "bench-crash"):
                wait_for(svc, lambda s=svc: cluster.converged(s, 1), 60)
            if have_swarm:
                _swarm_service(client, "bench-swarm-zero", img, 0)
                _swarm_service(client, "bench-swarm-default", img, None)
                for name in ("bench-swarm-zero", "bench-swarm-default"):
                    wait_for(name, lambda n=name: _swarm_running(client, n), 120)
            arms = Arms(client, events, img)
            with (
                Script(client, "script") as script,
                Script(client, "script-rm", replace=True) as replacer,
            ):
                script.armed.add(arms.script_box)
                _rounds(arms, (script, replacer), take, rounds, crashes, have_swarm)
            storm = _storms(client, h, events, storms)
    finally:
        h.stop()
        cleanup(client)
    out: dict[str, Any] = {k: summary(v) for k, v in samples.items()}
    out["samples"] = samples
    out["storm"] = storm
    return _judged(out)


def _rounds(
    arms: Arms,
    scripts: tuple[Script, Script],
    take: Callable[[str, Callable[[], float]], None],
    rounds: int,
    crashes: int,
    have_swarm: bool,
) -> None:
    script, replacer = scripts
    plain: list[tuple[str, Callable[[], float]]] = [
        ("healerd_kill", arms.healerd_kill),
        ("script_kill", lambda: arms.script_kill(script)),
        ("healerd_rm", arms.healerd_rm),
        ("script_rm", lambda: arms.script_rm(replacer)),
        ("bare_create_start", arms.bare),
        ("bare_default_bridge", arms.bare_default_bridge),
    ]
    if have_swarm:
        plain.append(("swarm_delay0", lambda: arms.swarm("bench-swarm-zero")))
    done_crashes = 0
    i = 0
    deadline = time.monotonic() + 3600
    while (i < rounds or done_crashes < crashes) and time.monotonic() < deadline:
        if i < rounds:
            shift = i % len(plain)
            for name, fn in plain[shift:] + plain[:shift]:
                wait_for(
                    "healerd converged", lambda: arms.cluster.converged("bench-heal", 1), 30, 0.02
                )
                take(name, fn)
            if have_swarm and i < 10:
                take("swarm_default", lambda: arms.swarm("bench-swarm-default"))
        if done_crashes < crashes and arms.crash_ready():
            pair = [("healerd_crash", arms.healerd_crash), ("policy_crash", arms.policy_crash)]
            for name, fn in pair if done_crashes % 2 == 0 else pair[::-1]:
                take(name, fn)
            done_crashes += 1
        elif i >= rounds:
            time.sleep(0.5)
        i += 1


def _storms(
    client: docker.APIClient, h: BenchHealerd, events: EventClock, n: int
) -> dict[str, Any]:
    """50 of 100 killed at once: healerd's service, then the script's boxes, `n` times."""
    replicas, killed = 100, 50
    cluster = Cluster(client)
    h.service("bench-storm", replicas)
    wait_for("100 storm replicas", lambda: cluster.converged("bench-storm", replicas), 300, 0.1)
    with ThreadPoolExecutor(8) as pool:
        boxes = list(pool.map(lambda _: _bare(client, "storm"), range(replicas)))
        list(pool.map(client.start, boxes))
    out: dict[str, list[float]] = {"healerd": [], "script": [], "creates": []}
    with Script(client, "storm") as script:
        script.armed.update(boxes)
        for i in range(n):
            for who in ("healerd", "script") if i % 2 == 0 else ("script", "healerd"):
                time.sleep(2)  # quiet before the storm
                if who == "healerd":
                    wait_for("converged", lambda: cluster.converged("bench-storm", replicas), 120)
                    victims = sorted(c["Id"] for c in cluster.running("bench-storm"))[:killed]
                else:
                    victims = boxes[:killed]
                t0 = time.time()
                with ThreadPoolExecutor(16) as killer:
                    list(killer.map(client.kill, victims))
                want = set(victims)
                last = events.wait_count(
                    lambda e, w=want: e.get("Action") == "start" and e.get("id") in w,  # type: ignore[misc]
                    t0,
                    killed,
                    300,
                )
                out[who].append(last - t0)
                if who == "healerd":
                    out["creates"].append(
                        events.count(
                            lambda e: (
                                e.get("Action") == "create"
                                and label_of(e, SERVICE_LABEL) == "bench-storm"
                            ),
                            t0,
                        )
                    )
    h.service("bench-storm", 0)
    return {**{k: summary(v) for k, v in out.items() if k != "creates"}, "samples": out}


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> float:
    return float(a["p50"]) / float(b["p50"]) if b.get("n") else float("nan")


def _judged(out: dict[str, Any]) -> dict[str, Any]:
    nan: dict[str, Any] = {"p50": float("nan"), "n": 0}
    storm = out["storm"]
    r = {
        "kill_over_script": _ratio(out["healerd_kill"], out["script_kill"]),
        "crash_over_restart_policy": _ratio(
            out.get("healerd_crash", nan), out.get("policy_crash", nan)
        ),
        "rm_over_bare_create_start": _ratio(out["healerd_rm"], out["bare_create_start"]),
        "rm_over_replacing_script": _ratio(out["healerd_rm"], out.get("script_rm", nan)),
        "replacing_script_over_bare_create_start": _ratio(
            out.get("script_rm", nan), out["bare_create_start"]
        ),
        "rm_over_swarm_delay0": _ratio(out["healerd_rm"], out.get("swarm_delay0", nan)),
        "storm_over_script": _ratio(storm["healerd"], storm["script"]),
        "swarm_default_over_rm": _ratio(out.get("swarm_default", nan), out["healerd_rm"]),
        "rm_over_bare_default_bridge": _ratio(out["healerd_rm"], out["bare_default_bridge"]),
    }
    out["ratios"] = r
    creates = storm["samples"]["creates"]
    out["goals"] = {
        "kill: healerd p50 <= 1.0 x the perfect in-place script": r["kill_over_script"] <= 1.0,
        "host crash: healerd p50 <= 1.0 x Docker's restart policy": (
            r["crash_over_restart_policy"] <= 1.0
        ),
        "rm -f: healerd p50 <= 1.2 x a bare create+start": r["rm_over_bare_create_start"] <= 1.2,
        "rm -f: healerd p50 <= 1.0 x the perfect replacing script": (
            r["rm_over_replacing_script"] <= 1.0
        ),
        "rm -f: healerd p50 <= 0.6 x Swarm --restart-delay 0": r["rm_over_swarm_delay0"] <= 0.6,
        "storm 50 of 100: healerd p50 <= 1.1 x the script": r["storm_over_script"] <= 1.1,
        "storm: no create (every heal in place)": bool(creates) and not any(creates),
    }
    return out
