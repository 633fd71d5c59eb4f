"""The daemon's memory files in state_dir (issue 29, L5 and L6): written atomically,
read through the trusted open, and never fatal when missing or broken."""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.daemon.imagework import IMAGES_FILE, UPDATES_FILE
from healerd.daemon.statefile import StateFile
from tests.unit.harness.files import trusted_tmp_dir


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    with trusted_tmp_dir() as path:
        yield path / "state"


def test_a_document_is_written_whole_and_read_back(state: Path) -> None:
    f = StateFile(state / UPDATES_FILE, "auto-update memory")
    assert f.load() is None  # never written: no memory, no error
    f.save({"services": {"web": {"bad": ["sha256:1"]}}})
    f.save({"services": {"web": {"bad": ["sha256:2"]}}})
    assert f.load() == {"services": {"web": {"bad": ["sha256:2"]}}}
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(f.path).st_mode) == 0o600
    assert sorted(p.name for p in state.iterdir()) == [UPDATES_FILE]  # no temporary left


def test_a_failed_rename_leaves_the_old_document(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = StateFile(state / IMAGES_FILE, "image GC memory")
    f.save({"pulled_image_ids": ["sha256:a"]})

    def full_disk(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError):
        f.save({"pulled_image_ids": ["sha256:b"]})
    monkeypatch.undo()
    assert f.load() == {"pulled_image_ids": ["sha256:a"]}
    assert sorted(p.name for p in state.iterdir()) == [IMAGES_FILE]


def test_a_broken_or_untrusted_document_is_no_memory(
    state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = StateFile(state / UPDATES_FILE, "auto-update memory")
    f.save({"services": {}})
    f.path.write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert f.load() is None
    assert "auto-update memory" in caplog.text and "not JSON" in caplog.text
    f.path.write_text(json.dumps({"services": {}}))
    os.chmod(f.path, 0o666)  # anyone could have written it: not believed
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert f.load() is None
    assert "writable by group and others" in caplog.text
    assert StateFile(f.path, "x", strict=False).load() == {"services": {}}
