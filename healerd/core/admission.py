"""Admission of new containers on a small host: who may start one now, and who waits.

The rule (docs/user-guide.md, "Node awareness"):
- room = available memory above `pressure_memory_available`, less what containers
  started in the last few seconds were granted (their memory may not show yet);
- a create needs the service's mem_limit, else `container_memory_estimate`;
- a replacement (it stands in for a failed container of the service) starts when its
  need fits the room: disk pressure alone does not stop it, it frees the dead
  container's layer as it goes;
- an extra container (scale-up, rollout surge, a container that vanished) also needs
  no pressure at all, memory, disk or inodes;
- what does not fit waits, and services with a higher `priority` that miss containers
  claim the room first: a lower one gets only what is left after their needs. A higher
  one whose container does not fit at all blocks nobody (backfill).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from healerd.core.clock import Clock
from healerd.core.plantypes import Offer
from healerd.core.pressure import Pressure, assess, fmt_bytes, pull_refusal
from healerd.core.timings import Timings
from healerd.host import HostProbe, HostSample
from healerd.model import NodeLimits

T = TypeVar("T")


@dataclass(frozen=True)
class Claim:
    """A service that misses containers, for the priority order."""

    priority: int
    missing: int
    need: int  # bytes per container


@dataclass(frozen=True)
class Use:
    """What a plan made on an offer takes: starts and creates that need room, by kind,
    and how many wait."""

    replacements: int
    extras: int
    waiting: int


class Admission:
    def __init__(
        self,
        probe: HostProbe,
        clock: Clock,
        limits: NodeLimits,
        disk_path: Callable[[], str],
        timings: Timings | None = None,
    ) -> None:
        """`timings`: how long a host sample is used and a grant reserved
        (host_sample_ttl, reservation)."""
        self._t = timings or Timings()
        self._probe = probe
        self._clock = clock
        self._limits = limits
        self._disk_path = disk_path
        # Called (outside the lock) when a pressure flag turns on or off.
        self._listeners: list[Callable[[Pressure, Pressure], None]] = []
        self._lock = threading.Lock()
        self._sample = HostSample()
        self._sampled_at = -math.inf
        self._pressure = Pressure()
        self._reserved: list[tuple[float, int, str]] = []  # (until, bytes, service)
        self._claims: dict[str, Claim] = {}
        self._waiting: dict[str, str] = {}

    @property
    def limits(self) -> NodeLimits:
        return self._limits

    def update_limits(self, limits: NodeLimits) -> None:
        with self._lock:
            self._limits = limits
            self._sampled_at = -math.inf  # judge the host again under the new limits

    # -- the host -----------------------------------------------------------------

    def pressure(self) -> Pressure:
        """The host under the current limits, from a sample at most host_sample_ttl old."""
        with self._lock:
            old = self._pressure
            now = self._clock.monotonic()
            if now - self._sampled_at >= self._t.host_sample_ttl:
                self._sample = self._probe.sample(self._disk_path())
                self._sampled_at = now
                self._pressure = assess(self._sample, self._limits)
            new = self._pressure
        if new.flags != old.flags:
            for listener in list(self._listeners):
                listener(old, new)
        return new

    def subscribe(self, listener: Callable[[Pressure, Pressure], None]) -> None:
        """Call `listener(old, new)` whenever a pressure flag turns on or off."""
        self._listeners.append(listener)

    def sample(self) -> HostSample:
        self.pressure()
        with self._lock:
            return self._sample

    # -- creates --------------------------------------------------------------------

    def set_claims(self, claims: dict[str, Claim], only: str | None = None) -> None:
        """`only`: the claims come from a list of that service alone: the others stand."""
        with self._lock:
            if only is None:
                self._claims = dict(claims)
            elif only in claims:
                self._claims[only] = claims[only]
            else:
                self._claims.pop(only, None)

    def room(self) -> float:
        """Memory above its threshold not reserved for creates yet (inf: unknown)."""
        headroom = self.pressure().memory_headroom
        with self._lock:
            now = self._clock.monotonic()
            reserved = sum(r[1] for r in self._reserved if r[0] > now)
        return math.inf if headroom is None else headroom - reserved

    def fit(
        self,
        service: str,
        priority: int,
        need: int,
        make: Callable[[Offer], T],
        used: Callable[[T], Use],
    ) -> tuple[T, str]:
        """Plan within the room there is, in one step: `make` (pure and quick: the
        planner) gets the offer under the lock, so that two passes cannot both count on
        the same room, and what it uses is reserved. Returns its result, and why some
        of it waits ("" when nothing does)."""
        pressure = self.pressure()
        with self._lock:
            now = self._clock.monotonic()
            self._reserved = [r for r in self._reserved if r[0] > now]
            room, higher = self._left(service, priority, pressure)
            fits = None if need <= 0 or math.isinf(room) else max(0, math.floor(room / need))
            result = make(Offer(fits, extras=not pressure.any))
            use = used(result)
            if use.replacements or use.extras:
                bytes_ = (use.replacements + use.extras) * max(0, need)
                self._reserved.append((now + self._t.reservation, bytes_, service))
                # What was granted is reserved now: it must not also count as a claim.
                own = self._claims.get(service)
                if own is not None:
                    left = max(0, own.missing - use.replacements - use.extras)
                    self._claims[service] = Claim(own.priority, left, own.need)
            reason = ""
            if use.waiting:
                reason = self._why(pressure, use.waiting, need, room, higher)
                self._waiting[service] = reason
            else:
                self._waiting.pop(service, None)
            return result, reason

    def _left(
        self, service: str, priority: int, pressure: Pressure
    ) -> tuple[float, list[tuple[str, Claim]]]:
        """The room left for `service` once the reservations and the claims of higher
        priorities are counted (inf: unknown), and those higher claims. Under the lock."""
        reserved = sum(r[1] for r in self._reserved)
        room = math.inf
        if pressure.memory_headroom is not None:
            room = pressure.memory_headroom - reserved
        # Higher priorities first, each taking what it misses; one whose container does
        # not fit even so cannot start now and blocks nobody (backfill).
        higher: list[tuple[str, Claim]] = []
        for name, c in sorted(self._claims.items(), key=lambda kv: -kv[1].priority):
            if name == service or c.priority <= priority or c.missing <= 0:
                continue
            if c.need <= 0 or math.isinf(room):
                higher.append((name, c))
            elif c.need <= room:
                room -= min(c.missing, int(room // c.need)) * c.need
                higher.append((name, c))
        return room, higher

    def release(self, service: str) -> None:
        """The room the service's last pass reserved goes back: its creates did not
        happen (the image could not be had)."""
        with self._lock:
            for i in range(len(self._reserved) - 1, -1, -1):
                if self._reserved[i][2] == service:
                    del self._reserved[i]
                    return

    def _why(
        self,
        pressure: Pressure,
        waiting: int,
        need: int,
        room: float,
        higher: list[tuple[str, Claim]],
    ) -> str:
        head = f"{waiting} container(s) wait for resources"
        if pressure.any and room >= need:
            return f"{head}: no extra containers under pressure ({pressure.describe()})"
        if pressure.memory:
            return f"{head}: {pressure.describe()}"
        first = ", ".join(f"{n} (priority {c.priority})" for n, c in sorted(higher))
        after = f"; {first} go first" if first else ""
        return (
            f"{head}: each needs {fmt_bytes(need)} and the room above "
            f"pressure_memory_available is {fmt_bytes(max(0.0, room))}{after}"
        )

    def done(self, service: str) -> None:
        """The service no longer wants creates (converged, removed, paused)."""
        with self._lock:
            self._waiting.pop(service, None)

    def waiting(self) -> dict[str, str]:
        with self._lock:
            return dict(self._waiting)

    # -- pulls ----------------------------------------------------------------------

    def pull_refusal(self, image: str, size_hint: int | None) -> str | None:
        sample = self.sample()
        with self._lock:
            limits = self._limits
        return pull_refusal(image, size_hint, sample, limits)


__all__ = ["Admission", "Claim", "Use"]
