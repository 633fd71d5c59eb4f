"""One convergence rule (issue 30, point 3): `decide` says Converged by the same counts
`is_converged` reads a status by, and the summary line (the log, sd_notify STATUS=,
`systemctl status`) counts exactly what `is_converged` counts, as the API, healerctl and
the metrics do."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from healerd.config import DesiredState
from healerd.core.clock import FakeClock
from healerd.core.events import EventLog
from healerd.core.lifecycle import ServiceState
from healerd.core.outcome import Facts, Tally, decide
from healerd.core.readmodel import StatusBook, summary
from healerd.core.status import ServiceStatus, is_converged
from tests.unit.harness.builders import spec


def declared(*names: str) -> DesiredState:
    return DesiredState({n: spec(n) for n in names}, (), hold_orphans=False, broken_files=())


def test_a_finished_run_once_job_counts_as_converged_in_the_summary() -> None:
    job = ServiceStatus("job", desired=1, state=ServiceState.COMPLETED)
    assert is_converged(job)
    assert summary([job], declared("job"), True).startswith("1/1 services converged")


def test_a_converged_state_short_of_up_to_date_replicas_is_not_counted() -> None:
    st_ = ServiceStatus(
        "web", desired=2, running=2, available=2, up_to_date=1, state=ServiceState.CONVERGED
    )
    assert not is_converged(st_)
    assert summary([st_], declared("web"), True).startswith("0/1 services converged")


STATES = st.sampled_from(list(ServiceState))
COUNT = st.integers(0, 3)


@given(st.lists(st.tuples(STATES, COUNT, COUNT, COUNT, COUNT, st.booleans()), max_size=6))
def test_the_summary_counts_what_is_converged_counts(
    rows: list[tuple[ServiceState, int, int, int, int, bool]],
) -> None:
    sts = [
        ServiceStatus(f"s{i}", desired=d, running=r, available=a, up_to_date=u, state=s, paused=p)
        for i, (s, d, r, a, u, p) in enumerate(rows)
    ]
    converged = sum(1 for s in sts if is_converged(s))
    line = summary(sts, declared(*(s.name for s in sts)), True)
    assert line.startswith(f"{converged}/{len(sts)} services converged")


@given(COUNT, COUNT, COUNT, COUNT, st.booleans())
def test_decide_says_converged_exactly_when_the_status_it_leaves_is_converged(
    desired: int, running: int, available: int, up_to_date: int, settled: bool
) -> None:
    """A pass with nothing left to do: Converged if and only if the status it writes
    (through the status book, as the loop does) reads as converged."""
    t = Tally(desired, running, 0, available=available, up_to_date=up_to_date)
    outcome = decide(Facts(settled=settled, tally=t))
    assert outcome.state is not None
    book = StatusBook(FakeClock(), EventLog(FakeClock()))
    book.set("web", outcome.state, outcome.reason, tally=outcome.tally)
    (status,) = book.statuses({}, set())
    assert (outcome.state is ServiceState.CONVERGED) == is_converged(status)
    assert (outcome.state is ServiceState.CONVERGED) == (settled and is_converged(status))
