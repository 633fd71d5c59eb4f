"""Heal latency: healerd next to the bare engine, Docker's restart policy and Swarm."""

from __future__ import annotations

import os
import time
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


def _replacement(ev_clock: EventClock, key: str, value: str, victim: str, t0: float) -> float:
    ev = ev_clock.wait(
        lambda e: e.get("Action") == "start" and label_of(e, key) == value and e["id"] != victim,
        after=t0,
    )
    return float(ev["timeNano"] / 1e9 - t0)


def _swarm_service(client: docker.APIClient, name: str, img: str, delay_ns: int | None) -> None:
    policy = docker.types.RestartPolicy(condition="any", delay=delay_ns)
    task = docker.types.TaskTemplate(
        container_spec=docker.types.ContainerSpec(img, COMMAND[0], args=COMMAND[1:]),
        restart_policy=policy,
    )
    client.create_service(task, name=name, mode=docker.types.ServiceMode("replicated", 1))


def _swarm_running(client: docker.APIClient, name: str) -> list[dict[str, Any]]:
    cs = client.containers(filters={"label": f"{SWARM_LABEL}={name}"})
    return [c for c in cs if c["State"] == "running"]


def run(
    kills: int = 40, removals: int = 40, swarm_default: int = 10, policy: int = 10
) -> dict[str, Any]:
    client = api()
    img = image_id(client)
    cleanup(client)
    cluster = Cluster(client)
    h = BenchHealerd("heal")
    h.service("bench-heal", 1)
    h.start()
    samples: dict[str, list[float]] = {
        k: []
        for k in (
            "healerd_kill",
            "healerd_rm",
            "bare_create_start",
            "restart_policy",
            "swarm_delay0",
            "swarm_default",
        )
    }
    try:
        with EventClock(client) as events, swarm(client) as have_swarm:
            wait_for("healerd's replica", lambda: cluster.running("bench-heal"), 60)
            if have_swarm:
                _swarm_service(client, "bench-swarm-zero", img, 0)
                _swarm_service(client, "bench-swarm-default", img, None)
                for name in ("bench-swarm-zero", "bench-swarm-default"):
                    wait_for(name, lambda n=name: _swarm_running(client, n), 120)
            # Docker's restart policy heals a process killed from the host (not docker
            # kill); its backoff resets only after 10 s of running, so it is sampled
            # only once its container has run that long.
            rp = client.create_container(
                IMAGE,
                COMMAND,
                labels={BENCH_LABEL: "1"},
                host_config=client.create_host_config(restart_policy={"Name": "always"}),
            )["Id"]
            client.start(rp)
            for i in range(max(kills, removals)):
                for kind, n in (("healerd_kill", kills), ("healerd_rm", removals)):
                    if i >= n:
                        continue
                    wait_for(
                        "converged",
                        lambda: cluster.converged("bench-heal", 1),
                        30,
                    )
                    (victim,) = cluster.running("bench-heal")
                    t0 = time.time()
                    if kind == "healerd_kill":
                        client.kill(victim["Id"])
                    else:
                        client.remove_container(victim["Id"], force=True)
                    samples[kind].append(
                        _replacement(events, "io.healerd.service", "bench-heal", victim["Id"], t0)
                    )
                t0 = time.time()
                cid = client.create_container(IMAGE, COMMAND, labels={BENCH_LABEL: "1"})["Id"]
                client.start(cid)
                samples["bare_create_start"].append(time.time() - t0)  # start returns when running
                client.remove_container(cid, force=True)
                if have_swarm:
                    (victim,) = wait_for(
                        "swarm task", lambda: _swarm_running(client, "bench-swarm-zero"), 60
                    )
                    t0 = time.time()
                    client.kill(victim["Id"])
                    samples["swarm_delay0"].append(
                        _replacement(events, SWARM_LABEL, "bench-swarm-zero", victim["Id"], t0)
                    )
                    if i < swarm_default:
                        (victim,) = wait_for(
                            "swarm task", lambda: _swarm_running(client, "bench-swarm-default"), 60
                        )
                        t0 = time.time()
                        client.kill(victim["Id"])
                        samples["swarm_default"].append(
                            _replacement(
                                events, SWARM_LABEL, "bench-swarm-default", victim["Id"], t0
                            )
                        )
                info = client.inspect_container(rp)["State"]
                started = info.get("StartedAt", "")
                up = _uptime(started)
                if len(samples["restart_policy"]) < policy and info.get("Running") and up > 11:
                    t0 = time.time()
                    os.kill(int(info["Pid"]), 9)
                    ev = events.wait(
                        lambda e: e.get("Action") == "start" and e["id"] == rp, after=t0
                    )
                    samples["restart_policy"].append(ev["timeNano"] / 1e9 - t0)
            # Top up the restart-policy samples if the loop was too quick for them.
            deadline = time.monotonic() + 15 * max(0, policy - len(samples["restart_policy"]))
            while len(samples["restart_policy"]) < policy and time.monotonic() < deadline:
                info = client.inspect_container(rp)["State"]
                if info.get("Running") and _uptime(info.get("StartedAt", "")) > 11:
                    t0 = time.time()
                    os.kill(int(info["Pid"]), 9)
                    ev = events.wait(
                        lambda e: e.get("Action") == "start" and e["id"] == rp, after=t0
                    )
                    samples["restart_policy"].append(ev["timeNano"] / 1e9 - t0)
                time.sleep(0.5)
    finally:
        h.stop()
        cleanup(client)
    out = {k: summary(v) for k, v in samples.items()}
    bare, swarm0 = out["bare_create_start"]["p50"], out["swarm_delay0"]["p50"]
    heal = max(out["healerd_kill"]["p50"], out["healerd_rm"]["p50"])
    out["ratios"] = {
        "healerd_p50_over_bare_p50": heal / bare,
        "healerd_p50_over_swarm0_p50": heal / swarm0 if swarm0 == swarm0 else float("nan"),
        "swarm_default_p50_over_healerd_p50": out["swarm_default"]["p50"] / heal,
    }
    out["goals"] = {
        "healerd p50 <= 1.3 x bare create+start p50": out["ratios"]["healerd_p50_over_bare_p50"]
        <= 1.3,
        "healerd p50 <= 0.75 x Swarm (delay 0) p50": out["ratios"]["healerd_p50_over_swarm0_p50"]
        <= 0.75,
    }
    return out


def _uptime(started_at: str) -> float:
    from datetime import datetime

    if not started_at or started_at.startswith("0001"):
        return 0.0
    ts = datetime.fromisoformat(started_at[:26].rstrip("Z") + "+00:00")
    return time.time() - ts.timestamp()
