"""After an engine restart (a reboot of the edge host), how fast is everything back?

On one private dockerd stopped with SIGTERM and started again, timed from the engine's
spawn until all N containers run, interleaved, `rounds` times each:

- reboot: the order systemd keeps at a reboot: healerd stopped first (it hands its
  running containers to the engine's `unless-stopped` policy, core/handoff.py), then the
  engine; the engine started, then healerd (which takes the policy back);
- healerd kept running while only the engine restarts (its containers carry restart
  policy `no`; healerd starts what the restart stopped, in place, once the API answers);
- the same containers under Docker's own `--restart always`.

"The same containers": the reference's sit on a user-defined bridge with an alias, as
healerd's sit on their project's network (on the default bridge a start costs the engine
less). A third figure is the API's own bound: a script that starts the same stopped
containers through the API the moment the engine answers, `parallel_actions` at a time.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker

from bench.lib import BENCH_LABEL, IMAGE, BenchHealerd, api, cleanup, engine, image_id, pct
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

SERVICE = "bench-restart"
REF_NET = "bench-restart-ref_default"
PARALLEL = 8  # healerd's parallel_actions with the default 4 workers


def _restart_and_start(running: Any, n: int) -> float:
    """The API's bound: stop the engine, start it, and start the n stopped containers
    through the API, PARALLEL at a time, the moment it answers."""
    d = engine()
    d.stop()
    t0 = time.monotonic()
    d.start()
    client = api()
    try:
        ids = [c["Id"] for c in client.containers(all=True, filters={"label": BENCH_LABEL})]
        with ThreadPoolExecutor(PARALLEL) as pool:
            list(pool.map(client.start, ids))
    finally:
        client.close()
    wait_for(f"{n} running again", lambda: running() >= n, 300, 0.02, ignore=(Exception,))
    return time.monotonic() - t0


def _restart_until_running(count: Any, n: int) -> float:
    """Stop the engine (SIGTERM), start it; seconds from the spawn until `n` run."""
    d = engine()
    d.stop()
    t0 = time.monotonic()
    d.start()
    wait_for(f"{n} running again", lambda: count() >= n, 300, 0.02, ignore=(Exception,))
    return time.monotonic() - t0


def _policies() -> set[str]:
    """The engine restart policies of the service's running containers."""
    c = api()
    try:
        ids = [x["Id"] for x in Cluster(c).running(SERVICE)]
        return {c.inspect_container(i)["HostConfig"]["RestartPolicy"]["Name"] for i in ids}
    finally:
        c.close()


def _reboot(n: int) -> float:
    """The reboot's order: healerd stopped (the hand-off), the engine stopped with SIGTERM
    and started, healerd started once the engine answers (as systemd starts it after
    docker.service); seconds from the engine's spawn until `n` run."""
    h = BenchHealerd("reboot", handoff=True)
    try:
        h.service(SERVICE, n)
        h.start()
        wait_for("converged", lambda: Cluster(api()).converged(SERVICE, n), 300, 0.1)
        time.sleep(1)
        Healerd.stop(h)  # keeps its config dir: it starts again below
        if _policies() != {"unless-stopped"}:
            raise AssertionError(f"no hand-off at healerd's stop: {_policies()}")
        d = engine()
        d.stop()
        t0 = time.monotonic()
        d.start()
        h.start()
        wait_for(
            f"{n} running again",
            lambda: len(Cluster(api()).running(SERVICE)) >= n,
            300,
            0.02,
            ignore=(Exception,),
        )
        took = time.monotonic() - t0

        wait_for("healerd took its containers back", lambda: _policies() == {"no"}, 60, 0.5)
        return took
    finally:
        h.stop()
        cleanup(api())


def _reference(client: docker.APIClient, n: int, policy: str = "always") -> Any:
    """n containers under Docker's restart policy `policy`, on a user-defined bridge with
    an alias as healerd's are; returns their counter."""
    if not client.networks(names=[REF_NET]):
        client.create_network(REF_NET, driver="bridge", labels={BENCH_LABEL: "restart"})
    for i in range(n):
        cid = client.create_container(
            IMAGE,
            COMMAND,
            name=f"bench-{policy}-{i}",
            labels={BENCH_LABEL: "restart"},
            host_config=client.create_host_config(
                restart_policy={"Name": policy}, network_mode=REF_NET
            ),
            networking_config=client.create_networking_config(
                {REF_NET: client.create_endpoint_config(aliases=["bench-ref"])}
            ),
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


def run(n: int = 50, rounds: int = 5) -> dict[str, Any]:
    client = api()
    image_id(client)
    cleanup(client)
    healerd_s: list[float] = []
    always_s: list[float] = []
    script_s: list[float] = []
    reboot_s: list[float] = []
    for _ in range(rounds):
        reboot_s.append(_reboot(n))
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
            _clean(api())
        # The same containers under restart policy no, started by a script.
        running = _reference(api(), n, policy="no")
        try:
            script_s.append(_restart_and_start(running, n))
        finally:
            _clean(api())
        print(
            f"engine restart: reboot order {reboot_s[-1]:.2f} s, "
            f"healerd {healerd_s[-1]:.2f} s, --restart always "
            f"{always_s[-1]:.2f} s, script through the API {script_s[-1]:.2f} s",
            flush=True,
        )
    h_med, a_med = statistics.median(healerd_s), statistics.median(always_s)
    s_med = statistics.median(script_s)
    r_med = statistics.median(reboot_s)
    ratios = [h / a for h, a in zip(healerd_s, always_s, strict=True)]
    reboot_ratios = [r / a for r, a in zip(reboot_s, always_s, strict=True)]
    return {
        "containers": n,
        "rounds": rounds,
        "healerd_median_s": h_med,
        "restart_always_median_s": a_med,
        "api_script_median_s": s_med,
        "reboot_median_s": r_med,
        "reboot_round_ratios": {
            "p25": pct(reboot_ratios, 0.25),
            "p50": pct(reboot_ratios, 0.5),
            "p75": pct(reboot_ratios, 0.75),
        },
        # Each round's healerd time over the --restart always time next to it.
        "round_ratios": {
            "p25": pct(ratios, 0.25),
            "p50": pct(ratios, 0.5),
            "p75": pct(ratios, 0.75),
        },
        "healerd_s": healerd_s,
        "restart_always_s": always_s,
        "api_script_s": script_s,
        "reboot_s": reboot_s,
        "ratios": {
            "reboot_over_restart_always": r_med / a_med,
            "healerd_over_restart_always": h_med / a_med,
            "healerd_over_api_script": h_med / s_med,
            "api_script_over_restart_always": s_med / a_med,
        },
        "goals": {
            "reboot: healerd <= 1.0 x restart policy always": r_med <= a_med,
            "engine alone restarted: healerd <= 1.0 x restart policy always": h_med <= a_med,
        },
    }


def _clean(client: docker.APIClient) -> None:
    cleanup(client)
    for net in client.networks(names=[REF_NET]):
        with contextlib.suppress(docker.errors.APIError):
            client.remove_network(net["Id"])
