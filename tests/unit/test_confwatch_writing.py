"""The watcher applies a file when its writer is done: close-write or a rename, not a write.

The rules on their own (Writers, poll_step) run on a fake clock; the watcher's thread runs
on real directories with real inotify (the ctypes binding) or polling.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.daemon import confwatch
from healerd.daemon.confwatch import MODE_ENV, WRITE_BOUND, ConfigWatcher, Writers
from healerd.daemon.inotify import (
    IN_ATTRIB,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_MODIFY,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    Inotify,
)
from tests.unit.harness.confwatch import GOOD, Calls, Clock, settle, wait_until

# -- the rules, on a fake clock ---------------------------------------------------------


def test_a_write_holds_the_file_and_its_close_applies_it(tmp_path: Path) -> None:
    w = Writers(clock=Clock())
    path = tmp_path / "a.yaml"
    assert w.on_event(path, IN_MODIFY) is False  # no reload for a write
    assert w.writing() == {path}
    assert w.on_event(path, IN_MODIFY) is False
    assert w.on_event(path, IN_ATTRIB) is True  # a chmod reloads; the reload keeps the file
    assert w.writing() == {path}
    assert w.on_event(path, IN_CLOSE_WRITE) is True
    assert w.writing() == frozenset()


@pytest.mark.parametrize("mask", [IN_MOVED_TO, IN_MOVED_FROM, IN_DELETE])
def test_a_rename_onto_or_away_and_a_delete_apply_and_end_the_write(
    tmp_path: Path, mask: int
) -> None:
    w = Writers(clock=Clock())
    path = tmp_path / "a.yaml"
    w.on_event(path, IN_MODIFY)
    assert w.on_event(path, mask) is True
    assert w.writing() == frozenset()


def test_a_new_regular_file_is_being_written_a_link_is_complete(tmp_path: Path) -> None:
    w = Writers(clock=Clock())
    (tmp_path / "new.yaml").write_text(GOOD)
    assert w.on_event(tmp_path / "new.yaml", IN_CREATE) is False
    assert w.writing() == {tmp_path / "new.yaml"}
    (tmp_path / "target").write_text(GOOD)
    os.symlink(tmp_path / "target", tmp_path / "sym.yaml")
    assert w.on_event(tmp_path / "sym.yaml", IN_CREATE) is True
    os.link(tmp_path / "target", tmp_path / "hard.yaml")
    assert w.on_event(tmp_path / "hard.yaml", IN_CREATE) is True
    os.mkdir(tmp_path / "dir.yaml")
    assert w.on_event(tmp_path / "dir.yaml", IN_CREATE) is True
    assert w.on_event(tmp_path / "gone.yaml", IN_CREATE) is True  # already gone
    assert w.writing() == {tmp_path / "new.yaml"}


def test_a_file_open_past_the_bound_counts_as_complete(tmp_path: Path) -> None:
    clock = Clock()
    w = Writers(clock=clock)
    assert w.bound == WRITE_BOUND == 5.0
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    w.on_event(a, IN_MODIFY)
    clock.now += 2
    w.on_event(b, IN_MODIFY)
    w.on_event(a, IN_MODIFY)  # further writes do not extend the bound
    assert w.next_expiry() == 100.0
    clock.now = 104.9
    assert w.writing() == {a, b} and w.expire() == []
    clock.now = 105.0
    assert w.writing() == {b}  # a reload now reads `a` as it stands
    assert w.expire() == [a]
    assert w.late() == {a}
    assert w.next_expiry() == 102.0
    # The writer goes on: now each write applies, until it is done with the file.
    assert w.on_event(a, IN_MODIFY) is True
    assert w.writing() == {b}
    assert w.on_event(a, IN_CLOSE_WRITE) is True
    assert w.late() == frozenset()
    assert w.on_event(a, IN_MODIFY) is False  # a new writer: held again, a new bound
    assert w.writing() == {a, b}
    clock.now = 110.0
    assert w.expire() == [a, b]
    assert w.next_expiry() is None


def test_files_being_written_in_a_directory_that_goes_away_are_forgotten(tmp_path: Path) -> None:
    w = Writers(clock=Clock())
    w.on_event(tmp_path / "conf.d" / "a.yaml", IN_MODIFY)
    w.on_event(tmp_path / "healerd.yaml", IN_MODIFY)
    w.end_under(tmp_path / "conf.d")
    assert w.writing() == {tmp_path / "healerd.yaml"}


def test_polling_applies_a_file_once_it_was_stable_for_one_poll(tmp_path: Path) -> None:
    clock = Clock()
    watcher = ConfigWatcher(tmp_path, lambda: None, use_inotify=False, clock=clock)
    f, new = tmp_path / "conf.d" / "a.yaml", tmp_path / "conf.d" / "b.yaml"
    conf_d = tmp_path / "conf.d"
    applied = {conf_d: (1,), f: (1, 10)}
    # `a` grew since the last poll: being written, its applied state stands, no reload.
    current = {conf_d: (1,), f: (1, 20)}
    assert watcher.poll_step(applied, applied, current) == applied
    assert watcher.writing() == {f}
    # Grew again: still held.
    last, current = current, {conf_d: (1,), f: (1, 30)}
    assert watcher.poll_step(applied, last, current) == applied
    # Stable for one poll: applied (the caller reloads since the target changed).
    assert watcher.poll_step(applied, current, current) == current
    assert watcher.writing() == frozenset()
    applied = current
    # A new file waits for one stable poll too; a deleted one is gone at once.
    current = {conf_d: (1,), new: (2, 5)}
    assert watcher.poll_step(applied, applied, current) == {conf_d: (1,)}
    assert watcher.writing() == {new}
    assert watcher.poll_step(applied, current, current) == current
    # One that changes at every poll is applied once past the bound.
    applied, last = current, current
    for size in range(6, 20):
        current = {conf_d: (1,), new: (2, size)}
        target = watcher.poll_step(applied, last, current)
        last = current
        if target != applied:
            break
        clock.now += 1.0
    assert target == current and clock.now == 105.0
    # Past the bound, its changes apply at once until it is stable for a poll.
    applied, last, current = current, current, {conf_d: (1,), new: (2, 99)}
    assert watcher.poll_step(applied, last, current) == current
    assert watcher.poll_step(current, current, current) == current
    assert watcher.writers.late() == frozenset()
    assert watcher.poll_step(current, current, applied) == current  # held again


# -- the watcher's thread -----------------------------------------------------------------


@pytest.fixture(params=["inotify", "polling"])
def watching(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ConfigWatcher, Calls, Path]]:
    (tmp_path / "conf.d").mkdir()
    calls = Calls()
    watcher = ConfigWatcher(
        tmp_path, calls, use_inotify=request.param == "inotify", poll_interval=0.5
    )
    watcher.start()
    assert watcher.mode == request.param
    settle(calls, watcher)
    yield watcher, calls, tmp_path
    watcher.stop()


def hold_open_and_write(path: Path, seconds: float, calls: Calls, before: int) -> None:
    """Writes `path` in place in chunks for `seconds`; no callback may come meanwhile."""
    with open(path, "w") as f:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            f.write("# a chunk\n")
            f.flush()
            time.sleep(0.1)  # less than a poll interval: polling can tell too
            assert calls.count == before, "applied while still being written"
        f.write(GOOD)


@pytest.mark.parametrize("name", ["conf.d/a.yaml", "healerd.yaml"])
def test_a_file_open_for_writing_is_applied_when_closed(
    watching: tuple[ConfigWatcher, Calls, Path], name: str
) -> None:
    watcher, calls, root = watching
    path = root / name
    path.write_text(GOOD)
    before = settle(calls, watcher)
    hold_open_and_write(path, 1.5, calls, before)
    closed = time.monotonic()
    took = wait_until("the closed file applied", lambda: calls.count > before)
    assert took < 1.5
    assert time.monotonic() - closed < 1.5


def test_writing_names_the_file_until_it_is_closed(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    calls = Calls()
    watcher = ConfigWatcher(tmp_path, calls, use_inotify=True)
    watcher.start()
    try:
        settle(calls, watcher)
        path = tmp_path / "conf.d" / "a.yaml"
        with open(path, "w") as f:
            f.write("services:\n")
            f.flush()
            wait_until("the write seen", lambda: watcher.writing() == {path})
        wait_until("the close seen", lambda: watcher.writing() == frozenset())
    finally:
        watcher.stop()
    assert watcher.writing() == frozenset()


def test_a_file_renamed_into_conf_d_is_applied_at_once(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    calls = Calls()
    watcher = ConfigWatcher(tmp_path, calls, use_inotify=True)
    watcher.start()
    try:
        before = settle(calls, watcher)
        tmp = tmp_path / "conf.d" / ".a.yaml.tmp"  # an editor's temporary file: ignored
        hold_open_and_write(tmp, 0.5, calls, before)
        time.sleep(0.5)
        assert calls.count == before
        tmp.rename(tmp_path / "conf.d" / "a.yaml")
        took = wait_until("the renamed file applied", lambda: calls.count > before)
        assert took < 1.0
    finally:
        watcher.stop()


def test_a_writer_that_does_not_close_is_applied_after_the_bound_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "conf.d").mkdir()
    calls = Calls()
    watcher = ConfigWatcher(tmp_path, calls, use_inotify=True, write_bound=0.8)
    watcher.start()
    path = tmp_path / "conf.d" / "a.yaml"
    try:
        before = settle(calls, watcher)
        with open(path, "w") as f, caplog.at_level(logging.WARNING, "healerd.confwatch"):
            f.write(GOOD)
            f.flush()
            took = wait_until("the bound", lambda: calls.count > before)
            assert 0.7 < took < 1.8
            assert watcher.writing() == frozenset()
            assert f"{path} is still open for writing after 0.8s" in caplog.text
            settle(calls, watcher)
            count = calls.count
            f.write("# more\n")  # the writer goes on: each write applies now
            f.flush()
            wait_until("the next write applied", lambda: calls.count > count)
            assert watcher.writing() == frozenset()
        with open(path, "a") as f:  # a new writer is held again
            f.write("# again\n")
            f.flush()
            wait_until("held again", lambda: watcher.writing() == {path})
    finally:
        watcher.stop()


def test_when_polling_a_change_not_polled_yet_counts_as_being_written(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    old, new = tmp_path / "conf.d" / "old.yaml", tmp_path / "conf.d" / "new.yaml"
    old.write_text(GOOD)
    calls = Calls()
    watcher = ConfigWatcher(tmp_path, calls, use_inotify=False, poll_interval=60)
    watcher.start()
    try:
        wait_until("the first poll", lambda: watcher._polled is not None)
        assert watcher.writing() == frozenset()
        new.write_text(GOOD)  # a SIGHUP now must not read it before a poll saw it stable
        with old.open("a") as f:
            f.write("# more\n")
        assert watcher.writing() == {old, new}
        old.unlink()
        assert watcher.writing() == {new}
        assert calls.count == 0
    finally:
        watcher.stop()
    assert watcher.writing() == frozenset()


# -- when inotify is not there ---------------------------------------------------------------


def test_without_inotify_in_the_kernel_it_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_inotify() -> Inotify:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(confwatch, "Inotify", no_inotify)
    watcher = ConfigWatcher(tmp_path, Calls())
    watcher.start()
    assert watcher.mode == "polling"
    watcher.stop()


def test_at_the_watch_limit_it_polls_and_still_reloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def limit(self: Inotify, path: object, mask: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Inotify, "add_watch", limit)
    (tmp_path / "conf.d").mkdir()
    calls = Calls()
    watcher = ConfigWatcher(tmp_path, calls, poll_interval=0.2)
    with caplog.at_level(logging.WARNING, "healerd.confwatch"):
        watcher.start()
        try:
            wait_until("the fallback", lambda: watcher.mode == "polling")
            assert "the inotify watch limit: polling" in caplog.text
            (tmp_path / "conf.d" / "a.yaml").write_text(GOOD)
            # Two polls (changed, then stable) and the debounce: roomy on a busy machine.
            wait_until("a reload", lambda: calls.count > 0, timeout=10.0)
        finally:
            watcher.stop()


def test_the_environment_can_force_polling_for_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MODE_ENV, "polling")
    watcher = ConfigWatcher(tmp_path, Calls())
    watcher.start()
    assert watcher.mode == "polling"
    watcher.stop()
    monkeypatch.setenv(MODE_ENV, "")
    watcher = ConfigWatcher(tmp_path, Calls())
    watcher.start()
    assert watcher.mode == "inotify"
    watcher.stop()
