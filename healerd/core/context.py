"""Remembered times -> the planner's verdicts for one service (pure, no clock, no I/O).

The controller keeps monotonic times and converts them to wall-clock ones first; the
property tests drive this same function with a simulated clock, so they check the
loop's real rules rather than a copy of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from healerd.core.crashloop import Replacement, crash_backoff, replacement_verdict
from healerd.core.jobs import run_once
from healerd.core.planner import PlanContext
from healerd.core.readiness import min_ready_at
from healerd.core.runs import signal_name
from healerd.model import ObservedContainer, ServiceSpec


@dataclass(frozen=True)
class Recall:
    """What the loop remembers about a service, as wall-clock times."""

    unhealthy_since: Mapping[str, float] = field(default_factory=dict)
    dead_since: Mapping[str, float] = field(default_factory=dict)
    forgiven: Set[str] = frozenset()  # stopped by an operator or an engine restart
    engine_stopped: Set[str] = frozenset()  # stopped by an engine restart
    # A rolling update under way: when it last progressed and started its last batch.
    rollout: tuple[float, float] | None = None
    # Starts in place for unhealthiness since each container was last healthy.
    unhealthy_restarts: Mapping[str, int] = field(default_factory=dict)
    # Starts in place the engine refused in a row: how many, when the last, and why.
    refused: Mapping[str, tuple[int, float, str]] = field(default_factory=dict)


def plan_context(
    spec: ServiceSpec,
    mine: Sequence[ObservedContainer],
    now: float,
    recall: Recall,
    *,
    rollout_allowed: bool = True,
) -> tuple[PlanContext, list[float], str]:
    """The context to plan with, the times to look again, and the crash backoff's note
    ("back-off 20s restarting failed container ...") when a replacement waits."""
    wake: list[float] = []
    failed_running = _failed_running(spec, mine, now, recall, wake)
    replacements: dict[str, Replacement] = {}
    note, note_at = "", float("inf")
    for c in mine:
        if c.running and c.id not in failed_running:
            continue
        if c.spec_hash != spec.spec_hash:
            # Its failures say nothing of the current spec: replaced at once, new streak.
            replacements[c.id] = Replacement(ready=True, crash_streak=0)
            continue
        if not c.running:
            died = recall.dead_since.get(c.id, now)
        else:
            # Unhealthy past its grace: failed since the grace ended, not since this
            # pass (or its backoff would never end before `window`).
            died = recall.unhealthy_since.get(c.id, now) + spec.unhealthy_grace
        ready_at, streak = replacement_verdict(
            c, died, spec.restart_policy, forgiven=c.id in recall.forgiven
        )
        ready_at, died, how = _refused(c, spec, recall, ready_at, died)
        replacements[c.id] = Replacement(ready=now >= ready_at, crash_streak=streak)
        if now < ready_at:
            wake.append(ready_at)
            if ready_at < note_at:
                note_at = ready_at
                note = (
                    f"back-off {ready_at - died:.0f}s restarting failed container "
                    f"{c.name}, {how}; next try in {ready_at - now:.0f}s"
                )
    if recall.rollout is not None:
        rollout_allowed = _rollout_pacing(spec, recall.rollout, now, wake) and rollout_allowed
    wake.extend(at for c in mine if c.running and (at := min_ready_at(c, spec)) > now)
    ctx = PlanContext(
        now=now,
        failed_running=frozenset(failed_running),
        replacements=replacements,
        rollout_allowed=rollout_allowed,
        engine_stopped=frozenset(recall.engine_stopped),
        stopped_outside=frozenset(recall.forgiven - recall.engine_stopped),
        replace={
            c.id: f"{c.name} still unhealthy after a restart in place"
            for c in mine
            if c.id in failed_running and recall.unhealthy_restarts.get(c.id, 0) > 0
        },
    )
    return ctx, wake, note


def _failed_running(
    spec: ServiceSpec,
    mine: Sequence[ObservedContainer],
    now: float,
    recall: Recall,
    wake: list[float],
) -> set[str]:
    """Running containers unhealthy past their grace. Docker's on-failure and "no" never
    act on health (only an exit counts), so neither does a run-once service."""
    failed: set[str] = set()
    if run_once(spec):
        return failed
    for c in mine:
        since = recall.unhealthy_since.get(c.id)
        if c.running and since is not None:
            due = since + spec.unhealthy_grace
            if now >= due:
                failed.add(c.id)
            else:
                wake.append(due)
    return failed


def _refused(
    c: ObservedContainer, spec: ServiceSpec, recall: Recall, ready_at: float, died: float
) -> tuple[float, float, str]:
    """A start the engine refused is tried again as a crash would be, later each time:
    when, since when, and how the backoff's note says it."""
    if c.running or c.id not in recall.refused:
        return ready_at, died, _how(c)
    n, last, why = recall.refused[c.id]
    at = last + crash_backoff(spec.restart_policy).delay(n)
    if at <= ready_at:
        return ready_at, died, _how(c)
    return at, last, f"its start refused {n} time(s) in a row ({why})"


def _rollout_pacing(
    spec: ServiceSpec, rollout: tuple[float, float], now: float, wake: list[float]
) -> bool:
    """Whether the rollout may take its next step now: not past its progress deadline,
    and `update_config.delay` after its last batch. Adds when to look again to `wake`."""
    last_progress, last_batch = rollout
    deadline = last_progress + spec.update_config.progress_deadline
    next_batch = last_batch + spec.update_config.delay
    allowed = True
    if now >= deadline:
        allowed = False
    else:
        wake.append(deadline + 0.01)
    if now < next_batch:
        allowed = False
        wake.append(next_batch)
    return allowed


def _how(c: ObservedContainer) -> str:
    """`exit code 137 (SIGKILL), 4 restarts so far`: how the failed run ended."""
    if c.oom_killed:
        how = "killed by the kernel's OOM killer"
    elif c.exit_code is None:
        how = "not running"
    else:
        how = f"exit code {c.exit_code}{signal_name(c.exit_code)}"
    return f"{how}, {c.restarts} restart(s) so far"


__all__ = ["Recall", "plan_context"]
