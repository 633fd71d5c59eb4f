"""Does a slow pull hold up the heals of other services? (issue 17, point 5)

One healerd, one service `bench-fast` (local image, one replica). Each round times the
heal of a `docker kill`ed bench-fast container twice, interleaved: alone, and while
another service (new in the round) pulls an image of 8 MiB of random bytes from a real
registry (Debian's docker-registry on 127.0.0.1) through a proxy throttled to 1 MiB/s
(tests/support/throttle.py), about 9 s a pull. The heal is timed from the kill to the
engine's `start` event of the replacement, as in bench/heal.py. A round counts only if
the pull was still under way when the replacement ran.

Run: `python -m bench.slow_pull` (on a private dockerd of its own; prints the figures and
leaves bench/results.json alone) or `python -m bench.run slowpull`.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from typing import Any

from bench.lib import (
    IMAGE,
    BenchHealerd,
    EventClock,
    api,
    cleanup,
    image_id,
    label_of,
    private_engine,
    summary,
)
from tests.support.big_image import MIB, build_big
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.polling import wait_for
from tests.support.registry import Registry
from tests.support.throttle import ThrottleProxy

SERVICE = "bench-fast"
RATE = MIB  # bytes per second
BIG_MIB = 8


def _service(name: str, image: str) -> str:
    return (
        f"services:\n  {name}:\n    image: {image}\n    command: {json.dumps(COMMAND)}\n"
        "    stop_grace_period: 2s\n"
    )


def _heal(events: EventClock, cluster: Cluster, client: Any) -> float:
    wait_for("converged", lambda: cluster.converged(SERVICE, 1), 30)
    (victim,) = cluster.running(SERVICE)
    t0 = time.time()
    client.kill(victim["Id"])
    ev = events.wait(
        lambda e: (
            e.get("Action") == "start"
            and label_of(e, "io.healerd.service") == SERVICE
            and e["id"] != victim["Id"]
        ),
        after=t0,
    )
    return float(ev["timeNano"] / 1e9 - t0)


def run(rounds: int = 5) -> dict[str, Any]:
    client = api()
    image_id(client)
    cleanup(client)
    cluster = Cluster(client)
    registry = Registry()
    registry.start()
    proxy = ThrottleProxy(registry.port)
    proxy.start()
    h = BenchHealerd("slowpull")
    h.service(SERVICE, 1)
    h.start()
    alone: list[float] = []
    during: list[float] = []
    pulls: list[float] = []
    skipped = 0
    try:
        with EventClock(client) as events:
            wait_for("bench-fast running", lambda: cluster.running(SERVICE), 60)
            for i in range(rounds):
                alone.append(_heal(events, cluster, client))
                tag = f"r{i}-{secrets.token_hex(3)}"
                local = build_big(client, f"healerd-bench/big:{tag}", BIG_MIB)
                registry.push(client, local, "big", tag)
                client.remove_image(local)
                proxy.throttle(RATE)
                slow = f"bench-slow-{i}"
                mark = proxy.bytes_down
                h.conf.write(f"{slow}.yaml", _service(slow, proxy.ref("big", tag)))
                t_pull = time.monotonic()
                wait_for("the pull under way", lambda m=mark: proxy.bytes_down > m + MIB, 60)
                heal = _heal(events, cluster, client)
                under_way = not cluster.containers(slow)
                wait_for(f"{slow} running", lambda s=slow: cluster.converged(s, 1), 120)
                pulls.append(time.monotonic() - t_pull)
                if under_way:
                    during.append(heal)
                else:
                    skipped += 1
                proxy.throttle(None)
                (h.conf.conf_d / f"{slow}.yaml").unlink()
                wait_for(f"{slow} removed", lambda s=slow: not cluster.containers(s), 60)
    finally:
        h.stop()
        proxy.stop()
        registry.stop()
        cleanup(client)
    out: dict[str, Any] = {
        "heal_alone": summary(alone),
        "heal_during_slow_pull": summary(during),
        "slow_pull_seconds": summary(pulls),
        "rounds_skipped_pull_already_done": skipped,
        "image": f"{IMAGE} + {BIG_MIB} MiB random, pulled at {RATE / MIB:g} MiB/s",
    }
    ratio = out["heal_during_slow_pull"]["p50"] / out["heal_alone"]["p50"]
    out["ratios"] = {"heal_during_pull_p50_over_alone_p50": ratio}
    out["goals"] = {"heal p50 during a slow pull <= 1.3 x heal p50 alone": ratio <= 1.3}
    return out


def main() -> int:
    with private_engine():
        print(json.dumps(run(), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
