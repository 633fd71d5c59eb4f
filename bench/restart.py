"""After an engine restart (a reboot of the edge host), how fast is everything back?

healerd (its containers carry restart policy `no`; healerd starts what the restart
stopped, in place) against the same containers under Docker's own `--restart always`, on
one private dockerd stopped with SIGTERM and started again. Timed from the engine's
spawn until all N containers run; the two are interleaved, `rounds` times each.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import docker

from bench.lib import BENCH_LABEL, IMAGE, BenchHealerd, api, cleanup, engine, image_id
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.polling import wait_for

SERVICE = "bench-restart"


def _restart_until_running(count: Any, n: int) -> float:
    """Stop the engine (SIGTERM), start it; seconds from the spawn until `n` run."""
    d = engine()
    d.stop()
    t0 = time.monotonic()
    d.start()
    wait_for(f"{n} running again", lambda: count() >= n, 300, 0.02, ignore=(Exception,))
    return time.monotonic() - t0


def _reference(client: docker.APIClient, n: int) -> Any:
    """n containers under Docker's restart policy `always`; returns their counter."""
    for i in range(n):
        cid = client.create_container(
            IMAGE,
            COMMAND,
            name=f"bench-always-{i}",
            labels={BENCH_LABEL: "restart"},
            host_config=client.create_host_config(restart_policy={"Name": "always"}),
            stop_timeout=1,
        )["Id"]
        client.start(cid)

    def running() -> int:
        c = api()
        try:
            filters = {"label": BENCH_LABEL, "status": "running"}
            return len(c.containers(filters=filters))
        finally:
            c.close()

    return running


def run(n: int = 50, rounds: int = 3) -> dict[str, Any]:
    client = api()
    image_id(client)
    cleanup(client)
    healerd_s: list[float] = []
    always_s: list[float] = []
    for _ in range(rounds):
        # healerd, on its own on the engine.
        h = BenchHealerd("restart")
        try:
            h.service(SERVICE, n)
            h.start()
            wait_for("converged", lambda: Cluster(api()).converged(SERVICE, n), 300, 0.1)
            time.sleep(1)
            healerd_s.append(
                _restart_until_running(lambda: len(Cluster(api()).running(SERVICE)), n)
            )
        finally:
            h.stop()
            cleanup(api())
        # The same containers under --restart always, without healerd.
        running = _reference(api(), n)
        try:
            always_s.append(_restart_until_running(running, n))
        finally:
            cleanup(api())
    h_med, a_med = statistics.median(healerd_s), statistics.median(always_s)
    return {
        "containers": n,
        "healerd_s": healerd_s,
        "restart_always_s": always_s,
        "ratios": {"healerd_over_restart_always": h_med / a_med},
        "goals": {"engine restart: healerd <= 1.0 x restart policy always": h_med <= a_med},
    }
