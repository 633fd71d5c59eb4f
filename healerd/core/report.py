"""What the loop tells about its work: log lines, events, counters, and the hooks that
metrics register (a Protocol, so a hook with a wrong signature fails mypy, not a pass)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from healerd.core.events import EventLog
from healerd.core.executor import ActionResult
from healerd.model import ActionKind

log = logging.getLogger("healerd.controller")


class LoopHooks(Protocol):
    """Observers of the loop (metrics). Called from worker threads; must not block."""

    def on_action(self, kind: str, service: str, ok: bool) -> None: ...
    def on_pass(self, service: str, seconds: float) -> None: ...
    def on_heal(self, service: str, latency_seconds: float, how: str) -> None: ...


@dataclass
class Stats:
    passes: int = 0
    list_calls: int = 0
    # Batches of a resync served by the list its first batch made (controller._reused).
    reused_looks: int = 0
    creates: int = 0
    removes: int = 0
    restarts: int = 0  # starts in place
    errors: int = 0


class Reporter:
    def __init__(self, events: EventLog, hooks: Sequence[LoopHooks]) -> None:
        self.events = events
        self.stats = Stats()
        self._hooks = tuple(hooks)
        self._lock = threading.Lock()

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
        log.info(
            "%s: %s %s (%s)",
            key,
            _DONE[a.kind],
            name,
            a.reason,
            extra={
                "healerd_service": key,
                "container_id": r.container_id or "",
                "container_name": name,
                "action": kind,
                "reason": a.reason,
            },
        )
        self.events.record(_DONE[a.kind], key, a.reason, name)

    def _failed(self, key: str, r: ActionResult) -> None:
        a, kind = r.action, r.action.kind.value
        # The container removed (none for a failed create).
        cid = a.container.id if a.container is not None and a.kind is not ActionKind.CREATE else ""
        log.warning(
            "%s: %s failed: %s",
            key,
            kind,
            r.error,
            extra={"healerd_service": key, "container_id": cid, "action": kind, "reason": r.error},
        )
        self.events.record("failed", key, f"{kind}: {r.error}")


_DONE = {
    ActionKind.CREATE: "created",
    ActionKind.REMOVE: "removed",
    ActionKind.START: "restarted",
    ActionKind.STOP: "stopped",
}


def _safely(fn: Callable[..., None], *args: object) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("hook %s failed", getattr(fn, "__name__", fn))


__all__ = ["LoopHooks", "Reporter", "Stats"]
