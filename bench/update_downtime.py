"""Volume snapshots (issue 33): "the extra downtime an update with a snapshot costs
against one without", side by side in one run.

One healerd on the run's private dockerd, a real registry (Debian's docker-registry)
and two services of one replica each, alike but for the snapshot: each follows its own
tag (`auto_update: registry`, `auto_update_interval` 1 s, `update_config.order`
stop-first) and mounts a named volume of its own at /data, filled host-side (through
the mount point the engine reports) with UPDATE_MIB of data, as bench/snapshot.py does
(a big file of three quarters of it, UPDATE_FILES small files for the rest):

- `snapshot`: `x-healerd: {auto_update: registry, snapshot: [data]}`: held, stopped,
  its volume copied into healerd's state_dir, then the new digest (snapshot_keep 2:
  from the third update on, a prune of the oldest snapshot as well);
- `plain`: `x-healerd: {auto_update: registry}`: stopped, then the new digest.

Each round pushes a new digest under each tag in turn (the order alternates by round),
each on a quiet disk (synced, SETTLE), and takes the downtime from the engine's events:
from the `die` of the running container to the `start` of the container of the new
digest (engine time, no polling); the part before the new container's `create` is
given too (the stop's end, the copy, the old container's removal). Beside them each
round, on the same disk: `cp`, a plain `cp -a --reflink=auto` of the snapshot
service's volume to a new directory, and `cp+sync`, the same then its filesystem
synced (what a snapshot must do before it is listed). Reported: p50 (and min, max) of
each, the extra p50(snapshot) - p50(plain), the p50 of the per-round differences, and
the extra's ratios to `cp` and `cp+sync`.

`bash bench/run.sh updatedowntime`; UPDATE_ROUNDS (7), UPDATE_MIB (256), UPDATE_FILES
(1000).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from bench.lib import (
    BENCH_ROOT,
    IMAGE,
    BenchHealerd,
    EventClock,
    api,
    cleanup,
    fmt,
    image_id,
    label_of,
    pct,
    private_engine,
    summary,
)
from bench.snapshot import fill
from tests.support.cluster import Cluster
from tests.support.polling import wait_for
from tests.support.registry import Registry
from tests.support.variants import push_digest, variant

ROUNDS = int(os.environ.get("UPDATE_ROUNDS", "7"))
MIB = int(os.environ.get("UPDATE_MIB", "256"))
FILES = int(os.environ.get("UPDATE_FILES", "1000"))
INTERVAL = 1.0
SETTLE = 1.0
ARMS = {"snapshot": "bench-snap", "plain": "bench-plain"}  # arm -> service (and repo)


def _service_file(name: str, ref: str, snapshot: bool) -> str:
    ext = "{auto_update: registry, snapshot: [data]}" if snapshot else "{auto_update: registry}"
    return (
        f"services:\n  {name}:\n    image: {ref}\n    x-healerd: {ext}\n"
        "    volumes: [data:/data]\n    stop_grace_period: 2s\n"
        "    update_config: {order: stop-first}\n"
        "volumes:\n  data:\n"
    )


def _quiet() -> None:
    """What earlier steps wrote is on disk, and the disk had SETTLE to finish it."""
    subprocess.run(["sync"], check=True)
    time.sleep(SETTLE)


def _on(cluster: Cluster, service: str, digest: str) -> bool:
    cs = cluster.running(service)
    return len(cs) == 1 and str(cs[0]["Image"]).endswith(digest)


def _volume_of(client: docker.APIClient, cid: str) -> tuple[str, Path]:
    """The engine's name and host directory of the volume a container has at /data."""
    for m in client.inspect_container(cid)["Mounts"]:
        if m.get("Type") == "volume" and m.get("Destination") == "/data":
            return str(m["Name"]), Path(m["Source"])
    raise RuntimeError(f"container {cid[:12]} has no volume at /data")


def _is(action: str, cid: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e.get("Action") == action and e.get("id") == cid


def _of_new(action: str, service: str, digest: str) -> Callable[[dict[str, Any]], bool]:
    """The engine's `action` event of a container of `service` made from `digest`."""

    def match(e: dict[str, Any]) -> bool:
        image = str((e.get("Actor") or {}).get("Attributes", {}).get("image", ""))
        return (
            e.get("Action") == action
            and label_of(e, "io.healerd.service") == service
            and image.endswith(digest)
        )

    return match


class Bench:
    def __init__(self, client: docker.APIClient, registry: Registry, base: str) -> None:
        self.client = client
        self.cluster = Cluster(client)
        self.registry = registry
        self.base = base
        self.digest: dict[str, str] = {}

    def push(self, arm: str, version: str) -> str:
        repo = ARMS[arm]
        image = variant(self.client, self.base, f"{arm}-{version}")
        self.digest[arm] = push_digest(self.client, self.registry, image, repo, "stable")
        return self.digest[arm]

    def update(self, arm: str, version: str, events: EventClock) -> tuple[float, float]:
        """Push a new digest for `arm`'s service; the downtime of its update (s), and
        the part of it before the new container was created."""
        service = ARMS[arm]
        [old] = self.cluster.running(service)
        t0 = time.time()
        digest = self.push(arm, version)
        die = events.wait(_is("die", old["Id"]), after=t0, timeout=60)["timeNano"]
        create = events.wait(_of_new("create", service, digest), after=t0, timeout=120)
        start = events.wait(_of_new("start", service, digest), after=t0, timeout=120)
        wait_for(f"{service} on {version}", lambda: _on(self.cluster, service, digest), 60, 0.05)
        return (start["timeNano"] - die) / 1e9, (create["timeNano"] - die) / 1e9


def _cp(data: Path, target: Path, sync: bool) -> float:
    _quiet()
    target.mkdir()
    t0 = time.perf_counter()
    subprocess.run(["cp", "-a", "--reflink=auto", "--", f"{data}/.", str(target)], check=True)
    if sync:
        subprocess.run(["sync", "-f", str(target)], check=True)
    took = time.perf_counter() - t0
    shutil.rmtree(target)
    return took


def run() -> dict[str, Any]:
    client = api()
    base = image_id(client) and IMAGE
    cleanup(client)
    registry = Registry()
    registry.start()
    h = BenchHealerd("updatedowntime")
    h.conf.settings(f"log_level: warning\nauto_update_interval: {INTERVAL:g}s\n")
    work = BENCH_ROOT / f"updatedowntime-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    b = Bench(client, registry, base)
    volumes: list[str] = []
    try:
        for arm, service in ARMS.items():
            b.push(arm, "0")
            ref = registry.ref(service, "stable")
            h.conf.write(f"{service}.yaml", _service_file(service, ref, arm == "snapshot"))
        h.start()
        data: dict[str, Path] = {}
        for arm, service in ARMS.items():
            wait_for(f"{service} up", lambda s=service, a=arm: _on(b.cluster, s, b.digest[a]), 60)
            name, data[arm] = _volume_of(client, b.cluster.running(service)[0]["Id"])
            volumes.append(name)
        written = {arm: fill(path, MIB, FILES) for arm, path in data.items()}
        return _measure(b, data["snapshot"], work, written["snapshot"])
    finally:
        h.stop()
        registry.stop()
        cleanup(client)
        for name in volumes:  # healerd may have removed them with its project
            with contextlib.suppress(docker.errors.NotFound):
                client.remove_volume(name, force=True)
        shutil.rmtree(work, ignore_errors=True)


def _measure(b: Bench, data: Path, work: Path, written: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"snapshot": [], "plain": [], "cp": [], "cp+sync": []}
    before_create: dict[str, list[float]] = {"snapshot": [], "plain": []}
    with EventClock(b.client) as events:
        for i in range(1, ROUNDS + 1):
            order = list(ARMS) if i % 2 else list(reversed(ARMS))
            for arm in order:
                _quiet()
                down, part = b.update(arm, str(i), events)
                times[arm].append(down)
                before_create[arm].append(part)
            times["cp"].append(_cp(data, work / "reference", sync=False))
            times["cp+sync"].append(_cp(data, work / "reference", sync=True))
            print(
                f"updatedowntime, round {i}: "
                + ", ".join(f"{a} {fmt(v[-1])}" for a, v in times.items()),
                flush=True,
            )
    out = _result(times, written)
    out["die_to_create_p50_s"] = {a: round(pct(v, 0.5), 3) for a, v in before_create.items()}
    return out


def _spread(values: list[float]) -> dict[str, float]:
    return {**summary(values), "min": min(values), "max": max(values)}


def _result(times: dict[str, list[float]], written: int) -> dict[str, Any]:
    p50 = {a: pct(v, 0.5) for a, v in times.items()}
    extra = p50["snapshot"] - p50["plain"]
    paired = [s - p for s, p in zip(times["snapshot"], times["plain"], strict=True)]
    return {
        "volume": f"{written / (1 << 20):.0f} MiB written ({MIB * 3 // 4} MiB in one file, "
        f"{FILES} small files)",
        "rounds": ROUNDS,
        "interval_s": INTERVAL,
        "downtime_s": {a: _spread(times[a]) for a in ("snapshot", "plain")},
        "reference_s": {a: _spread(times[a]) for a in ("cp", "cp+sync")},
        "extra_p50_s": round(extra, 3),
        "extra_paired_p50_s": round(pct(paired, 0.5), 3),
        "extra_paired_s": [round(x, 3) for x in paired],
        "ratios_p50": {
            "extra / cp": round(extra / p50["cp"], 3),
            "extra / cp+sync": round(extra / p50["cp+sync"], 3),
        },
    }


def main() -> int:
    with private_engine():
        print(json.dumps(run(), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
