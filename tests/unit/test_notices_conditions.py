"""The notice book's conditions (issue 32): one "recovered" per recovery, a removed
service's conditions forgotten, a removed broken file, host pressure holding a
service, and the reasons a crash loop and an update carry (from the loop's own code)."""

from __future__ import annotations

import dataclasses

from healerd.config import ConfigError, DesiredState, FileResult
from healerd.config.desired import DesiredStore
from healerd.core.context import Recall, plan_context
from healerd.core.events import Event
from healerd.core.lifecycle import ServiceState
from healerd.core.notices import Notice, NoticeBook, StateChange
from healerd.model import ContainerState, RestartPolicy
from healerd.vocabulary import EventKind, NoticeKind
from tests.unit.harness.builders import container, spec
from tests.unit.harness.loop import desired, drive, make

CRASH = ServiceState.CRASH_LOOP_BACK_OFF
DEGRADED = ServiceState.DEGRADED
UP = ServiceState.CONVERGED
PROG = ServiceState.PROGRESSING
WAITING = ServiceState.WAITING_FOR_RESOURCES


def change(
    new: ServiceState, at: float, old: ServiceState | None = PROG, svc: str = "db"
) -> StateChange:
    return StateChange(svc, old, new, f"reason {new}", at)


# -- one recovery per recovery ----------------------------------------------------------


def test_a_crash_loop_then_degraded_recovers_in_one_message_from_the_first() -> None:
    book = NoticeBook(settle=30)
    assert [n.kind for n in book.state(change(CRASH, 100))] == [NoticeKind.CRASH_LOOP]
    assert [n.kind for n in book.state(change(DEGRADED, 150))] == [NoticeKind.FAILED]
    assert book.state(change(UP, 200)) == []
    assert book.tick(229) == []
    (done,) = book.tick(230)
    assert done.kind is NoticeKind.RECOVERED and done.title == "db: recovered"
    # What ended, and the downtime from the first condition (100 to 200).
    assert done.detail == "runs as declared again; it was CrashLoopBackOff, then Degraded for 1m40s"
    assert book.tick(10_000) == []


def test_a_crash_loop_is_not_over_while_the_service_is_in_trouble_again() -> None:
    book = NoticeBook(settle=30)
    book.state(change(CRASH, 100))
    book.state(change(UP, 120))  # a moment as declared between two troubles
    book.state(change(DEGRADED, 130))
    assert book.tick(1000) == []  # still Degraded: nothing is over
    book.state(change(UP, 2000))
    assert [n.kind for n in book.tick(2030)] == [NoticeKind.RECOVERED]


# -- a service no longer declared ----------------------------------------------------------


def test_a_removed_service_s_conditions_are_forgotten() -> None:
    book = NoticeBook(settle=30)
    book.state(change(CRASH, 100))
    book.state(change(WAITING, 101, svc="web"))
    book.keep_only({"web"})
    assert not book.is_open("db", NoticeKind.CRASH_LOOP)
    assert book.is_open("web", NoticeKind.PRESSURE)
    # Declared again: its crash loop is a new one, told; a service that converges is
    # not "recovered" from a condition of its earlier life.
    assert [n.kind for n in book.state(change(CRASH, 500, old=None))] == [NoticeKind.CRASH_LOOP]
    book.keep_only(set())
    book.state(change(UP, 600, old=None))
    assert book.tick(10_000) == []


def test_a_first_state_forgets_what_an_earlier_life_of_the_name_left_open() -> None:
    book = NoticeBook(settle=30)
    book.state(change(CRASH, 100))
    # The status book dropped the service at its removal: its next state is a first.
    assert [n.kind for n in book.state(change(CRASH, 300, old=None))] == [NoticeKind.CRASH_LOOP]
    book.state(change(PROG, 400, old=None))
    book.state(change(UP, 401))
    assert book.tick(10_000) == []


def test_a_service_removed_in_a_crash_loop_and_declared_again_through_the_loop() -> None:
    book = NoticeBook(settle=30)
    ctrl, engine, clock = make()
    told: list[str] = []
    ctrl.state_listeners.append(
        lambda c: told.extend(f"{n.kind}:{n.service}" for n in book.state(c))
    )
    crashy = spec("db", image="crash:1", restart_policy=RestartPolicy(delay=1.0, max_delay=4.0))
    engine.crash_images.add("crash:1")
    ctrl.set_desired(desired(crashy))
    drive(ctrl, clock, max_seconds=20)
    assert told == ["crash-loop:db"]
    ctrl.set_desired(desired())
    drive(ctrl, clock, max_seconds=20)
    # Declared again, crash-looping again: told again.
    ctrl.set_desired(desired(crashy))
    drive(ctrl, clock, max_seconds=20)
    assert told == ["crash-loop:db", "crash-loop:db"]
    ctrl.set_desired(desired())
    drive(ctrl, clock, max_seconds=20)
    # Declared again, and it converges: no "recovered" counting the time it was gone.
    ctrl.set_desired(desired(spec("db")))
    drive(ctrl, clock, max_seconds=60)
    assert book.tick(clock.time() + 1000) == []
    assert told == ["crash-loop:db", "crash-loop:db"]


# -- a broken file that is removed ----------------------------------------------------------


def test_a_broken_file_deleted_is_told_as_removed_not_as_reading_cleanly() -> None:
    file = "/etc/healerd/conf.d/a.yaml"
    store = DesiredStore()
    err = ConfigError(file, 3, "services.web.ports[0]", "bad")
    broken = store.update([FileResult(file, None, (err,))])
    gone = store.update([])
    assert broken.files == frozenset({file}) and gone.files == frozenset()
    ctrl, _engine, _clock = make()
    book = NoticeBook()
    told: list[Notice] = []
    ctrl.events.listeners.append(lambda e: told.extend(book.event(e)))
    ctrl.set_desired(broken)
    ctrl.set_desired(gone)
    refused, removed = told
    assert refused.title == f"{file}: refused"
    assert removed.title == f"{file}: removed" and "reads cleanly" not in removed.detail
    assert "removed" in removed.detail and "it was broken for" in removed.detail
    (fixed_event,) = [e for e in ctrl.events.since(0) if e.kind is EventKind.CONFIG_FIXED]
    assert "reads cleanly" not in fixed_event.message


def test_a_broken_file_fixed_still_reads_cleanly_again() -> None:
    file = "/etc/healerd/conf.d/a.yaml"
    ctrl, _engine, _clock = make()
    book = NoticeBook()
    told: list[Notice] = []
    ctrl.events.listeners.append(lambda e: told.extend(book.event(e)))
    err = ConfigError(file, 3, "services.web.ports[0]", "bad")
    ctrl.set_desired(DesiredState({}, (err,), False, (file,), frozenset({file})))
    ctrl.set_desired(DesiredState({}, (), False, (), frozenset({file})))
    _, fixed = told
    assert fixed.title == f"{file}: fixed" and "reads cleanly again" in fixed.detail


# -- host pressure holding a service --------------------------------------------------------


def test_a_service_held_by_host_pressure_is_told_and_so_is_the_end_of_it() -> None:
    book = NoticeBook(settle=30)
    why = "needs 64Mi; 10Mi available above pressure_memory_available"
    (held,) = book.state(StateChange("db", PROG, WAITING, why, 100))
    assert held.kind is NoticeKind.PRESSURE and held.title == "db: held back by host pressure"
    assert held.detail == why and held.service == "db"
    assert book.state(StateChange("db", WAITING, WAITING, why, 110)) == []
    book.state(change(PROG, 160))
    book.state(change(UP, 190))
    assert book.tick(219) == []
    (over,) = book.tick(220)
    assert over.kind is NoticeKind.PRESSURE and over.title == "db: no longer held back"
    assert over.detail == "held back for 1m30s"


# -- what a crash loop's notice says: the loop's own words ----------------------------------


def _backoff_note(exit_code: int, oom: bool) -> str:
    s = spec("db", restart_policy=RestartPolicy(delay=10.0, max_delay=60.0, window=600.0))
    dead = dataclasses.replace(
        container(s, ContainerState.EXITED),
        exit_code=exit_code,
        oom_killed=oom,
        restarts=4,
        crash_streak=3,
        started=995.0,  # a quick death: within the window
    )
    _, _, note = plan_context(s, [dead], 1001.0, Recall(dead_since={dead.id: 1000.0}))
    return note


def test_a_crash_loop_of_an_oom_kill_says_so() -> None:
    note = _backoff_note(137, oom=True)
    (n,) = NoticeBook().state(StateChange("db", PROG, CRASH, note, 1001.0))
    assert n.kind is NoticeKind.CRASH_LOOP
    assert "killed by the kernel's OOM killer" in n.detail and "4 restart(s) so far" in n.detail
    assert "next try in" in n.detail


def test_a_crash_loop_of_a_death_by_signal_names_the_signal() -> None:
    note = _backoff_note(137, oom=False)
    (n,) = NoticeBook().state(StateChange("db", PROG, CRASH, note, 1001.0))
    assert "exit code 137 (SIGKILL)" in n.detail and "OOM" not in n.detail
    assert "exit code 143 (SIGTERM)" in _backoff_note(143, oom=False)


# -- updates held and found ---------------------------------------------------------------


def test_an_update_held_or_only_found_is_an_update_notice_with_its_reason() -> None:
    from healerd.config import parse_service_text
    from healerd.core.updatewaits import LOCK, WINDOW, Gate, waits
    from healerd.vocabulary import AutoUpdate

    text = (
        "services:\n  web:\n    image: reg.example/web:1\n"
        "    x-healerd: {auto_update: registry, update_window: 'Sun 02:00-03:00', "
        "update_lock: /run/busy}\n"
    )
    parsed = parse_service_text(text, "/etc/healerd/conf.d/web.yaml")
    assert parsed.services is not None, parsed.errors
    web = parsed.services["web"]
    new, old = "sha256:" + "b" * 64, "sha256:" + "a" * 64
    monday_noon = 1_767_614_400.0  # 2026-01-05 12:00 UTC: the window is shut
    window = waits(Gate(), web, old, new, frozenset(), monday_noon)
    assert window is not None and window.kind == WINDOW
    lock = waits(
        Gate(lock_holder=lambda s: ("web-1", 0.0)),
        dataclasses.replace(web, update_policy=dataclasses.replace(web.update_policy, windows=())),
        old,
        new,
        frozenset(),
        monday_noon,
    )
    assert lock is not None and lock.kind == LOCK
    notify_only = dataclasses.replace(web, auto_update=AutoUpdate.NOTIFY)
    available = waits(Gate(), notify_only, old, new, frozenset(), monday_noon)
    assert available is not None
    book = NoticeBook()
    for kind, wait, title in (
        (EventKind.IMAGE_UPDATE_HELD, window, "web: image update waits"),
        (EventKind.IMAGE_UPDATE_HELD, lock, "web: image update waits"),
        (EventKind.IMAGE_UPDATE_AVAILABLE, available, "web: image update available"),
    ):
        (n,) = book.event(Event(1, 5.0, kind, "web", wait.text))
        assert n.kind is NoticeKind.UPDATE and n.title == title and n.detail == wait.text
    assert "update window" in window.text and "held by web-1" in lock.text
    assert "not rolled out" in available.text
