"""Speed per engine, side by side (issue 31): on each engine of tests/support/engines.py
(Debian 12's docker.io 20.10, Debian 13's 26.1 in a chroot, Podman 4.3), one run each,
healerd's heal after `docker kill` next to that engine's own start of the same kind of
container (bench/heal.py's perfect script: `docker start` on the `die` event), rounds
interleaved, p50 of n. What is compared across engines is the ratio, so that each is
judged against its own engine's speed: the ratios should lie within 10 % of each other.
On Podman a killed container should run again in under 1 s (p50 of 10).

Each kill waits a random 0 to 250 ms first (ENGINE_JITTER, seeded by ENGINE_SEED): Podman
4.3 hands its events to each stream at that stream's own poll of its event file, every
250 ms, and a kill made just after the bench's own stream brought the last start is in
step with that poll. Without the jitter, one arm's stream was always a fixed part of a
poll behind the other's: the same code measured 1.12 x in one run and 1.81 x in the
next. With it, each arm waits for its event by a delay drawn alike for both.

`bash bench/run.sh engines` (all three) or `ENGINES=podman bash bench/run.sh engines`.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from bench.heal import Arms, Script, _references
from bench.lib import BenchHealerd, EventClock, api, cleanup, image_id, private_engine, summary
from tests.support import engines
from tests.support.cluster import Cluster
from tests.support.polling import wait_for

ROUNDS = int(os.environ.get("ENGINE_ROUNDS", "20"))
KINDS = tuple(os.environ.get("ENGINES", " ".join(engines.KINDS)).split())
JITTER = float(os.environ.get("ENGINE_JITTER", "0.25"))
SEED = int(os.environ.get("ENGINE_SEED", "31"))


def one_engine(kind: str, rounds: int) -> dict[str, Any]:
    """healerd and the script, `rounds` kills each, interleaved, on one engine."""
    with private_engine(kind=kind):
        client = api()
        version = client.version()
        img = image_id(client)
        cleanup(client)
        h = BenchHealerd(f"engines-{kind}")
        h.service("bench-heal", 1)
        samples: dict[str, list[float]] = {"healerd_kill": [], "script_kill": []}
        rng = random.Random(SEED)
        try:
            with _references(client), EventClock(client) as events:
                h.start()
                cluster = Cluster(client)
                wait_for("bench-heal", lambda: cluster.converged("bench-heal", 1), 120)
                arms = Arms(client, events, img)
                with Script(client, "script") as script:
                    script.armed.add(arms.script_box)
                    for i in range(rounds):
                        order = [("healerd_kill", arms.healerd_kill)]
                        order.append(("script_kill", lambda: arms.script_kill(script)))
                        for name, fn in order[i % 2 :] + order[: i % 2]:
                            wait_for(
                                "converged", lambda: cluster.converged("bench-heal", 1), 60, 0.02
                            )
                            time.sleep(rng.uniform(0.0, JITTER))  # a random poll phase
                            samples[name].append(fn())
        finally:
            h.stop()
            cleanup(client)
    out: dict[str, Any] = {k: summary(v) for k, v in samples.items()}
    out["engine"] = f"{version.get('Version', '?')} (API {version.get('ApiVersion', '?')})"
    out["jitter_s"], out["seed"] = JITTER, SEED
    out["ratio"] = out["healerd_kill"]["p50"] / out["script_kill"]["p50"]
    out["samples"] = samples
    return out


def run(kinds: tuple[str, ...] = KINDS, rounds: int = ROUNDS) -> dict[str, Any]:
    out: dict[str, Any] = {kind: one_engine(kind, rounds) for kind in kinds}
    ratios = [out[k]["ratio"] for k in kinds]
    spread = max(ratios) / min(ratios)
    out["ratio_spread"] = spread
    goals = {"heal/own start ratios within 10 % across engines": spread <= 1.10}
    if "podman" in out:
        goals["podman: killed container runs again in < 1 s (p50)"] = (
            out["podman"]["healerd_kill"]["p50"] < 1.0
        )
    out["goals"] = goals
    return out
