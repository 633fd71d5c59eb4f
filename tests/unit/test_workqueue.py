"""Behaviour of the keyed work queue, named like client-go's tests. No sleeps: a fake clock."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.workqueue import WorkQueue


def new_queue(base: float = 1.0, cap: float = 16.0) -> tuple[WorkQueue, FakeClock]:
    clock = FakeClock()
    return WorkQueue(clock, Backoff(base, cap)), clock


def test_burst_of_adds_collapses_into_one_pass() -> None:
    q, _ = new_queue()
    for _ in range(50):
        q.add("web")
    assert q.get_batch(10, timeout=0) == ["web"]
    assert q.get_batch(10, timeout=0) == []


def test_add_while_processing_requeues_once_after_done() -> None:
    q, _ = new_queue()
    q.add("web")
    assert q.get_batch(10, timeout=0) == ["web"]
    q.add("web")
    q.add("web")
    # Not handed out again while processing.
    assert q.get_batch(10, timeout=0) == []
    q.done("web")
    assert q.get_batch(10, timeout=0) == ["web"]
    q.done("web")
    assert q.get_batch(10, timeout=0) == []


def test_batch_respects_max_items_and_order() -> None:
    q, _ = new_queue()
    for k in "abcde":
        q.add(k)
    assert q.get_batch(2, timeout=0) == ["a", "b"]
    assert q.get_batch(10, timeout=0) == ["c", "d", "e"]


def test_rate_limited_backoff_doubles_and_caps_and_never_gives_up() -> None:
    q, clock = new_queue(base=1.0, cap=16.0)
    delays = []
    for _ in range(10):
        delays.append(q.add_rate_limited("web"))
        assert q.get_batch(1, timeout=0) == []
        clock.advance(delays[-1])
        assert q.get_batch(1, timeout=0) == ["web"]
        q.done("web")
    assert delays == [1, 2, 4, 8, 16, 16, 16, 16, 16, 16]
    assert q.failures("web") == 10


def test_forget_resets_backoff() -> None:
    q, _ = new_queue()
    q.add_rate_limited("web")
    q.add_rate_limited("web")
    q.forget("web")
    assert q.add_rate_limited("web") == 1.0


def test_event_hint_does_not_cut_a_backoff_short() -> None:
    q, clock = new_queue(base=4.0)
    q.add_rate_limited("web")
    q.add("web")
    assert q.get_batch(1, timeout=0) == []
    clock.advance(4.0)
    assert q.get_batch(1, timeout=0) == ["web"]


def test_forced_add_clears_backoff() -> None:
    q, _ = new_queue(base=4.0)
    q.add_rate_limited("web")
    q.add("web", force=True)
    assert q.get_batch(1, timeout=0) == ["web"]
    assert q.failures("web") == 0


def test_add_after_keeps_the_earliest_time() -> None:
    q, clock = new_queue()
    q.add_after("web", 10)
    q.add_after("web", 3)
    q.add_after("web", 7)
    clock.advance(3)
    assert q.get_batch(1, timeout=0) == ["web"]
    q.done("web")
    clock.advance(10)
    assert q.get_batch(1, timeout=0) == []


def test_shutdown_wakes_a_blocked_getter() -> None:
    q, _ = new_queue()
    got: list[list[str]] = []
    t = threading.Thread(target=lambda: got.append(q.get_batch(1, timeout=None)))
    t.start()
    q.shut_down()
    t.join(timeout=5)
    assert not t.is_alive() and got == [[]]


def test_a_key_is_never_handed_to_two_workers_at_once() -> None:
    q, _ = new_queue()
    active: set[str] = set()
    lock = threading.Lock()
    violations: list[str] = []
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            for key in q.get_batch(2, timeout=0.01):
                with lock:
                    if key in active:
                        violations.append(key)
                    active.add(key)
                q.add(key)  # an event while processing
                with lock:
                    active.discard(key)
                q.done(key)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(2000):
        q.add(f"k{i % 5}")
    stop.set()
    for t in threads:
        t.join(timeout=10)
    assert violations == []


ops = st.lists(
    st.tuples(st.sampled_from(["add", "get", "done", "fail"]), st.sampled_from("abc")),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_model_no_key_is_lost_or_duplicated(seq) -> None:  # type: ignore[no-untyped-def]
    q, clock = new_queue(base=0.5, cap=1.0)
    processing: set[str] = set()
    for op, key in seq:
        if op == "add":
            q.add(key)
        elif op == "get":
            got = q.get_batch(3, timeout=0)
            assert len(got) == len(set(got))
            assert not set(got) & processing
            processing |= set(got)
        elif op == "done" and key in processing:
            processing.discard(key)
            q.done(key)
        elif op == "fail" and key in processing:
            processing.discard(key)
            q.add_rate_limited(key)
            q.done(key)
    # Everything added eventually comes out once processing ends and timers fire.
    for key in list(processing):
        q.done(key)
    clock.advance(10)
    drained = q.get_batch(10, timeout=0)
    assert len(drained) == len(set(drained))


def test_a_hint_during_a_pass_that_ends_in_a_backoff_waits_for_the_backoff() -> None:
    # A pull that fails after a minute: the resync that came meanwhile must not make the
    # first retry immediate (issue 17, point 5).
    q, clock = new_queue()
    q.add("web")
    assert q.get_batch(10, timeout=0) == ["web"]
    q.add("web")  # the resync, while the pull runs
    q.add_backoff("web", 2.0)
    q.done("web")
    assert q.get_batch(10, timeout=0) == []
    clock.advance(2.0)
    assert q.get_batch(10, timeout=0) == ["web"]


def test_a_forced_add_during_a_pass_that_ends_in_a_backoff_runs_at_once() -> None:
    q, _ = new_queue()
    q.add("web")
    assert q.get_batch(10, timeout=0) == ["web"]
    q.add("web", force=True)  # new credentials, a reload: retry now
    q.add_backoff("web", 2.0)
    q.done("web")
    assert q.get_batch(10, timeout=0) == ["web"]


def test_queued_before_tells_whether_a_look_saw_every_cause_of_a_key() -> None:
    q, clock = new_queue()
    q.add("a")
    q.add("b")
    clock.advance(0.1)
    look = clock.monotonic()  # a list begun now sees what a and b were queued for
    assert q.queued_before(["a", "b"], look)
    clock.advance(0.1)
    q.add("b")  # a later event: the look is older than this cause
    assert q.queued_before(["a"], look)
    assert not q.queued_before(["a", "b"], look)
    assert not q.queued_before(["b"], clock.monotonic())  # strictly before, not at


def test_a_key_requeued_at_done_is_stamped_then_not_at_its_add() -> None:
    # Added during its pass, queued again at done: a look begun during the pass saw a
    # half-done state, so it must not serve the next pass.
    q, clock = new_queue()
    q.add("a")
    assert q.get_batch(1, timeout=0) == ["a"]
    q.add("a")
    clock.advance(0.1)
    during = clock.monotonic()
    clock.advance(0.1)
    q.done("a")
    assert not q.queued_before(["a"], during)
    assert q.queued_before(["a"], clock.monotonic() + 0.01)
