"""What a pass concludes: the service's state and when to look again.

In the spirit of controller-runtime's `Reconcile(ctx, req) -> (Result, error)`: a
reconcile returns an `Outcome`, `decide` is the pure rule that picks it from what the
pass found, and the loop turns it into work-queue calls and a status in one place
(`healerd.core.dispatch.Dispatcher.settle`). Every state a status shows is chosen
by `decide`: the loop's own too (no list, a failed pass), and those it shows between
passes (a pull under way, a pause, a new replica count: only their state and reason
are shown, the change that brought them queued the pass).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from healerd.core.lifecycle import ServiceState
from healerd.core.status import converged_counts
from healerd.core.timings import Timings

_TIMINGS = Timings()
AGAIN = "; the last try: "  # a retry's reason: what it does, then the last failure


class Requeue(StrEnum):
    """What the work queue does with the key after the pass."""

    FORGET = "forget"  # done: the error backoff ends; timers in `after` still fire
    AGAIN = "again"  # acted: look again at once (the engine, not memory, says if it worked)
    RATE_LIMITED = "rate-limited"  # failed: per-key exponential backoff
    # The image cannot be had: the same per-key failure count as RATE_LIMITED, on
    # Timings.pull_backoff's slower curve.
    PULL_BACKOFF = "pull-backoff"
    BACKOFF = "backoff"  # a wait of its own length (`Outcome.backoff`), not counted


@dataclass(frozen=True)
class Tally:
    """The counts a status shows; None where the pass did not learn them."""

    desired: int
    running: int
    restarts: int
    source_file: str = ""
    available: int | None = None
    up_to_date: int | None = None


@dataclass(frozen=True)
class Outcome:
    # None: the status stays as it is (or goes, with `drop`).
    state: ServiceState | None
    reason: str = ""
    requeue: Requeue = Requeue.FORGET
    after: tuple[float, ...] = ()  # also look again after each of these delays
    backoff: float = 0.0  # with Requeue.BACKOFF
    cap: float | None = None  # with Requeue.RATE_LIMITED: the longest wait
    next_retry_in: float | None = None  # when a crash-loop backoff ends (status)
    drop: bool = False  # the service is gone: forget its status and memory
    tally: Tally | None = None


class ImageTrouble(StrEnum):
    """What is wrong with a service's image (healerd.core.images)."""

    NEVER_PULLED = "never-pulled"  # not present, and pull_policy never
    PULL_FAILED = "pull-failed"  # the registry refused it, or is away
    NO_DISK = "no-disk"  # the pull was refused: too little room on the engine's disk
    # A build: failed (the builder's last lines): ImagePullBackOff, retried with its backoff.
    BUILD_FAILED = "build-failed"


@dataclass(frozen=True)
class ImageProblem:
    trouble: ImageTrouble
    reason: str


@dataclass(frozen=True)
class Facts:
    """What a pass found and did, as far as the state decision needs it; and what the
    loop knows beside a pass (the first five), which passes leave at their defaults."""

    # The pass raised unexpectedly (a bug): the status stays, the pass is tried again.
    failed_unexpectedly: bool = False
    unreachable: str = ""  # why the engine cannot be listed (nothing is known)
    retry_cap: float | None = None  # with `unreachable`: the longest wait
    # The declared replica count changed (was, is) since the pass that said the service
    # converged: until the pass that change queued, it is not (`healerctl wait`).
    resized: tuple[int, int] | None = None
    pulling: str = ""  # a pull is under way in the pass (it may take minutes)
    pull_failed: str = ""  # ... a retry: the words of the last pull or build that failed
    declared: bool = True
    has_containers: bool = True
    paused: bool = False
    updating: str = ""  # held by the updater: stopped for a snapshot or a restore
    image_problem: ImageProblem | None = None  # the image cannot be had
    actions: int = 0
    first_action: str = ""  # the first action's reason
    error: str = ""  # the first failed action's error
    wait_reason: str = ""  # why some creates wait for room
    dependency_wait: str = ""  # why creates wait for a dependency (depends_on)
    wake_in: float | None = None  # the earliest timer the plan asked for
    suspect: bool = False  # an event the list does not confirm yet
    held: bool = False  # a failed container waits out its crash-loop backoff
    backoff_note: str = ""
    halted: str = ""  # why the rollout stopped
    note: str = ""  # the planner's note (orphans held)
    # The plan has nothing left to do: no action, none held, waiting or stale, every
    # replica there. Converged when the counts (`tally`) are too (converged_counts).
    settled: bool = False
    tally: Tally | None = None  # the service's counts, for the status
    file_error: str = ""  # the service's file is broken now
    progress: str = ""  # what a Progressing service waits for
    # A run-once service whose every replica finished: (all exited 0, why).
    job: tuple[bool, str] | None = None


def decide(f: Facts, t: Timings = _TIMINGS) -> Outcome:
    """The state machine of one service, in one place. `t`: when to look again."""
    return replace(_decide(f, t), tally=f.tally)


def _decide(f: Facts, t: Timings) -> Outcome:
    beside = _beside_a_pass(f)
    if beside is not None:
        return beside
    if f.paused:
        return Outcome(ServiceState.PAUSED, "paused by operator")
    if f.updating:
        return Outcome(ServiceState.PROGRESSING, f.updating)
    if f.image_problem is not None:
        return _image(f.image_problem, t)
    after: tuple[float, ...] = (t.suspect_recheck,) if f.suspect else ()
    if f.error:
        return Outcome(ServiceState.DEGRADED, f.error, Requeue.RATE_LIMITED, after)
    if f.actions:
        waits = "; ".join(w for w in (f.dependency_wait, f.wait_reason) if w)
        reason = f.first_action + (f"; {waits}" if waits else "")
        return Outcome(ServiceState.PROGRESSING, reason, Requeue.AGAIN, after)
    if f.wake_in is not None:
        after += (max(0.0, f.wake_in),)
    if f.dependency_wait:
        after += (t.dependency_recheck,)
        return Outcome(ServiceState.WAITING, f.dependency_wait, after=after)
    if f.wait_reason:
        after += (t.resource_recheck,)
        return Outcome(ServiceState.WAITING_FOR_RESOURCES, f.wait_reason, after=after)
    return _settled(f, after)


def _beside_a_pass(f: Facts) -> Outcome | None:
    """The loop's own facts: no list, a bug, a reload or a pull under way."""
    if f.failed_unexpectedly:
        return Outcome(None, requeue=Requeue.RATE_LIMITED)
    if f.unreachable:
        return Outcome(
            ServiceState.ENGINE_UNREACHABLE, f.unreachable, Requeue.RATE_LIMITED, cap=f.retry_cap
        )
    if f.resized is not None:
        was, now = f.resized
        reason = f"replicas changed from {was} to {now}; pass pending"
        return Outcome(ServiceState.PROGRESSING, reason)  # the change queued the pass
    if f.pulling and f.pull_failed:
        # A retry stays ImagePullBackOff until it works, as the kubelet's does: no flap
        # to Progressing (a state change: an event, a log line) at each retry.
        return Outcome(ServiceState.IMAGE_PULL_BACK_OFF, f"{f.pulling}{AGAIN}{f.pull_failed}")
    if f.pulling:
        return Outcome(ServiceState.PROGRESSING, f.pulling)
    return None


def _image(p: ImageProblem, t: Timings) -> Outcome:
    if p.trouble is ImageTrouble.NO_DISK:
        # No failure of the image's: it waits for room, as creates do.
        return Outcome(
            ServiceState.WAITING_FOR_RESOURCES,
            p.reason,
            Requeue.BACKOFF,
            backoff=t.pull_disk_recheck,
        )
    if p.trouble is ImageTrouble.NEVER_PULLED:
        return Outcome(ServiceState.ERR_IMAGE_NEVER_PULL, p.reason, Requeue.PULL_BACKOFF)
    return Outcome(ServiceState.IMAGE_PULL_BACK_OFF, p.reason, Requeue.PULL_BACKOFF)


def _settled(f: Facts, after: tuple[float, ...]) -> Outcome:
    """Nothing to do this pass: why not, or that all is well."""
    if f.held:
        return Outcome(
            ServiceState.CRASH_LOOP_BACK_OFF, f.backoff_note, after=after, next_retry_in=f.wake_in
        )
    if f.halted:
        return Outcome(ServiceState.ROLLOUT_HALTED, f.halted, after=after)
    if f.note:
        return Outcome(ServiceState.HELD, f.note, after=after)
    if not f.declared and not f.has_containers:
        return Outcome(None, after=after, drop=True)
    if f.job is not None:
        ok, why = f.job
        return Outcome(ServiceState.COMPLETED if ok else ServiceState.FAILED, why, after=after)
    converged = _converged(f)
    if converged and f.file_error:
        # Running as declared, but by a version of its file that is no longer there.
        return Outcome(ServiceState.CONFIG_ERROR, f.file_error, after=after)
    if converged:
        return Outcome(ServiceState.CONVERGED, after=after)
    return Outcome(ServiceState.PROGRESSING, f.progress, after=after)


def _converged(f: Facts) -> bool:
    t = f.tally
    if not f.settled or t is None or t.available is None or t.up_to_date is None:
        return False
    return converged_counts(t.desired, t.running, t.up_to_date, t.available)


__all__ = [
    "AGAIN",
    "Facts",
    "ImageProblem",
    "ImageTrouble",
    "Outcome",
    "Requeue",
    "Tally",
    "decide",
]
