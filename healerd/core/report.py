"""What the loop tells about its work: log lines, events, counters, and the hooks that
metrics register (a Protocol, so a hook with a wrong signature fails mypy, not a pass)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from healerd.config.masking import mask_free, shown
from healerd.core.clock import Clock, SystemClock
from healerd.core.events import EventLog
from healerd.core.executor import ActionResult
from healerd.core.ratelog import LOOP_KINDS, LOOP_WINDOW, RateLimitedLog
from healerd.model import Action, ActionKind
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.controller")

# How many removed-by-someone-else ids are remembered, and for how long at least.
GONE_KEPT = 1024
GONE_FOR = 600.0
# The kind of every line that says the engine could not be reached.
UNREACHABLE = "engine-unreachable"


class LoopHooks(Protocol):
    """Observers of the loop (metrics). Called from worker threads; must not block."""

    def on_action(self, kind: str, service: str, ok: bool) -> None: ...
    def on_pass(self, service: str, seconds: float) -> None: ...
    def on_heal(self, service: str, latency_seconds: float, how: str) -> None: ...


@dataclass
class Stats:
    passes: int = 0
    list_calls: int = 0
    # Batches of a resync served by the list its first batch made (looks.Looks.reused).
    reused_looks: int = 0
    creates: int = 0
    removes: int = 0
    restarts: int = 0  # starts in place
    errors: int = 0


class Reporter:
    def __init__(
        self, events: EventLog, hooks: Sequence[LoopHooks], clock: Clock | None = None
    ) -> None:
        self.events = events
        self.stats = Stats()
        self._hooks = tuple(hooks)
        self._lock = threading.Lock()
        self._clock = clock or SystemClock()
        # Containers someone else removed (docker rm -f), by id: when it was seen.
        self._gone: dict[str, float] = {}
        # A failed action's line: the first at once, then one per window per service and
        # kind of action with a count; while the engine cannot be reached, one for all
        # (its absence is the news, said by EngineHealth).
        self.quiet = RateLimitedLog(
            log, LOOP_WINDOW, max_kinds=LOOP_KINDS, clock=self._clock.monotonic
        )

    def gone(self, service: str, container_id: str, name: str, *, known: bool) -> None:
        """The engine destroyed a container healerd did not remove. `known`: one the
        loop has listed (not an unverified look-alike): said in the log and the events.
        A replacement planned before the news came says so too (`_reason`)."""
        now = self._clock.monotonic()
        with self._lock:
            if len(self._gone) >= GONE_KEPT:
                for cid in [c for c, t in self._gone.items() if now - t > GONE_FOR]:
                    del self._gone[cid]
            if len(self._gone) < GONE_KEPT:
                self._gone[container_id] = now
        if not known:
            return
        name = name or container_id[:12]
        message = f"{name} was removed, not by healerd (docker rm -f or another client)"
        log.info(
            "%s: %s",
            service,
            message,
            extra={"healerd_service": service, "container_id": container_id, "action": "gone"},
        )
        self.events.record(EventKind.GONE, service, message, name)

    def _reason(self, a: Action) -> str:
        """The action's reason, unless its container was removed by someone else since
        the plan (a `docker rm -f` sends kill, die, then destroy: a pass between the
        die and the destroy replaces a container it took for exited)."""
        c = a.container
        if a.kind is not ActionKind.CREATE or c is None:
            return a.reason
        with self._lock:
            removed = c.id in self._gone
        return f"replace {c.name}: it was removed (not by healerd)" if removed else a.reason

    def count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    def passed(self, key: str, seconds: float) -> None:
        for h in self._hooks:
            _safely(h.on_pass, key, seconds)

    def healed(self, key: str, latency: float, how: str) -> None:
        """A replica healed (`how`: "in-place" or "replaced"), `latency` after its loss."""
        for h in self._hooks:
            _safely(h.on_heal, key, latency, how)

    def results(self, key: str, results: Sequence[ActionResult]) -> None:
        """A log line and an event per action (one per heal: the stop before a start in
        place says nothing of its own), counters and hooks."""
        started = {
            r.action.container.id
            for r in results
            if r.ok and r.action.kind is ActionKind.START and r.action.container is not None
        }
        for r in results:
            kind = r.action.kind.value
            if not r.ok:
                self._failed(key, r)
            elif not (
                r.action.kind is ActionKind.STOP
                and r.action.container is not None
                and r.action.container.id in started
            ):
                self._done(key, r)
            for h in self._hooks:
                _safely(h.on_action, kind, key, r.ok)
        with self._lock:
            for r in results:
                if not r.ok:
                    self.stats.errors += 1
                elif r.action.kind is ActionKind.CREATE:
                    self.stats.creates += 1
                elif r.action.kind is ActionKind.START:
                    self.stats.restarts += 1
                else:
                    self.stats.removes += 1

    def _done(self, key: str, r: ActionResult) -> None:
        a, kind = r.action, r.action.kind.value
        name = r.container_name or r.container_id or ""
        reason = self._reason(a)
        log.info(
            "%s: %s %s (%s)",
            key,
            _DONE[a.kind],
            name,
            reason,
            extra={
                "healerd_service": key,
                "container_id": r.container_id or "",
                "container_name": name,
                "action": kind,
                "reason": reason,
            },
        )
        self.events.record(_DONE[a.kind], key, reason, name)

    def _failed(self, key: str, r: ActionResult) -> None:
        a, kind = r.action, r.action.kind.value
        # The container removed (none for a failed create).
        cid = a.container.id if a.container is not None and a.kind is not ActionKind.CREATE else ""
        # The engine's words may quote the command, with values from a ${VAR} in it: the
        # journal masks them as every view does (healerd.config.masking).
        error = mask_free(r.error or "", shown(a.spec))
        self.quiet.warning(
            UNREACHABLE if r.unreachable else f"failed:{key}:{kind}",
            "%s: %s failed: %s",
            key,
            kind,
            error,
            extra={"healerd_service": key, "container_id": cid, "action": kind, "reason": error},
        )
        self.events.record(EventKind.FAILED, key, f"{kind}: {error}")

    def retrying(self, key: str, exc: Exception, *, unreachable: bool) -> None:
        """The engine failed a pass after its list: an ordinary retry, said rarely."""
        kind = UNREACHABLE if unreachable else f"retry:{key}"
        self.quiet.warning(kind, "%s: %s; retrying", key or "<discover>", exc)


_DONE = {
    ActionKind.CREATE: EventKind.CREATED,
    ActionKind.REMOVE: EventKind.REMOVED,
    ActionKind.START: EventKind.RESTARTED,
    ActionKind.STOP: EventKind.STOPPED,
}


def _safely(fn: Callable[..., None], *args: object) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("hook %s failed", getattr(fn, "__name__", fn))


__all__ = ["UNREACHABLE", "LoopHooks", "Reporter", "Stats"]
