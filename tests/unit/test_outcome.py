"""The state decision of one pass (healerd.core.outcome.decide), as a table: what the
pass found -> the state, the reason, and what the work queue does next."""

from __future__ import annotations

from dataclasses import replace

import pytest

from healerd.core.lifecycle import ServiceState as S
from healerd.core.outcome import (
    Facts,
    ImageProblem,
    ImageTrouble,
    Outcome,
    Requeue,
    Tally,
    decide,
)
from healerd.core.timings import Timings

T = Timings()  # the defaults
SUSPECT_RECHECK, RESOURCE_RECHECK = T.suspect_recheck, T.resource_recheck
DEPENDENCY_RECHECK = T.dependency_recheck
# Two replicas, both running, up to date and available.
OK = Tally(desired=2, running=2, restarts=0, available=2, up_to_date=2)
FORGET, AGAIN, LIMITED, BACKOFF, PULL = (
    Requeue.FORGET,
    Requeue.AGAIN,
    Requeue.RATE_LIMITED,
    Requeue.BACKOFF,
    Requeue.PULL_BACKOFF,
)

TABLE: list[tuple[str, Facts, Outcome]] = [
    ("the engine cannot be listed: nothing is known",
     Facts(unreachable="cannot list", retry_cap=0.1, paused=True, actions=1),
     Outcome(S.ENGINE_UNREACHABLE, "cannot list", LIMITED, cap=0.1)),
    ("the pass raised unexpectedly: the status stays",
     Facts(failed_unexpectedly=True, error="x"), Outcome(None, requeue=LIMITED)),
    ("the replica count changed since it converged",
     Facts(resized=(1, 3)), Outcome(S.PROGRESSING, "replicas changed from 1 to 3; pass pending")),
    ("a pull under way", Facts(pulling="pulling img:2"), Outcome(S.PROGRESSING, "pulling img:2")),
    ("a retry of a failed pull", Facts(pulling="pulling img:2", pull_failed="cannot pull"),
     Outcome(S.IMAGE_PULL_BACK_OFF, "pulling img:2; the last try: cannot pull")),
    ("paused wins over everything", Facts(paused=True, error="x", actions=2),
     Outcome(S.PAUSED, "paused by operator")),
    ("the pull failed: the pull backoff",
     Facts(image_problem=ImageProblem(ImageTrouble.PULL_FAILED, "no")),
     Outcome(S.IMAGE_PULL_BACK_OFF, "no", PULL)),
    ("never pull", Facts(image_problem=ImageProblem(ImageTrouble.NEVER_PULLED, "never")),
     Outcome(S.ERR_IMAGE_NEVER_PULL, "never", PULL)),
    ("no disk for the pull: a wait, no failure",
     Facts(image_problem=ImageProblem(ImageTrouble.NO_DISK, "disk")),
     Outcome(S.WAITING_FOR_RESOURCES, "disk", BACKOFF, backoff=T.pull_disk_recheck)),
    ("a failed action: rate-limited retry", Facts(actions=1, error="boom"),
     Outcome(S.DEGRADED, "boom", LIMITED)),
    ("failed while an event is unconfirmed", Facts(actions=1, error="boom", suspect=True),
     Outcome(S.DEGRADED, "boom", LIMITED, (SUSPECT_RECHECK,))),
    ("acted: look again at once", Facts(actions=2, first_action="replace x"),
     Outcome(S.PROGRESSING, "replace x", AGAIN)),
    ("acted, some creates wait for room",
     Facts(actions=1, first_action="3 wanted", wait_reason="memory"),
     Outcome(S.PROGRESSING, "3 wanted; memory", AGAIN)),
    ("acted with a timer: the timer is not needed", Facts(actions=1, first_action="a", wake_in=5),
     Outcome(S.PROGRESSING, "a", AGAIN)),
    ("waiting for a dependency", Facts(dependency_wait="waiting for db", wait_reason="memory"),
     Outcome(S.WAITING, "waiting for db", FORGET, (DEPENDENCY_RECHECK,))),
    ("acted, a dependency holds the rest",
     Facts(actions=1, first_action="a", dependency_wait="waiting for db"),
     Outcome(S.PROGRESSING, "a; waiting for db", AGAIN)),
    ("waiting for room", Facts(wait_reason="memory", wake_in=7.0),
     Outcome(S.WAITING_FOR_RESOURCES, "memory", FORGET, (7.0, RESOURCE_RECHECK))),
    ("crash-loop backoff holds a replacement", Facts(held=True, backoff_note="b", wake_in=20.0),
     Outcome(S.CRASH_LOOP_BACK_OFF, "b", FORGET, (20.0,), next_retry_in=20.0)),
    ("rollout past its deadline", Facts(halted="deadline"),
     Outcome(S.ROLLOUT_HALTED, "deadline")),
    ("orphans held while a file is broken", Facts(declared=False, note="held"),
     Outcome(S.HELD, "held")),
    ("undeclared and gone: dropped", Facts(declared=False, has_containers=False),
     Outcome(None, drop=True)),
    ("undeclared with containers left", Facts(declared=False, progress="removing"),
     Outcome(S.PROGRESSING, "removing")),
    ("converged", Facts(settled=True, tally=OK), Outcome(S.CONVERGED, tally=OK)),
    ("settled, but one replica not up to date",
     Facts(settled=True, tally=replace(OK, up_to_date=1), progress="p"),
     Outcome(S.PROGRESSING, "p", tally=replace(OK, up_to_date=1))),
    ("settled, but one replica not available",
     Facts(settled=True, tally=replace(OK, available=1), progress="p"),
     Outcome(S.PROGRESSING, "p", tally=replace(OK, available=1))),
    ("counts converged, but the plan has work left", Facts(tally=OK, progress="p"),
     Outcome(S.PROGRESSING, "p", tally=OK)),
    ("converged on a broken file", Facts(settled=True, tally=OK, file_error="bad"),
     Outcome(S.CONFIG_ERROR, "bad", tally=OK)),
    ("converged, with a readiness timer", Facts(settled=True, tally=OK, wake_in=3.0),
     Outcome(S.CONVERGED, after=(3.0,), tally=OK)),
    ("a timer in the past fires at once", Facts(progress="p", wake_in=-1.0),
     Outcome(S.PROGRESSING, "p", after=(0.0,))),
    ("waiting for readiness", Facts(progress="1/2 available", wake_in=4.0),
     Outcome(S.PROGRESSING, "1/2 available", after=(4.0,))),
    ("nothing to do, event unconfirmed", Facts(settled=True, tally=OK, suspect=True),
     Outcome(S.CONVERGED, after=(SUSPECT_RECHECK,), tally=OK)),
    ("a run-once job exited 0", Facts(job=(True, "exited with code 0")),
     Outcome(S.COMPLETED, "exited with code 0")),
    ("a run-once job failed for good", Facts(job=(False, "m exited with code 1")),
     Outcome(S.FAILED, "m exited with code 1")),
    ("a crash-loop backoff comes before a job's verdict",
     Facts(held=True, backoff_note="b", job=(False, "x")),
     Outcome(S.CRASH_LOOP_BACK_OFF, "b")),
]  # fmt: skip


@pytest.mark.parametrize(("facts", "expected"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_decide(facts: Facts, expected: Outcome) -> None:
    assert decide(facts) == expected


def test_every_state_a_pass_can_end_in_is_in_the_table() -> None:
    reached = {o.state for _, _, o in TABLE if o.state is not None}
    # Pending is the state before any pass: a status's first, never decided.
    assert reached == set(S) - {S.PENDING}


def test_states_that_wait_claim_no_room_and_backoffs_are_marked() -> None:
    assert not S.CRASH_LOOP_BACK_OFF.claims_room and S.PROGRESSING.claims_room
    assert {s for s in S if s.is_backoff} == {S.CRASH_LOOP_BACK_OFF, S.IMAGE_PULL_BACK_OFF}
    assert S.CRASH_LOOP_BACK_OFF.event == "backoff" and S.CONVERGED.event is None
