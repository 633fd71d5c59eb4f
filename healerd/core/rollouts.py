"""The record of a rolling update under way: for pacing batches (`update_config.delay`)
and for the progress deadline. Pure: times are passed in (monotonic), so the property
tests track rollouts with the loop's own rules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from healerd.core.readiness import available
from healerd.model import ObservedContainer, ServiceSpec
from healerd.vocabulary import EventKind


@dataclass
class Rollout:
    spec_hash: str
    started: float
    last_progress: float
    best: int  # the most new-spec containers seen available so far
    last_batch: float = float("-inf")


def track(
    r: Rollout | None,
    spec: ServiceSpec | None,
    mine: Sequence[ObservedContainer],
    now: float,
    mono: float,
) -> tuple[Rollout | None, EventKind | None]:
    """Start, advance or finish the record; returns it (None when no rollout is under
    way) and the event kind to record (None if none). `now` is the wall clock the
    containers' ages are read with, `mono` what the record keeps."""
    if spec is None:
        return None, None
    stale = [c for c in mine if c.running and c.spec_hash != spec.spec_hash]
    if not stale:
        return None, (EventKind.ROLLOUT_COMPLETE if r is not None else None)
    ready = sum(1 for c in mine if c.spec_hash == spec.spec_hash and available(c, spec, now))
    if r is None or r.spec_hash != spec.spec_hash:
        return Rollout(spec.spec_hash, mono, mono, ready), EventKind.ROLLOUT_STARTED
    if ready > r.best:
        r.best, r.last_progress = ready, mono
    return r, None


def halted(r: Rollout | None, spec: ServiceSpec | None, mono: float) -> str:
    """Why the rollout stopped ("" while it may go on)."""
    if r is None or spec is None:
        return ""
    deadline = spec.update_config.progress_deadline
    if mono - r.last_progress < deadline:
        return ""
    return (
        f"no new container became available for {deadline:.0f}s (progress deadline); "
        "the old containers keep serving"
    )


def stale_count(spec: ServiceSpec, mine: Sequence[ObservedContainer]) -> int:
    return sum(1 for c in mine if c.running and c.spec_hash != spec.spec_hash)


__all__ = ["Rollout", "halted", "stale_count", "track"]
