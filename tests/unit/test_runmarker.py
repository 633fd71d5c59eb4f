"""Whether the last run of healerd stopped cleanly (healerd.daemon.runmarker): the mark
a run leaves in state_dir, taken away at a clean stop; still there at the next start,
it is the `healerd` notice."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from healerd.core.notices import unclean_notice
from healerd.daemon import runmarker
from healerd.vocabulary import NoticeKind


def test_a_first_start_is_clean_and_marks_the_run(tmp_path: Path) -> None:
    assert runmarker.began(tmp_path, 4242) is False
    mark = tmp_path / runmarker.MARKER
    assert mark.read_text() == "4242\n"
    assert mark.stat().st_mode & 0o777 == 0o600


def test_a_clean_stop_takes_the_mark_away_and_the_next_start_is_clean(tmp_path: Path) -> None:
    runmarker.began(tmp_path, 1)
    runmarker.ended(tmp_path)
    assert not (tmp_path / runmarker.MARKER).exists()
    assert runmarker.began(tmp_path, 2) is False
    runmarker.ended(tmp_path)
    runmarker.ended(tmp_path)  # twice: nothing to take away, no error


def test_a_start_after_a_run_that_never_stopped_cleanly_says_so(tmp_path: Path) -> None:
    runmarker.began(tmp_path, 1)  # then kill -9, a crash, a power loss: no ended()
    assert runmarker.began(tmp_path, 2) is True
    assert (tmp_path / runmarker.MARKER).read_text() == "2\n"  # this run's mark now
    n = unclean_notice(1000.0)
    assert n.kind is NoticeKind.HEALERD and n.service == ""
    assert n.title == "healerd restarted after an unclean stop" and "kill -9" in n.detail


def test_a_state_dir_that_cannot_be_written_costs_the_notice_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    with caplog.at_level(logging.DEBUG, logger="healerd"):
        assert runmarker.began(missing, 1) is False
    assert "cannot mark the run" in caplog.text
    runmarker.ended(missing)  # no error either
