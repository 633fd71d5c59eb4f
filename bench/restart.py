"""After an engine restart (a reboot of the edge host), how fast is everything back?

On one private dockerd stopped with SIGTERM and started again, timed from the engine's
spawn until all N containers run, interleaved (each round's order rotated by one),
`rounds` times each; also when the engine first answered (dockerd serves its API only
once it has started what its restart policies restore):

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
import os
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
    ANSWERED.setdefault("script", []).append(time.monotonic() - t0)
    client = api()
    try:
        ids = [c["Id"] for c in client.containers(all=True, filters={"label": BENCH_LABEL})]
        with ThreadPoolExecutor(PARALLEL) as pool:
            list(pool.map(client.start, ids))
    finally:
        client.close()
    wait_for(f"{n} running again", lambda: running() >= n, 300, 0.02, ignore=(Exception,))
    return time.monotonic() - t0


ANSWERED: dict[str, list[float]] = {}  # per arm: seconds from the spawn to the first ping


def _restart_until_running(count: Any, n: int, arm: str) -> float:
    """Stop the engine (SIGTERM), start it; seconds from the spawn until `n` run."""
    d = engine()
    d.stop()
    t0 = time.monotonic()
    d.start()
    ANSWERED.setdefault(arm, []).append(time.monotonic() - t0)
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
        ANSWERED.setdefault("reboot", []).append(time.monotonic() - t0)
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


def _kept_running(n: int) -> float:
    """healerd on its own on the engine, running through the engine's restart."""
    h = BenchHealerd("restart")
    try:
        h.service(SERVICE, n)
        h.start()
        wait_for("converged", lambda: Cluster(api()).converged(SERVICE, n), 300, 0.1)
        time.sleep(1)
        return _restart_until_running(lambda: len(Cluster(api()).running(SERVICE)), n, "healerd")
    finally:
        h.stop()
        cleanup(api())


def _always(n: int) -> float:
    """The same containers under --restart always, without healerd."""
    running = _reference(api(), n)
    try:
        return _restart_until_running(running, n, "always")
    finally:
        _clean(api())


def _script(n: int) -> float:
    """The same containers under restart policy no, started by a script."""
    running = _reference(api(), n, policy="no")
    try:
        return _restart_and_start(running, n)
    finally:
        _clean(api())


ARMS = {"reboot": _reboot, "healerd": _kept_running, "always": _always, "script": _script}


def run(n: int = 50, rounds: int | None = None) -> dict[str, Any]:
    """RESTART_ARMS (default all four, comma-separated) and RESTART_ROUNDS (default 5)
    choose what runs; each round runs its arms in an order rotated by one from the last
    round's, so that no arm always follows the same cleanup."""
    arms = [a for a in os.environ.get("RESTART_ARMS", ",".join(ARMS)).split(",") if a]
    if "always" not in arms or any(a not in ARMS for a in arms):
        raise SystemExit(f"RESTART_ARMS: some of {', '.join(ARMS)}, always among them")
    rounds = rounds or int(os.environ.get("RESTART_ROUNDS", "5"))
    client = api()
    image_id(client)
    cleanup(client)
    times: dict[str, list[float]] = {a: [] for a in arms}
    for i in range(rounds):
        for arm in arms[i % len(arms) :] + arms[: i % len(arms)]:
            times[arm].append(ARMS[arm](n))
        print(
            f"engine restart, round {i + 1}: "
            + ", ".join(f"{a} {times[a][-1]:.2f} s" for a in arms)
            + "; the engine answered after "
            + ", ".join(f"{a} {v[-1]:.2f} s" for a, v in ANSWERED.items()),
            flush=True,
        )
    always_s = times["always"]
    a_med = statistics.median(always_s)
    out: dict[str, Any] = {"containers": n, "rounds": rounds, "arms": arms}
    out["restart_always_median_s"] = a_med
    out["restart_always_s"] = always_s
    names = {"reboot": "reboot", "healerd": "healerd", "script": "api_script"}
    ratios: dict[str, float] = {}
    goals: dict[str, bool] = {}
    for arm in (a for a in arms if a != "always"):
        name, got = names[arm], times[arm]
        med = statistics.median(got)
        per_round = [x / a for x, a in zip(got, always_s, strict=True)]
        out[f"{name}_s"] = got
        out[f"{name}_median_s"] = med
        # Each round's time over the --restart always time of the same round.
        out[f"{name}_round_ratios"] = {
            "p25": pct(per_round, 0.25),
            "p50": pct(per_round, 0.5),
            "p75": pct(per_round, 0.75),
        }
        ratios[f"{name}_over_restart_always"] = med / a_med
        # How long after the engine's first answer all n ran (the restore done by then?).
        out[f"{name}_after_answer_s"] = [
            x - y for x, y in zip(got, ANSWERED.get(arm, []), strict=False)
        ]
    out["always_after_answer_s"] = [
        x - y for x, y in zip(always_s, ANSWERED.get("always", []), strict=False)
    ]
    # Judged by the paired ratio (each round's arm over the `always` of the same round,
    # p50): the engine's own time moves from one restart to the next by more than the
    # gap between arms, and the pairs take that drift out.
    if "reboot" in arms:
        goals["reboot: healerd <= 1.0 x restart policy always (rounds' p50)"] = (
            out["reboot_round_ratios"]["p50"] <= 1.0
        )
    if "healerd" in arms:
        goals["engine alone restarted: healerd <= 1.0 x restart policy always (rounds' p50)"] = (
            out["healerd_round_ratios"]["p50"] <= 1.0
        )
    # Seconds from the engine's spawn to its first answer, per arm and round.
    out["answered_s"] = {a: ANSWERED.get(a, []) for a in arms}
    out["ratios"] = ratios
    out["goals"] = goals
    return out


def _clean(client: docker.APIClient) -> None:
    cleanup(client)
    for net in client.networks(names=[REF_NET]):
        with contextlib.suppress(docker.errors.APIError):
            client.remove_network(net["Id"])
