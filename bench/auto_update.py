"""Image updates (issue 17, point 3): how long from the push of a new digest under a
followed tag until every replica runs it, against `auto_update_interval`; and what one
check costs (engine calls, registry requests).

One healerd on the run's private dockerd, one service of 3 replicas following
`127.0.0.1:PORT/app:stable` (Debian's docker-registry) with `auto_update_interval` 5 s,
start-first, parallelism 1, min_ready_seconds 5 s (the defaults). Each round pushes a
new digest (a distinct image) and times, from the end of the push: the first create of
a container of the new digest (engine events), and the moment all 3 replicas run it
(the list, every 50 ms). The check's cost is counted over an idle window of several
intervals: healerd's engine calls (its metrics; the 30 s resync's list calls included)
and the registry's access log per request kind.

Run: `python -m bench.run autoupdate` (or `python -m bench.auto_update`).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
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
from healerd.cli.client import Client
from tests.support.cluster import Cluster
from tests.support.polling import wait_for
from tests.support.registry import Registry
from tests.support.variants import push_digest, variant

SERVICE = "bench-follow"
REPLICAS = 3
INTERVAL = 5.0
MIN_READY = 5.0  # update_config.min_ready_seconds' default: a rollout waits this per batch
IDLE_INTERVALS = 6
_REQUEST = re.compile(r'"(GET|HEAD|PUT|POST|PATCH) (/v2/[^ ]*) HTTP/[0-9.]+" \d+ (\d+)')


def _kind(method: str, path: str) -> str:
    if path == "/v2/":
        return "ping"
    part = path.split("/")[-2] if path.count("/") >= 3 else path
    by = "digest" if "sha256:" in path.rsplit("/", 1)[-1] else "tag"
    return f"{method} {part} by {by}" if part == "manifests" else f"{method} {part}"


def _requests(registry: Registry, since: int) -> tuple[Counter[str], int]:
    """Requests by kind since log line `since`, and the bytes of the blobs sent."""
    found = [m for line in registry.log().splitlines()[since:] if (m := _REQUEST.search(line))]
    blob_bytes = sum(int(m[3]) for m in found if m[1] == "GET" and "/blobs/" in m[2])
    return Counter(_kind(m[1], m[2]) for m in found), blob_bytes


def _engine_calls(h: BenchHealerd) -> float:
    text = Client(str(h.socket)).request("GET", "/metrics", raw=True).decode()
    m = re.search(r"^healerd_engine_calls_total ([0-9.e+]+)$", text, re.M)
    return float(m[1]) if m else float("nan")


def _created_from(digest: str) -> Callable[[dict[str, Any]], bool]:
    """Matches the engine's create event of a container of the service made from `digest`."""

    def match(e: dict[str, Any]) -> bool:
        image = str((e.get("Actor") or {}).get("Attributes", {}).get("image", ""))
        return (
            e.get("Action") == "create"
            and label_of(e, "io.healerd.service") == SERVICE
            and image.endswith(digest)
        )

    return match


def _on(cluster: Cluster, digest: str) -> bool:
    cs = cluster.running(SERVICE)
    return len(cs) == REPLICAS and all(c["Image"].endswith(digest) for c in cs)


def run(rounds: int = 5) -> dict[str, Any]:
    client = api()
    base = image_id(client) and IMAGE
    cleanup(client)
    cluster = Cluster(client)
    registry = Registry()
    registry.start()
    h = BenchHealerd("autoupdate")
    h.conf.settings(f"log_level: warning\nauto_update_interval: {INTERVAL:g}s\n")
    first = push_digest(client, registry, variant(client, base, "b0"), "app", "stable")
    h.conf.write(
        f"{SERVICE}.yaml",
        f"services:\n  {SERVICE}:\n    image: {registry.ref('app', 'stable')}\n"
        "    x-healerd: {auto_update: registry}\n    stop_grace_period: 2s\n"
        f"    replicas: {REPLICAS}\n    update_config: {{order: start-first}}\n",
    )
    h.start()
    detect: list[float] = []
    complete: list[float] = []
    try:
        wait_for("following b0", lambda: _on(cluster, first), 60)
        # The cost of a check: an idle window of several intervals, nothing moves.
        mark, calls0, t0 = len(registry.log().splitlines()), _engine_calls(h), time.monotonic()
        time.sleep(IDLE_INTERVALS * INTERVAL)
        window = time.monotonic() - t0
        idle, blob_bytes = _requests(registry, mark)
        calls = _engine_calls(h) - calls0
        checks = idle.get("HEAD manifests by tag", 0)
        with EventClock(client) as events:
            for i in range(1, rounds + 1):
                digest = push_digest(
                    client, registry, variant(client, base, f"b{i}"), "app", "stable"
                )
                t_push = time.time()
                ev = events.wait(_created_from(digest), after=t_push, timeout=INTERVAL * 4 + 30)
                detect.append(ev["timeNano"] / 1e9 - t_push)
                wait_for(f"all on b{i}", lambda d=digest: _on(cluster, d), INTERVAL * 4 + 60, 0.05)
                complete.append(time.time() - t_push)
    finally:
        h.stop()
        registry.stop()
        cleanup(client)
    out: dict[str, Any] = {
        "interval_s": INTERVAL,
        "replicas": REPLICAS,
        "push_to_first_new_container_s": summary(detect),
        "push_to_all_replicas_s": summary(complete),
        "idle_window_s": round(window, 1),
        "checks_in_window": checks,
        "registry_requests_in_window": dict(idle),
        "registry_blob_bytes_in_window": blob_bytes,
        "healerd_engine_calls_in_window": calls,
    }
    per = {k: n / checks for k, n in idle.items()} if checks else {}
    out["per_check"] = {
        "registry": per,
        "engine_calls_incl_resync": calls / checks if checks else None,
    }
    worst_detect = max(detect) if detect else float("inf")
    rollout = [c - d for c, d in zip(complete, detect, strict=True)]
    bound = REPLICAS * MIN_READY
    out["rollout_after_detection_s"] = summary(rollout)
    out["ratios"] = {
        "push_to_first_new_max_over_interval": worst_detect / INTERVAL,
        "rollout_max_over_replicas_x_min_ready": max(rollout, default=float("inf")) / bound,
    }
    out["goals"] = {
        "a new digest is acted on within one interval (+ 1 s for its pull)": (
            worst_detect <= INTERVAL + 1
        ),
        "its rollout takes <= 1.2 x replicas x min_ready_seconds (one at a time)": (
            max(rollout, default=float("inf")) <= 1.2 * bound
        ),
        "one manifest HEAD of the tag per check": per.get("HEAD manifests by tag") == 1.0,
        "no layer fetched by a check (blob bytes per check < 4 KiB)": (
            checks > 0 and blob_bytes / checks < 4096
        ),
    }
    return out


def main() -> int:
    with private_engine():
        print(json.dumps(run(), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
