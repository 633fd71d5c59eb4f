"""The planner's crash-loop part: when a failed container may be replaced, and the
crash streak its replacement carries (a `Backoff`, as every backoff of healerd's). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from healerd.core.backoff import Backoff
from healerd.model import ObservedContainer, RestartPolicy


@dataclass(frozen=True)
class Replacement:
    """What the crash-loop backoff says about one failed container."""

    ready: bool  # may be replaced now
    crash_streak: int  # the streak its replacement carries


def replacement_verdict(
    c: ObservedContainer, died_at: float, policy: RestartPolicy, *, forgiven: bool
) -> tuple[float, int]:
    """When a failed container may be replaced, and the crash streak its replacement gets.

    A container stopped by an operator (`docker kill`/`stop`) or by an engine restart is
    no crash: healed at once, streak unchanged. One whose run lasted `policy.window`
    starts a new streak. Otherwise each quick death in a row doubles the wait:
    0, delay, 2*delay, ... up to max_delay (a `Backoff`, as every backoff of healerd's);
    it never gives up.
    """
    if forgiven:
        return died_at, c.crash_streak
    if died_at - c.run_started >= policy.window:
        return died_at, 1
    streak = c.crash_streak
    return died_at + crash_backoff(policy).delay(streak), streak + 1


def crash_backoff(policy: RestartPolicy) -> Backoff:
    """restart_policy's crash-loop backoff: `delay` doubling up to `max_delay`."""
    return Backoff(policy.delay, policy.max_delay)


# A failed container without a verdict: ready now, streak 0.
READY = Replacement(ready=True, crash_streak=0)

__all__ = ["READY", "Replacement", "crash_backoff", "replacement_verdict"]
