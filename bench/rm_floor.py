"""The floor of a heal after `docker rm -f` (issue 28's goal: <= 1.2 x a bare create+start),
with no healerd in it: what the engine lets any healer do, rounds interleaved and rotated,
each heal timed as bench/heal.py times it (from just before the fault to the engine's
`start` event of what heals it), p50 of n, ratios to the bare create+start of the same run.

- `bare`: a create+start with no fault at all (the goal's reference);
- `after_removal`: a healer that tries `docker start` of the container on its `die` and,
  when the engine answers that the container is being removed, creates and starts a new
  one: healerd's way (the answer comes once the engine has released the container's
  network and mounts; it holds the container's lock until then);
- `at_die`: a create+start of a new container the moment the `die` arrives (bench/heal.py's
  perfect replacing script): the create and start then queue behind the removal;
- `spare_after_removal`: as `after_removal`, but the new container was created before the
  fault (a standby kept per service): only its start remains;
- `oracle_at_die`: a standby started the moment the `die` arrives. No real healer can:
  at the `die` nothing tells a removal from a `docker kill` (the kill and die events are the
  same, and the engine's list still says `running`: `listed_at_die` counts what it said),
  and a standby started on every `die` would run a second replica after each kill.
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import docker

from bench.heal import REF_NET, _bare, _references, _start_of
from bench.lib import EventClock, api, cleanup, image_id, summary

ROUNDS = int(os.environ.get("RMFLOOR_ROUNDS", "30"))
ARMS = ("bare", "after_removal", "at_die", "spare_after_removal", "oracle_at_die")


class Floor:
    def __init__(self, client: docker.APIClient, events: EventClock) -> None:
        self.c, self.events = client, events
        self.listed: dict[str, int] = {}

    def bare(self) -> float:
        t0 = time.time()
        cid = _bare(self.c, "bare")
        self.c.start(cid)
        return self._timed(cid, t0)

    def removal(self, arm: str) -> float:
        victim = _bare(self.c, "victim")
        self.c.start(victim)
        spare = _bare(self.c, "spare") if "spare" in arm or "oracle" in arm else None
        time.sleep(0.3)  # running, as a replica is
        t0 = time.time()
        rm = threading.Thread(
            target=self.c.remove_container, args=(victim,), kwargs={"force": True}
        )
        rm.start()
        self.events.wait(lambda e: e.get("Action") == "die" and e.get("id") == victim, after=t0)
        if arm != "oracle_at_die":
            self._look(victim)
        if arm in ("after_removal", "spare_after_removal"):
            self._in_place(victim)
        cid = spare or _bare(self.c, "new")
        self.c.start(cid)
        rm.join()
        return self._timed(cid, t0)

    def _look(self, victim: str) -> None:
        """What a list made at the `die` says of the container being removed."""
        (row,) = self.c.containers(all=True, filters={"id": victim}) or [{"State": "gone"}]
        self.listed[row["State"]] = self.listed.get(row["State"], 0) + 1

    def _in_place(self, victim: str) -> None:
        try:
            self.c.start(victim)
        except docker.errors.APIError as exc:
            if "removal" not in str(exc) and exc.status_code != 404:
                raise
        else:
            raise AssertionError("a container being removed started again")

    def _timed(self, cid: str, t0: float) -> float:
        elapsed = _start_of(self.events, cid, t0)
        self.c.remove_container(cid, force=True)
        return elapsed


def run(rounds: int = ROUNDS) -> dict[str, Any]:
    client = api()
    image_id(client)
    cleanup(client)
    samples: dict[str, list[float]] = {a: [] for a in ARMS}
    rng = random.Random(28)
    with _references(client), EventClock(client) as events:
        floor = Floor(client, events)
        for _ in range(rounds):
            for arm in rng.sample(ARMS, len(ARMS)):
                samples[arm].append(floor.bare() if arm == "bare" else floor.removal(arm))
                time.sleep(0.2)
    bare = summary(samples["bare"])["p50"]
    out: dict[str, Any] = {a: summary(samples[a]) for a in ARMS}
    out["ratio_to_bare"] = {a: out[a]["p50"] / bare for a in ARMS if a != "bare"}
    out["listed_at_die"] = floor.listed
    out["network"] = REF_NET
    return out


__all__ = ["run"]
