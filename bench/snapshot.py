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
  after take returns (off the update's downtime), outside the figure, and waited for
  before the next arm;
- `restore`: SnapshotStore.restore of the newest snapshot: the volume's entries moved
  aside, the copy back, synced (by choice: a rollback's service must not start on
  files a power cut could empty); what it replaced is deleted after it returns,
  outside the figure.

The store's copies (volumecopy.cp_a) are coreutils' cp -a too, one per group of the
volume's top-level entries of about equal bytes, side by side (up to the host's cores,
at most 4): here the big file in one, the small files in the other.

Every arm starts from the same state. A copy of 1 GiB and 4,000 files is kernel work,
not disk waits (nothing is written back during it), and two costs of that work depend
on what ran just before, which an earlier version of this bench let differ by arm:

- a filesystem without a journal (ext4 on many VM images) does not reuse an inode
  freed less than 60 s ago (6 minutes while its block is unwritten), and each file
  created scans past them: a copy right after 4,000 files were deleted near where it
  writes spends up to a second more;
- on a VM that hands freed memory back to its host (virtio-balloon free page
  reporting), a copy whose page cache lands on such memory spends several times longer
  writing it than one on memory freed a moment ago.

So nothing is deleted between the arms of a round: the references, the pruned
snapshots and what restores replaced (the store's background deletions, held by
_Held) are deleted together before the next round, then PAUSE (61 s) passes and two
unmeasured copies of the volume take up the freed memory that the host has not taken
back (without them the first arm of a round ran several times faster than the rest).
Before each arm the store's background sync is over, everything is synced, SETTLE
(1 s) passes and the guest's free page reporting has gone quiet. Every arm's page cache
thus lands on memory the host took back: slower on such a VM than on memory freed a
moment before, the same for each arm. The source is read once before the first round
(a warm cache for every arm).

Judged by the p50 of each arm against the p50 of `cp` (snapshot / cp and restore / cp,
each <= 1.1); the ratios to `cp+sync` are given beside them (a restore syncs, a plain
`cp -a` does not), and the p50 of the per-round ratios to `cp`.

`bash bench/run.sh snapshot`; SNAPSHOT_ROUNDS (5), SNAPSHOT_MIB (1024), SNAPSHOT_FILES
(4000), SNAPSHOT_PAUSE (61).
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
from healerd.daemon.volumecopy import WORKERS, Removals, remove_tree
from healerd.engine.docker import DockerEngine

ROUNDS = int(os.environ.get("SNAPSHOT_ROUNDS", "5"))
MIB = int(os.environ.get("SNAPSHOT_MIB", "1024"))
FILES = int(os.environ.get("SNAPSHOT_FILES", "4000"))
PAUSE = float(os.environ.get("SNAPSHOT_PAUSE", "61"))  # ext4 (no journal): 60 s
GOAL = 1.1
VOLUME = "healerd-bench-snapshot"
ARMS = ("cp", "cp+sync", "snapshot", "restore")
SETTLE = 1.0
# Free page reporting (virtio-balloon): the KiB handed back to the host, where the
# kernel counts them; else the reporting's delay (2 s upstream) is waited out.
REPORTING = Path("/sys/module/page_reporting/parameters")
REPORTED = REPORTING / "reported_kib"
REPORTING_DELAY = 3.0


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


class _Held(Removals):
    """The store's background deletions (pruned snapshots, what a restore replaced),
    held until the round's end: deleted there with the references, so that no arm
    creates its files where another arm's were deleted a moment before."""

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[Path, None] = {}

    def later(self, path: Path, *, leftover: bool = False) -> None:
        self.held[path] = None

    def release(self) -> None:
        for path in self.held:
            remove_tree(path)
        self.held.clear()


def _reporting_quiet(limit: float = 30.0) -> None:
    """Until the guest has handed back to its host the memory it freed (free page
    reporting: the next arm's page cache then lands on memory in the same state as
    every other arm's); nothing to wait for where the kernel does not report."""
    if not REPORTING.is_dir():
        return
    try:
        last = REPORTED.read_text()
    except OSError:
        time.sleep(REPORTING_DELAY)
        return
    end = time.monotonic() + limit
    while time.monotonic() < end:
        time.sleep(0.5)
        now = REPORTED.read_text()
        if now == last:
            return
        last = now


def _timed(step: Any, store: SnapshotStore) -> float:
    """The time of `step`, begun on a quiet disk: the store's background sync over,
    what earlier arms wrote synced, SETTLE seconds passed (a virtual disk goes on
    writing after a sync returns) and the free page reporting quiet."""
    if store.settling is not None:
        store.settling.join()
    subprocess.run(["sync"], check=True)
    time.sleep(SETTLE)
    _reporting_quiet()
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def copy_tree(source: Path, target: Path) -> None:
    """coreutils' `cp -a --reflink=auto` of `source`'s contents to a new `target`."""
    target.mkdir()
    args = ["cp", "-a", "--reflink=auto", "--", f"{source}/.", str(target)]
    subprocess.run(args, check=True)


def _new_round(store: SnapshotStore, held: _Held, work: Path, data: Path) -> None:
    """The last round's outputs deleted (all but the newest snapshot), PAUSE, and two
    unmeasured copies of the volume kept until the round's end: no arm creates its
    files among inodes freed less than 60 s before, and what those deletions freed
    without handing it back to the host is used before the first arm (each arm's page
    cache then lands on memory in the same state)."""
    if store.settling is not None:
        store.settling.join()
    for old in work.glob("copy-*"):
        shutil.rmtree(old)
    store.prune("bench", 1)
    held.release()
    subprocess.run(["sync"], check=True)
    time.sleep(PAUSE)
    for n in range(2):
        copy_tree(data, work / f"copy-scratch-{n}")


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
    held = _Held()
    store = SnapshotStore(work / "state" / "snapshots", removals=held)
    volumes = {VOLUME: str(data)}
    snaps = [store.take("bench", volumes, from_digest="sha256:a", to_digest="sha256:b")]

    def cp(sync: bool) -> None:
        reference = work / f"copy-{'sync' if sync else 'plain'}"
        copy_tree(data, reference)
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
        _new_round(store, held, work, data)
        for arm in ARMS[i % len(ARMS) :] + ARMS[: i % len(ARMS)]:
            times[arm].append(_timed(steps[arm], store))
        print(
            f"snapshot, round {i + 1}: " + ", ".join(f"{a} {fmt(v[-1])}" for a, v in times.items()),
            flush=True,
        )
    held.release()
    result = _result(times, written, store.list("bench")[0].size)
    result["cp_workers"] = WORKERS
    return result


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
