"""Speed per engine, side by side (issue 31): on each engine of tests/support/engines.py
(Debian 12's docker.io 20.10, Debian 13's 26.1 in a chroot, Podman 4.3), one run each,
healerd's heal after `docker kill` next to that engine's own start of the same container
(bench/heal.py's perfect script: `docker start` on the `die` event), rounds interleaved,
p50 of n. What is compared across engines is the ratio, so that each is judged against
its own engine's speed: the ratios should lie within 10 % of each other. On Podman a
killed container should run again in under 1 s (p50 of 10).

The reference is the script's start of healerd's very container, healerd stopped
(SIGSTOP) for that round (`script_same`): on Podman the script's start of a bare container
of its own while healerd runs beside it (`script_kill`, the reference before) came back
sooner than either alone (Podman 4.3: 257 ms against 403 ms for healerd and 407 ms for
the same script with healerd stopped), so that ratio measured Podman's state sync, not
healerd. Both are reported; `ratio` is against `script_same`, `ratio_bare` against
`script_kill`.

Each kill waits a random 0 to 250 ms first (ENGINE_JITTER, seeded by ENGINE_SEED): Podman
4.3 hands its events to each stream at that stream's own poll of its event file, every
250 ms, and a kill made just after the bench's own stream brought the last start is in
step with that poll. Without the jitter, one arm's stream was always a fixed part of a
poll behind the other's: the same code measured 1.12 x in one run and 1.81 x in the
next. With it, each arm waits for its event by a delay drawn alike for both.

Every arm kills in a thread of its own, timed to the engine's `start` event as before: on
Podman a kill call waits until Podman sees the container exited, and when it was started
again before Podman looked the call returned after about 20 s, once after more than the
client's 120 s (docs/engines.md), which ended a run.

`bash bench/run.sh engines` (all three) or `ENGINES=podman bash bench/run.sh engines`.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.heal import Arms, Script, _references, _start_of, _uptime
from bench.lib import BenchHealerd, EventClock, api, cleanup, image_id, private_engine, summary
from tests.support import engines
from tests.support.cluster import Cluster
from tests.support.polling import wait_for

ROUNDS = int(os.environ.get("ENGINE_ROUNDS", "20"))
KINDS = tuple(os.environ.get("ENGINES", " ".join(engines.KINDS)).split())
JITTER = float(os.environ.get("ENGINE_JITTER", "0.25"))
SEED = int(os.environ.get("ENGINE_SEED", "31"))
# healerd's heal; the script's start of a bare container of its own; the script's start
# of healerd's own container, healerd stopped meanwhile (the reference of the ratio).
ARMS = ("healerd_kill", "script_kill", "script_same")


def one_engine(kind: str, rounds: int) -> dict[str, Any]:
    """healerd and the scripts, `rounds` kills each, interleaved, on one engine."""
    with private_engine(kind=kind):
        client = api()
        version = client.version()
        img = image_id(client)
        cleanup(client)
        h = BenchHealerd(f"engines-{kind}")
        h.service("bench-heal", 1)
        samples: dict[str, list[float]] = {k: [] for k in ARMS}
        rng = random.Random(SEED)
        try:
            with _references(client), EventClock(client) as events:
                h.start()
                cluster = Cluster(client)
                wait_for("bench-heal", lambda: cluster.converged("bench-heal", 1), 120)
                arms = Arms(client, events, img)
                with (
                    Script(client, "script") as script,
                    Script(client, "same", any_label=True) as same,
                ):
                    script.armed.add(arms.script_box)
                    take: dict[str, Callable[[], float]] = {
                        "healerd_kill": lambda: _killed(arms, arms._healerd_one("bench-heal")),
                        "script_kill": lambda: _script_kill(arms),
                        "script_same": lambda: _script_same(arms, same, h),
                    }
                    for i in range(rounds):
                        for name in ARMS[i % 3 :] + ARMS[: i % 3]:
                            wait_for(
                                "converged", lambda: cluster.converged("bench-heal", 1), 60, 0.02
                            )
                            time.sleep(rng.uniform(0.0, JITTER))  # a random poll phase
                            samples[name].append(take[name]())
        finally:
            h.stop()
            cleanup(client)
    out: dict[str, Any] = {k: summary(v) for k, v in samples.items()}
    out["engine"] = f"{version.get('Version', '?')} (API {version.get('ApiVersion', '?')})"
    out["jitter_s"], out["seed"] = JITTER, SEED
    out["ratio"] = out["healerd_kill"]["p50"] / out["script_same"]["p50"]
    out["ratio_bare"] = out["healerd_kill"]["p50"] / out["script_kill"]["p50"]
    out["samples"] = samples
    return out


def _script_same(arms: Arms, script: Script, h: BenchHealerd) -> float:
    """The engine's own start of healerd's very container: healerd stopped (SIGSTOP)
    while the script heals it, so that only one of them starts it."""
    victim = arms._healerd_one("bench-heal")
    pid = h.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        script.armed.add(victim)
        took = _killed(arms, victim)
    finally:
        script.armed.discard(victim)
        os.kill(pid, signal.SIGCONT)
    return took


def _script_kill(arms: Arms) -> float:
    box = arms.script_box
    wait_for("script's box running", lambda: _uptime(arms.c, box) > 0, 30, 0.02)
    return _killed(arms, box)


def _killed(arms: Arms, victim: str) -> float:
    """`docker kill` of `victim` in a thread with a client of its own (the call may
    outlast the heal on Podman), timed from just before it to the engine's `start`."""

    def kill() -> None:
        try:
            api().kill(victim)
        except Exception as exc:  # a late answer changes no figure; say it all the same
            print(f"engines: kill of {victim[:12]}: {exc}", flush=True)

    t0 = time.time()
    threading.Thread(target=kill, name="bench-kill", daemon=True).start()
    return _start_of(arms.events, victim, t0)


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
