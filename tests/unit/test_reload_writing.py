"""Every reload (SIGHUP, resync, `healerctl reload`) keeps the last state of a file that
the watcher knows is still being written; the loader's `keep` does it."""

from __future__ import annotations

from pathlib import Path

import pytest

from healerd.config import DesiredStore, FileResult, load_conf_dir
from healerd.daemon.confwatch import Writers
from healerd.daemon.inotify import IN_CLOSE_WRITE, IN_MODIFY
from tests.unit.harness.confwatch import Clock
from tests.unit.harness.daemon import daemon

THREE = "services:\n  web:\n    image: img:1\n    replicas: 3\n"
PREFIX = "services:\n  web:\n    image: img:1\n    replicas: 1"  # ... of `replicas: 10`


def test_load_conf_dir_does_not_read_kept_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(THREE)
    (tmp_path / "b.yaml").write_text("services: {}\n")
    (tmp_path / "c.yaml").write_text(PREFIX)
    kept = FileResult(str(tmp_path / "a.yaml"), {}, ())
    results = load_conf_dir(
        tmp_path,
        keep={
            str(tmp_path / "a.yaml"): kept,
            str(tmp_path / "c.yaml"): None,
            str(tmp_path / "gone.yaml"): kept,
        },
    )
    assert [r.file for r in results] == [str(tmp_path / n) for n in ("a.yaml", "b.yaml", "c.yaml")]
    assert results[0] is kept
    assert results[1].services == {}
    # Never read before: no good version yet, and no error to report.
    assert results[2] == FileResult(str(tmp_path / "c.yaml"), None, ())


def test_the_store_remembers_each_files_last_result(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(THREE)
    store = DesiredStore()
    a = str(tmp_path / "a.yaml")
    assert store.last_results([a]) == {a: None}
    results = load_conf_dir(tmp_path)
    store.update(results)
    assert store.last_results([a]) == {a: results[0]}
    (tmp_path / "a.yaml").write_text(PREFIX)
    state = store.update(load_conf_dir(tmp_path, keep=store.last_results([a])))
    assert state.services["web"].replicas == 3 and not state.broken_files


def test_a_reload_keeps_the_last_version_of_a_file_being_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d, _ = daemon(tmp_path)
    clock = Clock()
    d.confwatch.writers = Writers(clock=clock)
    path = tmp_path / "conf.d" / "a.yaml"
    path.write_text(THREE)
    d.reload()
    assert d.controller.desired.services["web"].replicas == 3

    path.write_text(PREFIX)  # a valid prefix of the new file: it would scale web down
    d.confwatch.writers.on_event(path, IN_MODIFY)
    with caplog.at_level("INFO", logger="healerd"):
        d.reload()  # SIGHUP, the resync or `healerctl reload` while it is written
    desired = d.controller.desired
    assert desired.services["web"].replicas == 3
    assert not desired.errors and not desired.broken_files and not desired.hold_orphans
    assert f"{path} is being written; its last version stands" in caplog.text

    path.write_text(PREFIX + "0\n")
    d.confwatch.writers.on_event(path, IN_CLOSE_WRITE)
    d.reload()
    assert d.controller.desired.services["web"].replicas == 10


def test_a_broken_file_being_written_stays_broken_with_its_last_good_services(
    tmp_path: Path,
) -> None:
    d, _ = daemon(tmp_path)
    d.confwatch.writers = Writers(clock=Clock())
    path = tmp_path / "conf.d" / "a.yaml"
    path.write_text(THREE)
    d.reload()
    path.write_text(THREE + "    bogus: 1\n")
    d.reload()
    errors = d.controller.desired.errors
    assert errors and d.controller.desired.broken_files == (str(path),)
    path.write_text(PREFIX)
    d.confwatch.writers.on_event(path, IN_MODIFY)
    d.reload()
    assert d.controller.desired.errors == errors
    assert d.controller.desired.services["web"].replicas == 3


def test_a_new_file_being_written_declares_nothing_yet_and_removes_nothing(
    tmp_path: Path,
) -> None:
    """Also what the first reload after a start does with a file written since the
    watcher started: nothing undeclared is removed until it is complete."""
    d, _ = daemon(tmp_path)
    d.confwatch.writers = Writers(clock=Clock())
    path = tmp_path / "conf.d" / "new.yaml"
    path.write_text(PREFIX)
    d.confwatch.writers.on_event(path, IN_MODIFY)
    d.reload()
    desired = d.controller.desired
    assert desired.services == {} and desired.hold_orphans and not desired.errors
    d.confwatch.writers.on_event(path, IN_CLOSE_WRITE)
    d.reload()
    assert d.controller.desired.services["web"].replicas == 1
    assert not d.controller.desired.hold_orphans


def test_past_the_bound_a_reload_reads_the_file_as_it_stands(tmp_path: Path) -> None:
    d, _ = daemon(tmp_path)
    clock = Clock()
    d.confwatch.writers = Writers(clock=clock)
    path = tmp_path / "conf.d" / "a.yaml"
    path.write_text(THREE)
    d.reload()
    path.write_text(PREFIX)
    d.confwatch.writers.on_event(path, IN_MODIFY)
    clock.now += 4.9
    d.reload()
    assert d.controller.desired.services["web"].replicas == 3
    clock.now += 0.1
    d.reload()
    assert d.controller.desired.services["web"].replicas == 1


def test_a_file_being_written_that_is_deleted_is_gone(tmp_path: Path) -> None:
    d, _ = daemon(tmp_path)
    d.confwatch.writers = Writers(clock=Clock())
    path = tmp_path / "conf.d" / "a.yaml"
    path.write_text(THREE)
    d.reload()
    d.confwatch.writers.on_event(path, IN_MODIFY)
    path.unlink()  # the watcher has not seen the delete yet
    d.reload()
    assert d.controller.desired.services == {}


def test_healerd_yaml_being_written_is_not_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d, _ = daemon(tmp_path)
    d.confwatch.writers = Writers(clock=Clock())
    settings = tmp_path / "healerd.yaml"
    settings.write_text("pressure_memory_available: 100Mi\n")
    d.reload()
    settings.write_text("pressure_memory_available: 1Gi\n")
    d.reload()
    assert d.admission.limits.memory_available.amount == 2**30
    settings.write_text("pressure_memory_available: 2")  # ... of 2Gi
    d.confwatch.writers.on_event(settings, IN_MODIFY)
    with caplog.at_level("INFO", logger="healerd"):
        d.reload()
    assert d.admission.limits.memory_available.amount == 2**30
    assert "settings not reloaded" not in caplog.text
    assert "healerd.yaml is being written; settings unchanged" in caplog.text
    settings.write_text("pressure_memory_available: 2Gi\n")
    d.confwatch.writers.on_event(settings, IN_CLOSE_WRITE)
    d.reload()
    assert d.admission.limits.memory_available.amount == 2 * 2**30
