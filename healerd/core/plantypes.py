"""What the planner takes and gives (healerd.core.planner): the pass's context, made
before the plan (remembered verdicts, the host's room, a dependency's hold), and the
plan with its counts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from healerd.core.crashloop import Replacement
from healerd.model import Action, ActionKind


@dataclass(frozen=True)
class PlanContext:
    now: float = 0.0  # wall clock, comparable with ObservedContainer.created
    hold_orphans: bool = False
    # Running containers to treat as failed (unhealthy past their grace).
    failed_running: frozenset[str] = frozenset()
    # Backoff verdicts for failed containers; a missing entry means "ready, streak 0".
    replacements: Mapping[str, Replacement] = field(default_factory=dict)
    # False while the rollout is halted, waits out update_config.delay, or the host is
    # under pressure.
    rollout_allowed: bool = True
    # How many containers the host has room for now (None: no limit), offered before
    # the plan (healerd.core.room) so that a pass plans once. A start in place takes as
    # much as a new container; one that stops an unhealthy or paused container first
    # (a swap) frees what it takes. Replacements (standing in for failed containers)
    # take the room first, then extras (scale-up, one that vanished), then surge
    # containers of a rollout. Under pressure (`extras_allowed` False) only
    # replacements start.
    room: int | None = None
    extras_allowed: bool = True
    # Why the service's creates, starts and rollout wait for a dependency ("" when they
    # need not): the plan makes none and says whether it held one back (Plan.held_back).
    hold: str = ""
    # Stopped by an engine restart, and by someone else (docker kill, docker stop): what
    # a start in place says it heals. The engine's take the slots first.
    engine_stopped: frozenset[str] = frozenset()
    stopped_outside: frozenset[str] = frozenset()
    # Failed containers of the current spec that a start in place cannot serve, with why
    # (still unhealthy after one): replaced instead.
    replace: Mapping[str, str] = field(default_factory=dict)
    # History kept per replica: failed containers that were replaced (their logs).
    history_limit: int = 1
    # Running current containers to recreate, with why: a depends_on `restart: true`
    # dependency was replaced since they were made, or the container whose network they
    # joined is gone (healerd.core.dependencies.outdated).
    recreate: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    converged: bool
    held: int = 0  # failed containers whose replacement waits for their backoff
    stale: int = 0  # alive containers with an old spec (a rollout is under way)
    available: int = 0
    alive: int = 0
    up_to_date: int = 0
    rollout_step: bool = False  # this plan starts a new batch of a rolling update
    note: str = ""
    waiting: int = 0  # creates and starts that wait: no room (PlanContext.room), or `hold`
    # Under PlanContext.hold: the plan would have acted without it (a create or start,
    # a rollout batch, a recreate), so the service waits for its dependency.
    held_back: bool = False
    finished: int = 0  # run-once containers that exited for good (healerd.core.jobs)

    @property
    def creates(self) -> int:
        return sum(1 for a in self.actions if a.kind is ActionKind.CREATE)

    @property
    def starts(self) -> int:
        return sum(1 for a in self.actions if a.kind is ActionKind.START)

    @property
    def removes(self) -> int:
        return sum(1 for a in self.actions if a.kind is ActionKind.REMOVE)


@dataclass(frozen=True)
class Offer:
    """The room offered to a pass before it plans: how many containers of its need fit
    (None: no limit), and whether extras may start (not under pressure)."""

    fits: int | None = None
    extras: bool = True


# No limit: what a pass is offered without an admission (or for a preview).
UNLIMITED = Offer()


__all__ = ["UNLIMITED", "Offer", "Plan", "PlanContext"]
