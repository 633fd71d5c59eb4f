"""Volume snapshots (issue 33): "snapshot and restore of a 1 GiB volume against a plain
`cp -a` of it (<= 1.1 x)".

One named volume on the private engine, filled host-side through the mount point the
engine reports (DockerEngine.volume_path) with SNAPSHOT_MIB of data: a big file of
three quarters of it and SNAPSHOT_FILES small files (the rest, in 100 directories).
Four arms per round, side by side, in an order rotated by one each round, on the same
data and the same filesystem (the store's root and the reference's target are both
under /var/lib/healerd-bench, as state_dir and the engine's data root share one disk on
most hosts):

- `cp`: coreutils' `cp -a --reflink=auto` of the volume's data to a new directory,
  nothing else (the reference the goal names);
- `cp+sync`: the same, then its filesystem synced (`sync -f`): a copy that is on disk;
- `snapshot`: SnapshotStore.take: the du-like walk, the free-space check, the copy and
  the manifest written (marked with the boot id); the filesystem is synced in a thread
  after take returns (off the update's downtime; a snapshot not synced when the host
  went down is never used), outside the figure, as every arm's writes are before the
  next arm;
- `restore`: SnapshotStore.restore of the newest snapshot: the volume's entries moved
  aside, the copy back; the old entries are deleted in a thread after it returns (the
  service runs again by then), outside the figure, and waited for before the next arm.

Each arm starts on a quiet disk: the background deletions of the store are over,
everything written before is synced and SETTLE (1 s) passes; the source is read once
before the first round (a warm cache for every arm).
Judged by the p50 of each arm against the p50 of `cp` (snapshot / cp and restore / cp,
each <= 1.1); the ratios to `cp+sync` are given beside them, and the p50 of the
per-round ratios to `cp`.

`bash bench/run.sh snapshot`; SNAPSHOT_ROUNDS (5), SNAPSHOT_MIB (1024), SNAPSHOT_FILES
(4000).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.lib import BENCH_ROOT, api, docker_host, fmt, pct, summary
from healerd.daemon.snapshots import SnapshotStore
from healerd.daemon.volumecopy import REMOVALS
from healerd.engine.docker import DockerEngine

ROUNDS = int(os.environ.get("SNAPSHOT_ROUNDS", "5"))
MIB = int(os.environ.get("SNAPSHOT_MIB", "1024"))
FILES = int(os.environ.get("SNAPSHOT_FILES", "4000"))
GOAL = 1.1
VOLUME = "healerd-bench-snapshot"
ARMS = ("cp", "cp+sync", "snapshot", "restore")
SETTLE = 1.0


def fill(data: Path, mib: int = MIB, files: int = FILES) -> int:
    """A big file of 3/4 of `mib` and `files` small files for the rest; the bytes
    written."""
    big = mib * 3 // 4
    chunk = os.urandom(1 << 20)
    with open(data / "big.bin", "wb") as f:
        for _ in range(big):
            f.write(chunk)
    small = max(((mib - big) << 20) // max(files, 1), 1)
    for i in range(files):
        d = data / f"dir{i % 100:02d}"
        d.mkdir(exist_ok=True)
        (d / f"file{i:05d}").write_bytes(chunk[i % 1024 : i % 1024 + small])
    os.chown(data / "dir00", 999, 999)
    subprocess.run(["sync"], check=True)
    return (big << 20) + small * files


def _timed(step: Any) -> float:
    """The time of `step`, begun on a quiet disk: what earlier arms wrote is synced and
    SETTLE seconds pass first (a virtual disk goes on writing after a sync returns)."""
    REMOVALS.wait()
    subprocess.run(["sync"], check=True)
    time.sleep(SETTLE)
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def run() -> dict[str, Any]:
    client = api()
    work = BENCH_ROOT / f"snapshot-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    client.create_volume(VOLUME)
    try:
        return _measure(DockerEngine(docker_host()), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        client.remove_volume(VOLUME, force=True)


def _measure(engine: DockerEngine, work: Path) -> dict[str, Any]:
    data = Path(engine.volume_path(VOLUME))
    written = fill(data)
    subprocess.run(["cat", str(data / "big.bin")], stdout=subprocess.DEVNULL, check=True)
    store = SnapshotStore(work / "state" / "snapshots")
    volumes = {VOLUME: str(data)}
    snaps = [store.take("bench", volumes, from_digest="sha256:a", to_digest="sha256:b")]
    reference = work / "reference"

    def cp(sync: bool) -> None:
        reference.mkdir()
        args = ["cp", "-a", "--reflink=auto", "--", f"{data}/.", str(reference)]
        subprocess.run(args, check=True)
        if sync:
            subprocess.run(["sync", "-f", str(reference)], check=True)

    steps = {
        "cp": lambda: cp(False),
        "cp+sync": lambda: cp(True),
        "snapshot": lambda: snaps.append(
            store.take("bench", volumes, from_digest="sha256:a", to_digest="sha256:b")
        ),
        "restore": lambda: store.restore(snaps[-1], volumes),
    }
    times: dict[str, list[float]] = {a: [] for a in ARMS}
    for i in range(ROUNDS):
        for arm in ARMS[i % len(ARMS) :] + ARMS[: i % len(ARMS)]:
            times[arm].append(_timed(steps[arm]))
            shutil.rmtree(reference, ignore_errors=True)
            store.prune("bench", 2)
        print(
            f"snapshot, round {i + 1}: " + ", ".join(f"{a} {fmt(v[-1])}" for a, v in times.items()),
            flush=True,
        )
    return _result(times, written, store.list("bench")[0].size)


def _result(times: dict[str, list[float]], written: int, size: int) -> dict[str, Any]:
    p50 = {a: summary(v)["p50"] for a, v in times.items()}
    ratios = {
        f"{a} / {ref}": p50[a] / p50[ref]
        for a in ("snapshot", "restore")
        for ref in ("cp", "cp+sync")
    }
    paired = {
        f"{a} / cp": round(pct([x / c for x, c in zip(times[a], times["cp"], strict=True)], 0.5), 3)
        for a in ("snapshot", "restore")
    }
    return {
        "volume": f"{written / (1 << 30):.2f} GiB written ({MIB * 3 // 4} MiB in one file, "
        f"{FILES} small files), {size / (1 << 30):.2f} GiB on disk",
        "rounds": ROUNDS,
        "seconds": {a: summary(v) for a, v in times.items()},
        "ratios_p50": {k: round(r, 3) for k, r in ratios.items()},
        "ratios_paired_p50": paired,  # the p50 of each round's ratio (slow drifts cancel)
        "goals": {
            f"{a} p50 <= {GOAL} x cp -a (got {ratios[f'{a} / cp']:.2f} x)": ratios[f"{a} / cp"]
            <= GOAL
            for a in ("snapshot", "restore")
        },
    }
