"""OBSERVE: the engine's one list, seen through what the loop remembers.

The list lags the event stream by tens of milliseconds, and some facts are not in it at
all (since when a container is dead or unhealthy, who stopped it): the loop keeps those
in a `Memory`. The functions here are pure (times are passed in, nothing is read), so
the property tests drive the loop's own observation rather than a copy of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from healerd.core.context import Recall
from healerd.core.planner import history
from healerd.model import ContainerState, EngineEvent, ObservedContainer

# Events after which the container should no longer be listed as running.
SUSPECT_ACTIONS = frozenset({"die", "pause", "oom"})
# Events that mean the container is dead for sure, even while the list (which lags the
# event by tens of milliseconds) still says running: acting on them at once saves that.
SIGKILL = frozenset({"9", "SIGKILL", "KILL"})
# Events that say someone stopped the container on purpose: no crash, no backoff.
MANUAL_ACTIONS = frozenset({"kill", "stop"})
# How long to believe an event that the list does not confirm yet.
SUSPECT_WINDOW = 2.0


@dataclass
class Memory:
    """What passes remember about containers, keyed by container id and pruned to what
    the engine still lists. Times are monotonic: a wall clock that jumps must not
    stretch a backoff or a grace. Not thread-safe: the loop holds its lock around it."""

    dead_since: dict[str, float] = field(default_factory=dict)
    unhealthy_since: dict[str, float] = field(default_factory=dict)
    first_seen: dict[str, float] = field(default_factory=dict)
    forgiven: set[str] = field(default_factory=set)
    # Containers an event said died (time, exit code), before the list says so.
    died: dict[str, tuple[float, int | None]] = field(default_factory=dict)
    # Per service: containers an event said stopped, while the list still says running.
    suspects: dict[str, dict[str, float]] = field(default_factory=dict)
    # Found stopped after an engine restart (or at healerd's start): started in place.
    engine_stopped: set[str] = field(default_factory=set)
    # Kept as history at some look (a failed container that was replaced): never taken
    # for one the engine stopped, even once its replacement is gone (docker rm -f).
    history: set[str] = field(default_factory=set)

    def recall(self, ids: set[str], offset: float) -> Recall:
        """The service's remembered times as wall-clock ones (`offset` = wall - mono)."""
        return Recall(
            unhealthy_since={i: t + offset for i, t in self.unhealthy_since.items() if i in ids},
            dead_since={i: t + offset for i, t in self.dead_since.items() if i in ids},
            forgiven=frozenset(self.forgiven & ids),
            engine_stopped=frozenset(self.engine_stopped & ids),
        )


def observe(
    mem: Memory,
    listed: Sequence[ObservedContainer],
    mono: float,
    wall: float,
    *,
    engine_back: bool = False,
    scoped: bool = False,
) -> list[ObservedContainer]:
    """Fold one list into the memory; returns the containers as the planner sees them.

    `engine_back`: the first list after a start or an outage. Whatever stopped while the
    engine was away (or restarting, or the host rebooting) is no crash.
    `scoped`: the list holds one service's containers only. What is remembered of the
    others stays; so does what is remembered of that service's containers gone since,
    until the next full list prunes it (an id is never listed again)."""
    present = {c.id for c in listed}
    if not scoped:
        for d in (mem.dead_since, mem.unhealthy_since, mem.first_seen, mem.died):
            for cid in [cid for cid in d if cid not in present]:
                del d[cid]
        mem.forgiven &= present
        mem.engine_stopped &= present
    seen = [_aged(mem, c, mono, wall) for c in listed]
    for c in seen:
        if c.running:
            mem.dead_since.pop(c.id, None)
            mem.engine_stopped.discard(c.id)
        else:
            mem.dead_since.setdefault(c.id, mono)
        if c.running and c.health == "unhealthy":
            mem.unhealthy_since.setdefault(c.id, mono)
        else:
            mem.unhealthy_since.pop(c.id, None)
    # Sticky while stopped: the replacement that made it history may go during an outage
    # (the chaos soak: docker rm -f of it, then an engine restart).
    kept = {c.id for c in seen if c.id in mem.history and not c.running}
    if scoped:
        kept |= mem.history - present
    mem.history = {c.id for c in history(seen)} | kept
    if engine_back:
        stopped = {c.id for c in seen if not c.running}
        mem.forgiven |= stopped
        # Not history: a failed container kept for its logs is never started again, even
        # if its replacement is removed later (then it is replaced, on its volumes).
        mem.engine_stopped |= stopped - mem.history
    return seen


def _aged(mem: Memory, c: ObservedContainer, mono: float, wall: float) -> ObservedContainer:
    """A container is at least as old as healerd has seen it: after the wall clock jumps
    back, its engine-stamped creation time would make it look younger (not yet up for
    min_ready_seconds) for as long as the jump."""
    seen = mem.first_seen.setdefault(c.id, mono)
    created = min(c.created, wall - (mono - seen))
    return c if created == c.created else replace(c, created=created)


def note_event(mem: Memory, event: EngineEvent, mono: float) -> None:
    """Remember what an event says about its container (the list will say it later)."""
    if not event.container_id:
        return
    if event.action == "die" or (event.action == "kill" and event.signal in SIGKILL):
        mem.died[event.container_id] = (mono, event.exit_code)
    elif event.action == "start":
        mem.died.pop(event.container_id, None)
        # Started again: a later death is its own (chaos soak seed 845508: a `docker
        # kill` right after healerd started it in place, before any list saw it run, was
        # taken for the engine's stop and started in place once more).
        mem.engine_stopped.discard(event.container_id)
    if event.action in SUSPECT_ACTIONS:
        mem.suspects.setdefault(event.service, {})[event.container_id] = mono
    if event.action in MANUAL_ACTIONS:
        mem.forgiven.add(event.container_id)


def as_dead(mem: Memory, c: ObservedContainer, mono: float) -> ObservedContainer:
    """A container an event said died (or got SIGKILL) counts as exited, even while the
    list still says running; a later `start` event, or SUSPECT_WINDOW, ends this."""
    entry = mem.died.get(c.id) if c.running else None
    if entry is None:
        return c
    died, exit_code = entry
    if mono - died > SUSPECT_WINDOW:
        del mem.died[c.id]
        return c
    # Dead since the event, for the crash backoff and the heal-latency figure.
    mem.dead_since.setdefault(c.id, died)
    return replace(c, state=ContainerState.EXITED, exit_code=exit_code)


def still_suspect(
    mem: Memory, service: str, mine: Sequence[ObservedContainer], mono: float
) -> bool:
    """True while a container that an event said stopped is still listed as running."""
    suspects = mem.suspects.get(service)
    if not suspects:
        return False
    running = {c.id for c in mine if c.running}
    for cid, seen_at in list(suspects.items()):
        if cid not in running or mono - seen_at > SUSPECT_WINDOW:
            del suspects[cid]
    if not suspects:
        del mem.suspects[service]
        return False
    return True


__all__ = [
    "SUSPECT_WINDOW",
    "Memory",
    "as_dead",
    "note_event",
    "observe",
    "still_suspect",
]
