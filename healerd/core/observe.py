"""OBSERVE: the engine's one list, seen through what the loop remembers.

The list lags the event stream by tens of milliseconds, and some facts are not in it at
all (since when a container is dead or unhealthy, who stopped it): the loop keeps those
in a `Memory`. The functions here are pure (times are passed in, nothing is read), so
the property tests drive the loop's own observation rather than a copy of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from signal import Signals
from typing import TypeVar

from healerd.core.context import Recall
from healerd.core.planner import IN_PLACE, history
from healerd.core.runs import Run, after_start
from healerd.model import (
    Action,
    ContainerState,
    EngineAction,
    EngineEvent,
    Health,
    ObservedContainer,
)

# Events after which the container should no longer be listed as running.
SUSPECT_ACTIONS = frozenset({EngineAction.DIED, EngineAction.PAUSED, EngineAction.OOM})
# A KILLED event says someone stopped the container on purpose (docker kill, docker
# stop, docker rm -f): its death is no crash, no backoff. Not these signals, which by
# convention ask a program to do something else (reload, rotate, resize), not to end.
# (The STOPPED event is not needed: it comes after the death, its KILLED before.)
NOT_STOPPING = frozenset(
    {Signals.SIGHUP, Signals.SIGUSR1, Signals.SIGUSR2, Signals.SIGWINCH, Signals.SIGCONT}
)

_T = TypeVar("_T")


@dataclass
class Memory:
    """What passes remember about containers, keyed by container id and pruned to what
    the engine still lists. Times are monotonic: a wall clock that jumps must not
    stretch a backoff or a grace. Not thread-safe: the loop holds its lock around it."""

    dead_since: dict[str, float] = field(default_factory=dict)
    unhealthy_since: dict[str, float] = field(default_factory=dict)
    first_seen: dict[str, float] = field(default_factory=dict)
    # Its next death is no crash: stopped from outside, or by an engine restart; until
    # it starts again (a start in place must not forgive its later crashes).
    forgiven: set[str] = field(default_factory=set)
    # Containers an event said died (time, exit code), before the list says so.
    died: dict[str, tuple[float, int | None]] = field(default_factory=dict)
    # The exit code of each container's last death an event told of, kept past the start
    # event that ends `died`: healerd's stop and start of an unhealthy container send
    # `die` and `start` before the pass notes the restart, which must say how the run it
    # stopped ended ("exit code 3", not "stopped"). Taken by that note.
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    # Per service: containers an event said stopped, while the list still says running.
    suspects: dict[str, dict[str, float]] = field(default_factory=dict)
    # Found stopped after an engine restart (or at healerd's start): started in place.
    engine_stopped: set[str] = field(default_factory=set)
    # Kept as history at some look (a failed container that was replaced): never taken
    # for one the engine stopped, even once its replacement is gone (docker rm -f).
    history: set[str] = field(default_factory=set)
    # When a container seen before started again (a start event, or healerd's start in
    # place): its run began then, not at its creation.
    started: dict[str, float] = field(default_factory=dict)
    # The kernel's OOM killer ended its run (an `oom` event; the list does not say).
    oom: set[str] = field(default_factory=set)
    # The counts of containers restarted in place (healerd.core.runs), kept in state_dir.
    runs: dict[str, Run] = field(default_factory=dict)
    # The last container each look showed, as listed and as decorated with the above:
    # an unchanged row keeps its decorated object (healerd.engine.listing.RowCache).
    shown: dict[str, tuple[ObservedContainer, ObservedContainer]] = field(default_factory=dict)
    runs_dirty: bool = False  # `runs` changed since they were last written out
    # Containers healerd is starting in place, since when: the start is on its way
    # (healerd.core.executor.Executor.start_later), no pass plans anything more for them.
    starting: dict[str, float] = field(default_factory=dict)
    # Their rows as the start was planned: one the list no longer shows (removed while
    # its start was on its way) still counts as this replica, for the start ends in a
    # replacement (healerd.core.executor.Executor._start), not in a second one.
    start_rows: dict[str, ObservedContainer] = field(default_factory=dict)
    # Starts in place the engine refused in a row (a port taken, a runtime error): how
    # many, when the last, and the engine's words. They back off as crashes do.
    refused: dict[str, tuple[int, float, str]] = field(default_factory=dict)

    def recall(self, ids: set[str], offset: float) -> Recall:
        """The service's remembered times as wall-clock ones (`offset` = wall - mono)."""
        return Recall(
            unhealthy_since={i: t + offset for i, t in self.unhealthy_since.items() if i in ids},
            dead_since={i: t + offset for i, t in self.dead_since.items() if i in ids},
            forgiven=frozenset(self.forgiven & ids),
            engine_stopped=frozenset(self.engine_stopped & ids),
            refused={i: (n, t + offset, w) for i, (n, t, w) in self.refused.items() if i in ids},
            unhealthy_restarts={
                i: r.unhealthy_restarts
                for i, r in self.runs.items()
                if i in ids and r.unhealthy_restarts
            },
        )

    def load_runs(self, runs: Mapping[str, Run], mono: float, wall: float) -> None:
        """The runs a healerd before this one kept (its file), at start."""
        for cid, r in runs.items():
            self.runs[cid] = r
            if r.started:
                self.started[cid] = mono - max(0.0, wall - r.started)


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
        for table in (mem.dead_since, mem.unhealthy_since, mem.first_seen, mem.started):
            _prune(table, present)
        _prune(mem.died, present)
        _prune(mem.exit_codes, present)
        _prune(mem.shown, present)
        _prune(mem.refused, present)
        if _prune(mem.runs, present):
            mem.runs_dirty = True
        mem.forgiven &= present
        mem.engine_stopped &= present
        mem.oom &= present
    seen = [_shown(mem, _aged(mem, c, mono, wall), mono, wall) for c in listed]
    for c in seen:
        if c.running:
            if c.id not in mem.starting:  # a start on its way: its end reads the death (heal
                mem.dead_since.pop(c.id, None)  # latency); a list between lost it (CI storm)
            mem.engine_stopped.discard(c.id)
            mem.refused.pop(c.id, None)  # it ran again (started by hand, say): a new row
        else:
            mem.dead_since.setdefault(c.id, mono)
        if c.running and c.health == Health.UNHEALTHY:
            mem.unhealthy_since.setdefault(c.id, mono)
        else:
            mem.unhealthy_since.pop(c.id, None)
        run = mem.runs.get(c.id)
        if run is not None and run.unhealthy_restarts and c.health == Health.HEALTHY:
            mem.runs[c.id] = replace(run, unhealthy_restarts=0)  # cured in place
            mem.runs_dirty = True
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


def shown(
    mem: Memory, listed: Sequence[ObservedContainer], mono: float, wall: float
) -> list[ObservedContainer]:
    """A list as readers see it: with what the memory knows of each run (its restarts in
    place above all), as the loop's own look is (the caller holds the loop's lock)."""
    return [_shown(mem, c, mono, wall) for c in listed]


def _prune(table: dict[str, _T], present: set[str]) -> int:
    gone = [cid for cid in table if cid not in present]
    for cid in gone:
        del table[cid]
    return len(gone)


def _shown(mem: Memory, c: ObservedContainer, mono: float, wall: float) -> ObservedContainer:
    """The container with what the memory knows of its run (start, counts, OOM); the
    same object as last time while nothing of it changed."""
    run, since, oom = mem.runs.get(c.id), mem.started.get(c.id), c.id in mem.oom
    if run is None and since is None and not oom:
        mem.shown.pop(c.id, None)
        return c
    started = c.started if since is None else wall - (mono - since)
    last = mem.shown.get(c.id)
    if last is not None and last[0] is c and _same_run(last[1], run, started, oom):
        return last[1]
    out = replace(
        c,
        started=started,
        oom_killed=oom,
        crash_streak=run.streak if run is not None else c.crash_streak,
        restarts=run.restarts if run is not None else c.restarts,
    )
    mem.shown[c.id] = (c, out)
    return out


def _same_run(shown: ObservedContainer, run: Run | None, started: float, oom: bool) -> bool:
    """Whether a decorated container still says what the memory says (a start moves by
    well under a millisecond between looks only through float rounding: 1 ms is equal)."""
    counts = (run.streak, run.restarts) if run is not None else (shown.crash_streak, shown.restarts)
    return (
        abs(shown.started - started) < 0.001
        and shown.oom_killed == oom
        and (shown.crash_streak, shown.restarts) == counts
    )


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
    if event.action is EngineAction.DIED:
        # Dead for sure, even while the list (which lags the event by tens of
        # milliseconds) still says running: acting on it at once saves that. Not at a
        # SIGKILL's KILLED event: the process may not be gone yet, and a start in place
        # must come after the death (the engine holds it until the exit is handled).
        mem.died[event.container_id] = (mono, event.exit_code)
        mem.exit_codes[event.container_id] = event.exit_code
    elif event.action is EngineAction.STARTED:
        mem.died.pop(event.container_id, None)
        mem.oom.discard(event.container_id)
        # Started again: a later death is its own (chaos soak seed 845508: a `docker
        # kill` right after healerd started it in place, before any list saw it run, was
        # taken for the engine's stop and started in place once more).
        mem.engine_stopped.discard(event.container_id)
        mem.forgiven.discard(event.container_id)
        if event.container_id in mem.first_seen:  # a restart, not its first start
            mem.started[event.container_id] = mono
    elif event.action is EngineAction.OOM:
        mem.oom.add(event.container_id)
    if event.action in SUSPECT_ACTIONS:
        mem.suspects.setdefault(event.service, {})[event.container_id] = mono
    if event.action is EngineAction.KILLED and event.signal not in NOT_STOPPING:
        mem.forgiven.add(event.container_id)


def in_flight(
    mem: Memory,
    c: ObservedContainer,
    mono: float,
    on_its_way: float,
    creating: Set[str] = frozenset(),
) -> ObservedContainer:
    """A container whose start is on its way counts as running and not ready yet: the
    pass plans nothing more for it (a second start, a replacement) and does not call the
    service converged before it runs. After `on_its_way` seconds without an answer
    (Timings.start_on_its_way) it counts as what the list says. So does one healerd's
    own create is on its way to start (`creating`: names; a replacement made for a start
    in place that could not serve, while a pass for the service's news runs: chaos soak
    seed 748017 started such one in place, and counted a crash)."""
    since = mem.starting.get(c.id)
    if since is not None and mono - since > on_its_way:
        del mem.starting[c.id]
        mem.start_rows.pop(c.id, None)
        since = None
    made = c.state is ContainerState.CREATED and c.name in creating
    if c.running or not (since is not None or made):
        return c
    return replace(c, state=ContainerState.RUNNING, health=Health.STARTING, exit_code=None)


def started_since(mem: Memory, c: ObservedContainer, began: float) -> ObservedContainer:
    """A row the list showed stopped, listed before the container started again (a start
    in place that ended after the look began, its pass's worker late; a start event): it
    counts as starting, as in_flight, not as stopped once more (chaos soak seed 141384,
    after an engine restart: started in place twice 22 ms apart, a crash counted)."""
    since = mem.started.get(c.id)
    if c.running or since is None or since <= began:
        return c
    return replace(c, state=ContainerState.RUNNING, health=Health.STARTING, exit_code=None)


def unlisted_starts(
    mem: Memory, service: str, listed: Sequence[ObservedContainer], mono: float, on_its_way: float
) -> list[ObservedContainer]:
    """The service's containers whose start is on its way that the list does not show
    (removed meanwhile: `docker rm -f`), counted as starting: the start ends in their
    replacement (healerd.core.executor.Executor._start), and a pass that made one too
    made two (CI: test_ownership's replay test). Once the list shows that replacement
    (it names what it replaces), the replacement is the replica."""
    shown = {c.id for c in listed} | {c.replaces for c in listed if c.replaces}
    rows = [
        in_flight(mem, row, mono, on_its_way)
        for cid, row in list(mem.start_rows.items())
        if row.service == service and cid not in shown
    ]
    return [r for r in rows if r.id in mem.starting]


def note_started(mem: Memory, a: Action, mono: float, wall: float) -> None:
    """Healerd started `a.container` in place: it carries its counts on (its run), a new
    run began now, and its death is healed (not only once an event says so): a next
    one is dated from when it is seen."""
    c = a.container
    if c is None:
        return
    # A running one (unhealthy) was stopped by this action: its exit code is in the die
    # event of that stop, which the engine sent before the start.
    died = mem.died.get(c.id)
    told = mem.exit_codes.pop(c.id, None)
    code = c.exit_code if c.exit_code is not None else (died[1] if died is not None else told)
    mem.runs[c.id] = after_start(
        c,
        mem.runs.get(c.id),
        streak=a.crash_streak,
        why=a.reason.removeprefix(IN_PLACE),
        unhealthy=c.running,
        wall=wall,
        exit_code=code,
    )
    mem.started[c.id] = mono
    for table in (mem.died, mem.dead_since, mem.unhealthy_since):
        table.pop(c.id, None)
    mem.forgiven.discard(c.id)
    mem.engine_stopped.discard(c.id)
    mem.refused.pop(c.id, None)
    mem.runs_dirty = True


def note_refused(mem: Memory, a: Action, mono: float, why: str) -> None:
    """The engine refused healerd's start of `a.container` in place (not unreachable):
    one more in a row, its next try backed off (healerd.core.context)."""
    if a.container is not None:
        n = mem.refused.get(a.container.id, (0, mono, why))[0]
        mem.refused[a.container.id] = (n + 1, mono, why)


def as_dead(mem: Memory, c: ObservedContainer, mono: float, window: float) -> ObservedContainer:
    """A container an event said died counts as exited, even while the list still says
    running; a later `start` event, or `window` seconds (Timings.suspect_window), ends
    this."""
    entry = mem.died.get(c.id) if c.running else None
    if entry is None:
        return c
    died, exit_code = entry
    if mono - died > window:
        del mem.died[c.id]
        return c
    # Dead since the event, for the crash backoff and the heal-latency figure.
    mem.dead_since.setdefault(c.id, died)
    return replace(c, state=ContainerState.EXITED, exit_code=exit_code)


def still_suspect(
    mem: Memory, service: str, mine: Sequence[ObservedContainer], mono: float, window: float
) -> bool:
    """True while a container that an event said stopped is still listed as running
    (for at most `window` seconds, Timings.suspect_window)."""
    suspects = mem.suspects.get(service)
    if not suspects:
        return False
    running = {c.id for c in mine if c.running}
    for cid, seen_at in list(suspects.items()):
        if cid not in running or mono - seen_at > window:
            del suspects[cid]
    if not suspects:
        del mem.suspects[service]
        return False
    return True


__all__ = [
    "Memory",
    "as_dead",
    "in_flight",
    "note_event",
    "note_started",
    "observe",
    "started_since",
    "still_suspect",
    "unlisted_starts",
]
