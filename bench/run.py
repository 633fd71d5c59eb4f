"""Run the benchmarks (from the repo): `python -m bench.run [all|heal|fleet|scale|reload|
restart|slowpull|autoupdate|notify|snapshot|updatedowntime|rmfloor|engines]`.

Writes bench/results.json (the suites run replace theirs; the others' stay, each with
the date and commit it ran on) and prints the figures with their ratios and goals.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import (
    auto_update,
    engines,
    fleet,
    heal,
    notify,
    restart,
    rm_floor,
    slow_pull,
    snapshot,
    update_downtime,
)
from bench.lib import api, cleanup, private_engine

SUITES: dict[str, Callable[[], dict[str, Any]]] = {
    "heal": heal.run,
    "fleet": fleet.storm_and_cold,
    "scale": fleet.scale_and_idle,
    "reload": fleet.reload_latency,
    "restart": restart.run,
    "slowpull": slow_pull.run,
    "autoupdate": auto_update.run,
    "notify": notify.run,
    "snapshot": snapshot.run,
    "updatedowntime": update_downtime.run,
    "rmfloor": rm_floor.run,
}
# Suites that start their engines themselves (one per engine kind): not part of "all".
OWN_ENGINES: dict[str, Callable[[], dict[str, Any]]] = {"engines": engines.run}


def main(argv: list[str]) -> int:
    names = argv[1:] or ["all"]
    if names == ["all"]:
        names = list(SUITES)
    if all(n in OWN_ENGINES for n in names):
        return _run(names)
    with private_engine():
        return _run(names)


def _run(names: list[str]) -> int:
    suites = {**SUITES, **OWN_ENGINES}
    own = all(n in OWN_ENGINES for n in names)
    client = None if own else api()
    engine = "each its own" if client is None else client.version()["Version"]
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()} {platform.machine()}, {_cores()} cores, engine {engine}",
    }
    path = Path(__file__).with_name("results.json")
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = {}
    try:
        for name in names:
            print(f"== {name}", flush=True)
            results[name] = {**suites[name](), "ran": f"{results['date']}, {_commit()}"}
            print(json.dumps(results[name], indent=2, default=str), flush=True)
    finally:
        if client is not None:
            cleanup(client)
    path.write_text(json.dumps({**kept, **results}, indent=2, default=str) + "\n")
    goals = {f"{n}: {g}": ok for n in names for g, ok in results[n].get("goals", {}).items()}
    print("\n== goals")
    for goal, ok in goals.items():
        print(f"{'met   ' if ok else 'MISSED'} {goal}")
    print(f"results: {path}")
    return 0


def _commit() -> str:
    import subprocess

    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return f"commit {out.stdout.strip() or '?'}"


def _cores() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
