"""The read side of the loop: service statuses as passes leave them, what runs now, and
the one-line summary. The API, metrics and healerctl read only this."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import replace

from healerd.config import DesiredState
from healerd.core.clock import Clock
from healerd.core.events import EventLog
from healerd.core.lifecycle import ServiceState
from healerd.core.notices import StateChange
from healerd.core.outcome import Tally
from healerd.core.planner import history
from healerd.core.ratelog import LOOP_KINDS, LOOP_WINDOW, RateLimitedLog
from healerd.core.status import ContainerStatus, ServiceStatus, is_converged
from healerd.model import ObservedContainer, ServiceSpec

log = logging.getLogger("healerd.controller")

# State lines said at once per service per LOOP_WINDOW: a heal (Progressing, Converged)
# or a crash (Progressing, CrashLoopBackOff) is told as it happens.
STATE_BURST = 3


class StatusBook:
    """Each service's status, written by passes (thread-safe)."""

    def __init__(self, clock: Clock, events: EventLog) -> None:
        self._clock = clock
        self._events = events
        self._lock = threading.Lock()
        self._status: dict[str, ServiceStatus] = {}
        # Told of each change of a service's state (the notifications' intake).
        self.listeners: list[Callable[[StateChange], None]] = []
        # A line per change of state, at most STATE_BURST per service per window: a
        # state that flaps (an engine going away: Degraded, EngineUnreachable, ...) is
        # counted, and its latest said when the window ends.
        self.quiet = RateLimitedLog(
            log, LOOP_WINDOW, max_kinds=LOOP_KINDS, burst=STATE_BURST, clock=clock.monotonic
        )

    def set(
        self,
        key: str,
        state: ServiceState,
        reason: str,
        *,
        tally: Tally | None = None,
        paused: bool = False,
        next_retry: float | None = None,
        desired: int | None = None,
        unless: Callable[[], bool] | None = None,
    ) -> None:
        """`desired`: the declared count, where no pass counted yet; `unless()`, asked
        under the book's lock: the status is stale, leave the one there."""
        now = self._clock.time()
        with self._lock:
            if unless is not None and unless():
                return
            st = self._status.get(key)
            was = st.state if st is not None else None
            if st is None:
                st = self._status[key] = ServiceStatus(name=key, since=now)
            changed = st.state != state
            if changed:
                st.since = now
            st.state, st.reason, st.next_retry, st.paused = state, reason, next_retry, paused
            if tally is not None:
                st.desired, st.source_file = tally.desired, tally.source_file
                st.running, st.restarts = tally.running, tally.restarts
                if tally.available is not None and tally.up_to_date is not None:
                    st.available, st.up_to_date = tally.available, tally.up_to_date
            if desired is not None:
                st.desired = desired
            running, wanted = st.running, st.desired
        if not changed:
            return
        # A line per change of state, none per pass: the log tells the story.
        self.quiet.info(
            f"state:{key}",
            "%s: %s (%d/%d running)%s",
            key,
            state,
            running,
            wanted,
            f": {reason}" if reason else "",
            extra={"healerd_service": key, "healerd_state": state.value, "reason": reason},
        )
        if state.event is not None:
            self._events.record(state.event, key, reason)
        for listen in self.listeners:
            listen(StateChange(key, was, state, reason, now))

    def drop(self, key: str) -> None:
        with self._lock:
            self._status.pop(key, None)

    def shown(self, key: str) -> tuple[ServiceState, str] | None:
        """The service's state and reason now."""
        with self._lock:
            st = self._status.get(key)
            return None if st is None else (st.state, st.reason)

    def states(self) -> dict[str, ServiceState]:
        with self._lock:
            return {k: s.state for k, s in self._status.items()}

    def resized(
        self, old: Mapping[str, ServiceSpec], new: Mapping[str, ServiceSpec]
    ) -> list[tuple[str, int, int]]:
        """The services whose status says converged on a replica count the declaration
        no longer has: (name, was, is)."""
        with self._lock:
            done = {k for k, s in self._status.items() if is_converged(s)}
        return [
            (k, old[k].replicas, s.replicas)
            for k, s in sorted(new.items())
            if k in done and k in old and old[k].replicas != s.replicas
        ]

    def statuses(
        self, services: Mapping[str, ServiceSpec], paused: Set[str]
    ) -> list[ServiceStatus]:
        with self._lock:
            raw = list(self._status.values())
        return complete(raw, services, paused)


def complete(
    raw: Iterable[ServiceStatus], services: Mapping[str, ServiceSpec], paused: Set[str]
) -> list[ServiceStatus]:
    """Passes' statuses (copied) completed with what passes have not looked at yet, by
    name: a service declared since the last pass is Pending. A state is never changed
    here: `decide` chose each (a pause and a new replica count show at once, written
    by the loop when they come)."""
    out = {s.name: replace(s) for s in raw if s.name}
    for name, spec in services.items():
        st = out.get(name)
        if st is None:
            out[name] = ServiceStatus(
                name=name,
                desired=spec.replicas,
                reason="declared; not reconciled yet",
                source_file=spec.source_file,
            )
            continue
        st.source_file = st.source_file or spec.source_file
    for st in out.values():
        st.paused = st.name in paused
    return [out[k] for k in sorted(out)]


def tally(
    spec: ServiceSpec | None,
    mine: Sequence[ObservedContainer],
    available: int | None = None,
    up_to_date: int | None = None,
) -> Tally | None:
    """None when there is nothing to count (an undeclared service without containers)."""
    if spec is None and not mine:
        return None
    return Tally(
        desired=spec.replicas if spec is not None else 0,
        running=sum(1 for c in mine if c.running),
        # Every replica's, a stopped one's too (in its crash-loop backoff, its count is
        # the point); not history's, whose count its replacement carries on.
        restarts=sum(c.restarts for c in mine if c.id not in _ids(history(mine))),
        source_file=spec.source_file if spec is not None else "",
        available=available,
        up_to_date=up_to_date,
    )


def container_statuses(
    observed: Sequence[ObservedContainer], services: Mapping[str, ServiceSpec], service: str | None
) -> list[ContainerStatus]:
    out = []
    for c in sorted(observed, key=lambda c: (c.service, c.created, c.name)):
        if service is not None and c.service != service:
            continue
        spec = services.get(c.service)
        out.append(
            ContainerStatus(
                id=c.id,
                name=c.name,
                service=c.service,
                state=c.state.value,
                status=c.status,
                health=c.health,
                restarts=c.restarts,
                exit_code=c.exit_code,
                created=c.created,
                image=c.image,
                up_to_date=spec is not None and c.spec_hash == spec.spec_hash,
            )
        )
    return out


def summary(sts: Sequence[ServiceStatus], desired: DesiredState, engine_ok: bool | None) -> str:
    """One line for logs and sd_notify STATUS=: converged as the API and healerctl say
    it (`is_converged`)."""
    declared = [s for s in sts if s.name in desired.services]
    converged = sum(1 for s in declared if is_converged(s))
    containers = sum(s.running for s in sts)
    engine = {True: "ok", False: "unreachable", None: "unknown"}[engine_ok]
    errors = len(desired.errors)
    cfg = f"; {errors} config error(s)" if errors else ""
    return (
        f"{converged}/{len(declared)} services converged, "
        f"{containers} containers running; engine {engine}{cfg}"
    )


def _ids(containers: Sequence[ObservedContainer]) -> set[str]:
    return {c.id for c in containers}


__all__ = ["StatusBook", "complete", "container_statuses", "is_converged", "summary", "tally"]
