"""Heal latency with a dead notification target (issue 32): "a target that refuses
connections changes neither heal latency nor the loop".

Two arms on one private engine, one healerd config dir, one service of REPLICAS busybox
replicas, and the same healerd code:

- `none`: healerd.yaml without `notifications:`;
- `dead`: the same healerd.yaml with two targets that never take a message, both told
  every plain heal (`events: [crash-loop, failed, recovered, heal]`): `refused`, a
  json:// URL on a port that is bound but not listening (the kernel answers a reset at
  once: connection refused), and `blackhole`, a json:// URL on a listener that accepts
  and never answers (Apprise waits out its 4 s read timeout on every try).

Each heal is a `docker kill` of one replica, timed from just before the kill to the
engine's `start` event of the same container (bench/heal.py's clock, event times).

Fairness: only one healerd runs at a time (a second one on the same engine would remove
the first one's containers as undeclared), so the arms alternate in blocks: healerd
started with the arm's healerd.yaml, BLOCK kills, healerd stopped (its containers are
left running and adopted by the next start, without a create). Blocks alternate a b, b a,
a b, ... (a round is one block of each arm), so drift in the machine falls on both alike.
A fresh start per block also gives every `dead` block a notifier that has not yet backed
off: its first gather sends to both targets (and imports Apprise), then healerd's retry
schedule applies (10 s doubling), as in production. Between a heal and the next kill
the bench waits a random PAUSE (seeded; the same draws for both blocks of a round),
spread across the notifier's 2 s gather, so that kills land before, during and after
its sends; after a block's last heal it waits TAIL (2.5 s) before the stop, so that
the last gather goes out too. Every heal puts a message in each dead target's outbox
(one per gather); the bench reads healerd's status at the end of each block (sent,
failed tries, waiting messages; a try at the blackhole still waiting out its timeout at
the stop is not counted there) and counts the blackhole's connections, to show that
the targets were tried. It also notes healerd's CPU time per block (the loop's cost).

Judged by the p50 of each arm: dead / none <= 1.05. p95 is reported beside it (of 30
samples it is about the second slowest: a noisy figure), and the p50 by a kill's place
in its block: the first kill of a block comes before any send; later ones may meet the
first send, which imports Apprise inside healerd (about 0.2 s of CPU, once per process).

`bash bench/run.sh notify`; NOTIFY_ROUNDS (kills per arm, 30), NOTIFY_BLOCK (kills per
healerd start, 5), NOTIFY_REPLICAS (10), NOTIFY_SEED (32).
"""

from __future__ import annotations

import math
import os
import random
import socket
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import docker

from bench.heal import SERVICE_LABEL, _start_of
from bench.lib import BenchHealerd, EventClock, api, cleanup, fmt, image_id, label_of, pct, summary
from tests.support.cluster import Cluster
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

ROUNDS = int(os.environ.get("NOTIFY_ROUNDS", "30"))
BLOCK = int(os.environ.get("NOTIFY_BLOCK", "5"))
REPLICAS = int(os.environ.get("NOTIFY_REPLICAS", "10"))
SEED = int(os.environ.get("NOTIFY_SEED", "32"))
PAUSE = (1.0, 3.5)  # seconds between a heal and the next kill (the gather ends at 2 s)
SETTLE = 2.0  # after healerd's API answers, before the block's first kill
TAIL = 2.5  # after a block's last heal, before the stop: its gather ends and goes out
GOAL = 1.05
SERVICE = "bench-notify"
ARMS = ("none", "dead")
BASE = "log_level: warning\nhandoff_on_stop: false\n"


class Blackhole:
    """A TCP listener on loopback that accepts every connection and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.held: list[socket.socket] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        with suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.held.append(conn)  # never read, never answered, closed at the end

    def close(self) -> None:
        with suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for conn in self.held:
            conn.close()


def _refusing() -> socket.socket:
    """A port bound and not listening: a connection is refused at once, and no other
    process can take the port meanwhile."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


def _settings(arm: str, refused: int, blackhole: int) -> str:
    if arm == "none":
        return BASE
    told = "    events: [crash-loop, failed, recovered, heal]\n"
    return (
        f"{BASE}notifications:\n"
        f"  - url: json://127.0.0.1:{refused}/x\n    name: refused\n{told}"
        f"  - url: json://127.0.0.1:{blackhole}/x\n    name: blackhole\n{told}"
    )


class Bench:
    """The run's one healerd (one config dir, started once per block) and the engine."""

    def __init__(self, client: docker.APIClient, events: EventClock, ports: tuple[int, int]):
        self.c, self.events, self.ports = client, events, ports
        self.cluster = Cluster(client)
        self.h = BenchHealerd("notify")
        self.h.service(SERVICE, REPLICAS)
        self.kills = 0
        self.cpu: dict[str, list[float]] = {arm: [] for arm in ARMS}
        self.targets: list[dict[str, Any]] = []  # healerd's view of them, per dead block
        self.not_sent = 0  # healerd's warnings "notification to ... not sent"

    def start(self, arm: str) -> None:
        path = self.h.conf.settings(_settings(arm, *self.ports))
        os.chmod(path, 0o600)  # the same mode in both arms; required with notifications
        self.h.start()
        wait_for(f"{REPLICAS} replicas", lambda: self.cluster.converged(SERVICE, REPLICAS), 120)
        wait_for("healerd's API", self._api_up, 60, 0.05)
        time.sleep(SETTLE)

    def _api_up(self) -> bool:
        if not self.h.alive():
            raise RuntimeError(f"healerd exited:\n{self.h.log()[-3000:]}")
        try:
            self.h.api("/v1/status")
        except Exception:
            return False
        return True

    def stop(self, arm: str) -> None:
        """Stop healerd, keeping its config dir and containers; note what it did."""
        self.cpu[arm].append(_cpu_seconds(self.h.pid))
        if arm == "dead":
            self.targets.append(
                {t["name"]: t for t in self.h.api("/v1/status").get("notifications", [])}
            )
            self.not_sent += self.h.log().count("not sent")
        Healerd.stop(self.h, 30)

    def kill_one(self) -> float:
        """`docker kill` one replica (each in turn): until its `start` event."""
        wait_for("converged", lambda: self.cluster.converged(SERVICE, REPLICAS), 60, 0.02)
        ids = sorted(c["Id"] for c in self.cluster.running(SERVICE))
        victim = ids[self.kills % len(ids)]
        self.kills += 1
        t0 = time.time()
        self.c.kill(victim)
        return _start_of(self.events, victim, t0)

    def block(self, arm: str, pauses: list[float]) -> list[float]:
        """healerd started with the arm's healerd.yaml, a kill, then a kill after each
        of `pauses`, and TAIL before the stop."""
        self.start(arm)
        try:
            out = [self.kill_one()]
            for pause in pauses:
                time.sleep(pause)
                out.append(self.kill_one())
            time.sleep(TAIL)
            return out
        finally:
            self.stop(arm)


def _cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a live process (its whole life so far)."""
    if pid is None:
        return float("nan")
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # after the name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(rounds: int = ROUNDS, block: int = BLOCK) -> dict[str, Any]:
    client = api()
    image_id(client)
    cleanup(client)
    refused, hole = _refusing(), Blackhole()
    samples: dict[str, list[float]] = {arm: [] for arm in ARMS}
    places: dict[str, list[int]] = {arm: [] for arm in ARMS}  # each sample's kill in its block
    rng = random.Random(SEED)
    with EventClock(client) as events:
        b = Bench(client, events, (int(refused.getsockname()[1]), hole.port))
        try:
            # Warm-up, not measured: the replicas created, one heal.
            b.block("none", [])
            b.cpu["none"].clear()
            t_measured = time.time()
            for r in range(math.ceil(rounds / block)):
                kills = min(block, rounds - r * block)
                pauses = [rng.uniform(*PAUSE) for _ in range(kills - 1)]
                for arm in ARMS if r % 2 == 0 else ARMS[::-1]:
                    took = b.block(arm, pauses)
                    samples[arm] += took
                    places[arm] += range(len(took))
            creates = events.count(
                lambda e: e.get("Action") == "create" and label_of(e, SERVICE_LABEL) == SERVICE,
                t_measured,
            )
        finally:
            b.h.stop()
            cleanup(client)
            refused.close()
            held = len(hole.held)
            hole.close()
    out = _judged(samples, b, creates, held)
    out["p50_by_place_in_block"] = {
        arm: [
            pct([x for x, i in zip(samples[arm], places[arm], strict=True) if i == place], 0.5)
            for place in range(max(places[arm], default=-1) + 1)
        ]
        for arm in ARMS
    }
    _table(out)
    return out


def _judged(samples: dict[str, list[float]], b: Bench, creates: int, held: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in ARMS:
        out[arm] = {**summary(samples[arm]), "p95": pct(samples[arm], 0.95)}
        cpu = b.cpu[arm]
        out[arm]["healerd_cpu_s_per_block"] = sum(cpu) / len(cpu) if cpu else float("nan")
    ratio = out["dead"]["p50"] / out["none"]["p50"]
    out["ratio_p50"] = ratio
    out["ratio_p95"] = out["dead"]["p95"] / out["none"]["p95"]
    tried = {
        name: {
            "failed_tries": sum(int(blk.get(name, {}).get("failed", 0)) for blk in b.targets),
            "sent": sum(int(blk.get(name, {}).get("sent", 0)) for blk in b.targets),
            "waiting_at_stops": sum(int(blk.get(name, {}).get("pending", 0)) for blk in b.targets),
        }
        for name in ("refused", "blackhole")
    }
    out["dead_targets"] = {
        **tried,
        "blackhole_connections": held,
        "not_sent_warnings": b.not_sent,
        "dead_blocks": len(b.targets),
    }
    out["creates"] = creates
    out["setup"] = {
        "replicas": REPLICAS,
        "kills_per_block": BLOCK,
        "pause_s": list(PAUSE),
        "seed": SEED,
    }
    out["samples"] = samples
    out["goals"] = {
        f"dead target: heal p50 <= {GOAL} x without notifications": ratio <= GOAL,
        "every heal in place (no create)": creates == 0,
    }
    return out


def _table(out: dict[str, Any]) -> None:
    print("\n| arm | n | p50 | p95 | healerd CPU per block |")
    print("|---|---|---|---|---|")
    for arm, what in (("none", "no notifications"), ("dead", "dead targets")):
        s = out[arm]
        cpu = s["healerd_cpu_s_per_block"]
        print(f"| {what} | {s['n']} | {fmt(s['p50'])} | {fmt(s['p95'])} | {cpu:.2f} s |")
    verdict = "PASS" if out["ratio_p50"] <= GOAL else "MISS"
    print(
        f"ratio dead/none: p50 {out['ratio_p50']:.3f} x ({verdict}, goal <= {GOAL}), "
        f"p95 {out['ratio_p95']:.3f} x"
    )
    d = out["dead_targets"]
    print(
        f"dead targets: refused {d['refused']['failed_tries']} failed tries, blackhole "
        f"{d['blackhole']['failed_tries']} ({d['blackhole_connections']} connections held), "
        f"{d['refused']['waiting_at_stops']} + {d['blackhole']['waiting_at_stops']} "
        f"messages waiting at the stops, "
        f"{d['refused']['sent'] + d['blackhole']['sent']} sent (0 expected)"
    )
    for arm in ARMS:
        places = ", ".join(fmt(x) for x in out["p50_by_place_in_block"][arm])
        print(f"p50 by a kill's place in its block, {arm}: {places}")
    print(flush=True)
