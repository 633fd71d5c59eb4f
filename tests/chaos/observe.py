"""What the soak watches while it disrupts: two background threads.

- Sampler: one label-filtered list call about every 50 ms. It checks that no service
  ever has more containers than allowed (invariant 3), notes every managed container it
  sees (a cross-check of the create count) and times heals (a disrupted replica is
  healed at the first sample where its service is back at its desired count of
  available containers, counting a victim only once it runs again: started after its
  disruption, as healerd heals in place; a victim that does not is made up for by a
  replacement).
- EventWatch: the engine's event stream, reconnected across engine restarts with
  `since`. It counts `create` events of managed containers (invariant 4) and notes which
  container each replaces (`io.healerd.replaces`) and when each container last started
  (invariants 1 and 6, heal latency), flags any event on an unowned container that the
  soak did not cause (invariant 2, continuously), and notes containers that turned
  unhealthy without the soak making them so.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import docker

from healerd.model import LABEL_REPLACES, LABEL_SERVICE

FORGED = "chaos.forged"
UNOWNED = "chaos.unowned"
# A container in one of these states counts towards its service. Not `created`: a
# container healerd has created but not started yet is counted a moment later, once it
# runs, and one that a killed healerd left never starting is as good as dead (healerd
# replaces and removes it).
LIVE_STATES = frozenset({"running", "restarting", "paused"})
# Events that mean something changed an unowned container.
TOUCHING = frozenset(
    {"kill", "stop", "die", "destroy", "pause", "unpause", "rename", "update", "restart", "oom"}
)


@dataclass
class Heal:
    kind: str
    service: str
    victim: str
    t0: float  # monotonic, taken just before the disruption
    burst: int
    expected_backoff: float = 0.0
    name: str = ""
    t0_wall: float = 0.0  # wall clock (the engine's events' clock), just before
    started_at: str = ""  # the victim's State.StartedAt before the disruption
    healed_at: float | None = None
    confounded: list[str] = field(default_factory=list)
    skipped: bool = False
    late: bool = False  # resolved by the quiet check, not by a sample

    @property
    def expected_delay(self) -> float:
        # An unhealthy container is found out after 2 failed checks 1 s apart, then has
        # 2 s of unhealthy_grace; restarted in place with its sick file, twice that.
        return self.expected_backoff + (8.0 if self.kind == "unhealthy" else 0.0)

    @property
    def latency(self) -> float | None:
        return None if self.healed_at is None else self.healed_at - self.t0


class Shared:
    """State shared by the soak's main thread and its observers, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.desired: dict[str, int] = {}
        self.healthchecked: set[str] = set()
        self.limits: dict[str, int] = {}
        # The containers the current burst disrupted, with their heal (cleared at quiet).
        self.victims: dict[str, Heal] = {}
        self.heals: list[Heal] = []
        self.starts: dict[str, float] = {}  # container id -> wall time of its last start
        self.replaced_by: dict[str, str] = {}  # container id -> the one that replaces it
        self.violations: list[str] = []
        self.burst = 0
        self.t_start = time.monotonic()
        self.log: Callable[[str], None] = lambda line: print(line, flush=True)

    def violate(self, msg: str) -> None:
        with self.lock:
            self.violations.append(msg)
        self.log(f"!! VIOLATION: {msg}")

    def back(self, c: dict[str, Any]) -> bool:
        """A victim running again: started after its disruption (healed in place), by
        the engine's start events. (Caller holds the lock.)"""
        h = self.victims.get(c["Id"])
        return (
            h is not None and c["State"] == "running" and self.starts.get(c["Id"], 0.0) > h.t0_wall
        )


def _available(c: dict[str, Any], healthchecked: bool) -> bool:
    if c["State"] != "running":
        return False
    return not healthchecked or "(healthy)" in str(c.get("Status", ""))


class Sampler(threading.Thread):
    def __init__(self, url: str, shared: Shared, interval: float = 0.05) -> None:
        super().__init__(name="chaos-sampler", daemon=True)
        self.url = url
        self.shared = shared
        self.interval = interval
        self.stop_flag = threading.Event()
        self.samples = 0
        self.failed_samples = 0
        self.seen: set[str] = set()
        self.max_live: dict[str, int] = {}
        self._reported: set[tuple[str, int]] = set()
        self.last_list_ms: list[float] = []

    def run(self) -> None:
        api = docker.APIClient(base_url=self.url, version="1.41", timeout=10)
        try:
            while not self.stop_flag.is_set():
                started = time.monotonic()
                try:
                    cs = api.containers(all=True, filters={"label": LABEL_SERVICE})
                except Exception:
                    self.failed_samples += 1
                    # The engine restarts: a fresh client, and a pause not to hammer it.
                    api.close()
                    api = docker.APIClient(base_url=self.url, version="1.41", timeout=10)
                    self.stop_flag.wait(0.2)
                    continue
                done = time.monotonic()
                self.last_list_ms = [*self.last_list_ms, (done - started) * 1000][-200:]
                self._sample(cs, started, done)
                self.stop_flag.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            api.close()

    def _sample(self, cs: list[dict[str, Any]], started: float, done: float) -> None:
        sh = self.shared
        with sh.lock:
            self.samples += 1
            live: dict[str, list[dict[str, Any]]] = {}
            avail: dict[str, int] = {}
            for c in cs:
                labels = c.get("Labels") or {}
                if FORGED in labels:
                    continue  # made by the soak itself
                self.seen.add(c["Id"])
                svc = labels.get(LABEL_SERVICE, "")
                if c["Id"] in sh.victims and not sh.back(c):
                    continue
                if c["State"] in LIVE_STATES:
                    live.setdefault(svc, []).append(c)
                if _available(c, svc in sh.healthchecked):
                    avail[svc] = avail.get(svc, 0) + 1
            for svc, mine in live.items():
                n = len(mine)
                self.max_live[svc] = max(self.max_live.get(svc, 0), n)
                limit = sh.limits.get(svc, 0)
                if n > limit and (svc, sh.burst) not in self._reported:
                    self._reported.add((svc, sh.burst))
                    detail = ", ".join(f"{c['Names'][0].lstrip('/')}={c['State']}" for c in mine)
                    sh.violate(
                        f"[inv3] burst {sh.burst}: service {svc} has {n} containers, "
                        f"allowed {limit} (desired {sh.desired.get(svc, 0)} + surge): {detail}"
                    )
            # With k victims of one service pending and the service d short of its
            # desired count (victims running again counted), k - d are healed: first
            # those running again, then first in, first out.
            back = {c["Id"] for c in cs if c["Id"] in sh.victims and sh.back(c)}
            pending: dict[str, list[Heal]] = {}
            for h in sh.heals:
                if h.healed_at is None and not h.skipped and started >= h.t0:
                    pending.setdefault(h.service, []).append(h)
            for svc, hs in pending.items():
                deficit = max(0, sh.desired.get(svc, 0) - avail.get(svc, 0))
                # Those expected to take longer (a crash backoff, unhealthy detection)
                # are the ones still pending when some are healed.
                order = sorted(hs, key=lambda h: (h.victim not in back, h.expected_delay, h.t0))
                for h in order[: max(0, len(hs) - deficit)]:
                    h.healed_at = done


class EventWatch(threading.Thread):
    def __init__(self, url: str, shared: Shared) -> None:
        super().__init__(name="chaos-events", daemon=True)
        self.url = url
        self.shared = shared
        self.stop_flag = threading.Event()
        self.creates: dict[str, tuple[str, float]] = {}  # id -> (service, time)
        self.forged_creates = 0
        self.started: set[str] = set()
        self.watched: dict[str, float] = {}  # unowned id -> wall time from which to watch
        self.retired: dict[str, float] = {}  # unowned id -> wall time the soak let it go
        self.windows: list[list[float]] = []  # engine restarts: [start, end] wall times
        # Starts of managed containers within an engine restart: (time, service, id).
        self.window_starts: list[tuple[float, str, str]] = []
        self.sick: set[str] = set()  # containers the soak made unhealthy
        self.unplanned_unhealthy: list[tuple[str, str]] = []
        self.reconnects = 0
        self._dedupe: set[tuple[str, str, int]] = set()
        self._stream: Any = None
        self._since = time.time()

    def close(self) -> None:
        self.stop_flag.set()
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            api = docker.APIClient(base_url=self.url, version="1.41", timeout=10)
            try:
                since = f"{self._since:.9f}"
                self._stream = api.events(since=since, filters={"type": ["container"]}, decode=True)
                for ev in self._stream:
                    if self.stop_flag.is_set():
                        return
                    self._handle(ev)
            except Exception:
                pass
            finally:
                api.close()
            if not self.stop_flag.is_set():
                self.reconnects += 1
                self.stop_flag.wait(0.2)

    def in_window(self, t: float) -> bool:
        with self.shared.lock:
            return any(start <= t <= (end if end else float("inf")) for start, end in self.windows)

    def _handle(self, ev: dict[str, Any]) -> None:
        tn = int(ev.get("timeNano") or int(ev.get("time", 0)) * 10**9)
        cid = str(ev.get("id") or ev.get("Actor", {}).get("ID", ""))
        action = str(ev.get("Action") or ev.get("status") or "")
        key = (cid, action, tn)
        if key in self._dedupe:
            return
        self._dedupe.add(key)
        t = tn / 1e9
        # Catch up from a little before the last event after a reconnect (dedupe drops
        # the repeats).
        self._since = max(self._since, t - 0.001)
        attrs = ev.get("Actor", {}).get("Attributes", {}) or {}
        sh = self.shared
        with sh.lock:
            if LABEL_SERVICE in attrs:
                if action == "create":
                    if FORGED in attrs:
                        self.forged_creates += 1
                    else:
                        self.creates[cid] = (attrs[LABEL_SERVICE], t)
                        if attrs.get(LABEL_REPLACES):
                            sh.replaced_by[attrs[LABEL_REPLACES]] = cid
                elif action == "start":
                    self.started.add(cid)
                    sh.starts[cid] = max(t, sh.starts.get(cid, 0.0))
                    if self.in_window(t):
                        self.window_starts.append((t, attrs[LABEL_SERVICE], cid))
                elif (
                    action.startswith("health_status")
                    and "unhealthy" in action
                    and cid not in self.sick
                    and FORGED not in attrs
                ):
                    self.unplanned_unhealthy.append((attrs[LABEL_SERVICE], cid))
                return
            watched_from = self.watched.get(cid)
            if watched_from is None or t < watched_from:
                return
            retired = self.retired.get(cid)
            if retired is not None and t >= retired:
                return
            if action.split(":")[0] in TOUCHING and not self.in_window(t):
                name = attrs.get("name", cid[:12])
                at = time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"
                sh.violate(
                    f"[inv2] unowned container {name} got a '{action}' event at {at} "
                    "that the soak did not cause (outside any engine restart)"
                )
