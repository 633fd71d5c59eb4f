"""The loop's looks at the engine: one list call per batch of keys (of one service alone
when the batch allows), folded into the loop's memory, or the last look reused while it
still shows every key of the batch (healerd.core.hints). The engine's health is noted by
the list (healerd.core.engine_health); the host's claims of room come from each look."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from healerd.config import DesiredState
from healerd.core.admission import Admission
from healerd.core.clock import Clock
from healerd.core.engine_health import EngineHealth
from healerd.core.hints import LookHints
from healerd.core.images import ImagePolicy
from healerd.core.loopmemory import LoopMemory
from healerd.core.loopsettings import DISCOVER
from healerd.core.observe import observe
from healerd.core.ratelimit import LastLook
from healerd.core.readmodel import StatusBook
from healerd.core.reconcile import Observation, Reconciler
from healerd.core.report import Reporter
from healerd.core.room import ahead_may_claim, claims
from healerd.core.timings import Timings
from healerd.core.wanted import Declared
from healerd.core.workqueue import WorkQueue
from healerd.model import ObservedContainer, ServiceSpec


class Claims(Protocol):
    """The host's room as the looks see it (healerd.core.admission)."""

    def ahead(self, spec: ServiceSpec, services: Mapping[str, ServiceSpec]) -> bool: ...
    def claim(self, obs: Observation, scope: str | None) -> None: ...


class NoClaims:
    """No host limits (tests of the loop alone): nobody claims, nobody goes ahead."""

    def ahead(self, spec: ServiceSpec, services: Mapping[str, ServiceSpec]) -> bool:
        return False

    def claim(self, obs: Observation, scope: str | None) -> None:
        pass


class HostClaims:
    """Claims of room from each look, for the host's admission to order creates by."""

    def __init__(self, admission: Admission, book: StatusBook, images: ImagePolicy) -> None:
        self._admission = admission
        self._book = book
        self._images = images

    def ahead(self, spec: ServiceSpec, services: Mapping[str, ServiceSpec]) -> bool:
        return ahead_may_claim(spec, services, self._admission)

    def claim(self, obs: Observation, scope: str | None) -> None:
        states, no_image = self._book.states(), set(self._images.waiting_keys())
        services = obs.desired.services
        if scope is not None:
            services = {k: v for k, v in services.items() if k == scope}
        found = claims(services, obs.containers, states, self._admission, no_image)
        self._admission.set_claims(found, scope)


class Looks:
    def __init__(
        self,
        clock: Clock,
        timings: Timings,
        *,
        health: EngineHealth,
        last_look: LastLook,
        memory: LoopMemory,
        declared: Declared,
        hints: LookHints,
        room: Claims,
        report: Reporter,
        reconciler: Reconciler,
        queue: WorkQueue,
    ) -> None:
        self._clock = clock
        self._t = timings
        self._health = health
        self._last_look = last_look
        self._memory = memory
        self._declared = declared
        self._hints = hints
        self._room = room
        self._report = report
        self._reconciler = reconciler
        self._queue = queue
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._first = True  # until the first list (see observe)
        # The last look: when it began, what it saw, the one service it listed or None.
        self._recent: tuple[float, Sequence[ObservedContainer], str | None] | None = None

    def seen(self) -> set[str]:
        """The services the looks found containers of."""
        with self._lock:
            return set(self._seen)

    def again(self) -> None:
        """The engine is back: the next look lists everything, and none is reused."""
        with self._lock:
            self._first = True
            self._recent = None

    def observe(self, keys: Sequence[str]) -> Observation | None:
        """One list call for the whole batch; None when the engine cannot be read. At
        the first look, containers found stopped may have been stopped by an engine
        restart or a reboot (which also restarted healerd): like those stopped while the
        engine was away, no crash."""
        self._report.count("list_calls")
        began = self._clock.monotonic()
        desired = self._declared.desired  # one snapshot: the scope and the pass agree
        scope = self.scope(keys, desired)
        self._hints.looking(scope)
        listed = self._health.list_managed(keys, scope)
        if listed is not None and scope is not None and self._first:
            # This list found the engine back (EngineHealth's on_back): the first look
            # after an outage must see every service's stopped containers.
            self._report.count("list_calls")
            scope, listed = None, self._health.list_managed(keys)
        if listed is None:
            with self._lock:
                self._recent = None  # an engine that cannot list: no pass acts on before
            return None
        if scope is None:
            self._last_look.offer(listed, began)  # dated when it began: what it may miss
        seen = self._fold(listed, began, scope)
        self._reconciler.save_runs()  # the runs of containers gone are pruned
        obs = Observation(seen, desired, began)
        self._room.claim(obs, scope)
        return obs

    def _fold(
        self, listed: list[ObservedContainer], began: float, scope: str | None
    ) -> Sequence[ObservedContainer]:
        mono, wall = self._clock.monotonic(), self._clock.time()
        with self._lock:
            first, self._first = self._first, False
            with self._memory.held() as mem:
                seen = observe(mem, listed, mono, wall, engine_back=first, scoped=bool(scope))
            if scope is None:
                self._seen = _services(seen)
            else:
                self._seen = (self._seen - {scope}) | _services(seen)
            self._recent = (began, seen, scope)
        return seen

    def scope(self, keys: Sequence[str], desired: DesiredState) -> str | None:
        """The one service a batch's look may list alone, else None (every service).

        A lone key whose pass reads no other service's containers (no depends_on, which
        also holds links and network_mode service:NAME) needs only its own rows: at 10
        services of 100 a heal's list is a tenth of the full one, most of what a heal
        cost above the engine's create and start. The first look (after a start or an
        outage), a discovery pass and every batch of more keys list everything; so does
        the resync, whose keys come in batches, and a pass whose creates higher
        priorities may have to go ahead of (room.ahead_may_claim)."""
        if len(keys) != 1 or keys[0] == DISCOVER or self._first:
            return None
        spec = desired.services.get(keys[0])
        if spec is not None and (spec.depends_on or _joins_service(spec)):
            return None
        if spec is not None and self._room.ahead(spec, desired.services):
            return None
        return keys[0]

    def reused(self, keys: Sequence[str]) -> Observation | None:
        """The last look, when it is at most Timings.look_reuse old and still shows every
        key of the batch (healerd.core.hints): it began after the key was last queued, or
        only a kill or a death came since, which the memory folds in."""
        with self._lock:
            recent = self._recent
        if recent is None or self._clock.monotonic() - recent[0] > self._t.look_reuse:
            return None
        began, seen, scope = recent
        desired = self._declared.desired
        if scope is not None and self.scope(keys, desired) != scope:
            return None  # a look at one service shows nothing of the others
        if any(self._ahead(k, desired) for k in keys):
            return None  # higher priorities' deaths may be in a new list, not yet in events
        stamps = ((k, self._queue.queued_at(k)) for k in keys)
        if not all(self._hints.still_shown(k, at, began) for k, at in stamps):
            return None
        self._report.count("reused_looks")
        return Observation(seen, desired, began)

    def _ahead(self, key: str, desired: DesiredState) -> bool:
        """Whether higher priorities may have to go ahead of `key`'s starts: the room is
        shared out from a look at every service (their claims), never from an older one
        (integration test_with_room_for_one_container_the_higher_priority_is_healed_first:
        a kill's pass on the look from before both deaths started the low one first)."""
        spec = desired.services.get(key)
        return spec is not None and self._room.ahead(spec, desired.services)


def _joins_service(spec: ServiceSpec) -> bool:
    return (spec.network_mode or "").startswith("service:")


def _services(containers: Iterable[ObservedContainer]) -> set[str]:
    return {c.service for c in containers if c.service}


__all__ = ["Claims", "HostClaims", "Looks", "NoClaims"]
