"""The config watcher on real directories: prompt, debounced, robust to the directory going away."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from healerd.daemon.confwatch import ConfigWatcher
from tests.unit.harness.confwatch import GOOD, Calls, settle, wait_until, watching


@pytest.fixture(params=["inotify", "polling"])
def setup(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ConfigWatcher, Calls, Path]]:
    root = tmp_path / "etc"
    (root / "conf.d").mkdir(parents=True)
    calls = Calls()
    inotify = request.param == "inotify"
    watcher = ConfigWatcher(root, calls, use_inotify=inotify, poll_interval=0.2)
    watcher.start()
    assert watcher.mode == request.param
    yield watcher, calls, root / "conf.d"
    watcher.stop()
    assert watcher.mode == "stopped"


def test_create_change_rename_delete_each_trigger_within_a_second(
    setup: tuple[ConfigWatcher, Calls, Path],
) -> None:
    watcher, calls, conf_d = setup
    path = conf_d / "a.yaml"
    steps: list[tuple[str, Callable[[], object]]] = [
        ("create", lambda: path.write_text(GOOD)),
        ("change", lambda: path.write_text(GOOD + "# changed, longer\n")),
        ("rename away", lambda: path.rename(conf_d.parent / "a.yaml")),
        ("rename in", lambda: (conf_d.parent / "a.yaml").rename(conf_d / "b.yaml")),
        ("chmod", lambda: os.chmod(conf_d / "b.yaml", 0o600)),
        ("delete", lambda: (conf_d / "b.yaml").unlink()),
    ]
    for what, step in steps:
        before = settle(calls, watcher)
        step()
        took = wait_until(what, lambda b=before: calls.count > b, timeout=2.0)  # type: ignore[misc]
        if watcher.mode == "inotify":
            assert took < 1.0, f"{what} took {took:.2f}s"


def test_ignored_names_do_not_trigger(setup: tuple[ConfigWatcher, Calls, Path]) -> None:
    watcher, calls, conf_d = setup
    before = settle(calls, watcher)
    for name in [".a.yaml.swp", "a.yaml~", "a.yaml.dpkg-new", "notes.txt", "#a.yaml#"]:
        (conf_d / name).write_text("x")
    # A relevant file afterwards: exactly one callback for it, none for the leftovers.
    (conf_d / "z.yaml").write_text(GOOD)
    wait_until("the relevant change", lambda: calls.count > before)
    assert settle(calls, watcher) == before + 1


def test_a_burst_of_completed_files_is_debounced(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    calls = Calls()
    watcher = ConfigWatcher(tmp_path, calls, use_inotify=True)
    watcher.start()
    try:
        settle(calls, watcher)
        before = calls.count
        start = time.monotonic()
        for i in range(30):  # a package install: one complete file every 50 ms for 1.5 s
            (tmp_path / "conf.d" / f"{i:02d}.yaml").write_text(GOOD.replace("web", f"w{i}"))
            time.sleep(0.05)
        wait_until("a callback", lambda: calls.count > before)
        # At most one callback per max_delay (0.8 s) while the files come, not one per file.
        assert 1 <= settle(calls, watcher) - before <= 4
        assert calls.times[before] - start < 1.0  # the first one still came within a second
    finally:
        watcher.stop()


def test_conf_d_deleted_and_recreated(setup: tuple[ConfigWatcher, Calls, Path]) -> None:
    watcher, calls, conf_d = setup
    (conf_d / "a.yaml").write_text(GOOD)
    before = settle(calls, watcher)
    shutil.rmtree(conf_d)
    wait_until("deletion noticed", lambda: calls.count > before)
    before = settle(calls, watcher)
    conf_d.mkdir()
    (conf_d / "b.yaml").write_text(GOOD)
    wait_until("recreation noticed", lambda: calls.count > before)
    before = settle(calls, watcher)
    (conf_d / "b.yaml").write_text(GOOD + "# again\n")  # the new directory is watched
    wait_until("a change in the new directory", lambda: calls.count > before, timeout=2.0)


def test_config_dir_deleted_and_recreated(setup: tuple[ConfigWatcher, Calls, Path]) -> None:
    watcher, calls, conf_d = setup
    before = settle(calls, watcher)
    shutil.rmtree(conf_d.parent)
    wait_until("deletion noticed", lambda: calls.count > before)
    before = settle(calls, watcher)
    conf_d.mkdir(parents=True)
    (conf_d / "a.yaml").write_text(GOOD)
    wait_until("recreation noticed", lambda: calls.count > before, timeout=3.0)
    before = settle(calls, watcher)
    (conf_d / "a.yaml").write_text(GOOD + "# again\n")
    wait_until("a change after recreation", lambda: calls.count > before, timeout=3.0)


def test_a_files_variables_change_triggers_a_reload(
    setup: tuple[ConfigWatcher, Calls, Path],
) -> None:
    # `<name>.env` holds the ${VAR}s of `<name>.yaml` (healerd.config.interpolate).
    watcher, calls, conf_d = setup
    before = settle(calls, watcher)
    (conf_d / "stack.env").write_text("TAG=1.36\n")
    wait_until("variables change", lambda: calls.count > before)
    before = settle(calls, watcher)
    (conf_d / ".stack.env.swp").write_text("x")
    (conf_d / "z.yaml").write_text(GOOD)
    wait_until("the relevant change", lambda: calls.count > before)
    assert settle(calls, watcher) == before + 1


def test_a_settings_change_triggers_a_reload(setup: tuple[ConfigWatcher, Calls, Path]) -> None:
    # The daemon's reload applies healerd.yaml's node keys (tests/unit/test_daemon.py).
    watcher, calls, conf_d = setup
    before = settle(calls, watcher)
    (conf_d.parent / "healerd.yaml").write_text("workers: 2\n")
    wait_until("settings change", lambda: calls.count > before)


def test_a_failing_callback_does_not_stop_the_watcher(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    calls = Calls()

    def callback() -> None:
        calls()
        raise RuntimeError("boom")

    watcher = ConfigWatcher(tmp_path, callback)
    watcher.start()
    try:
        (tmp_path / "conf.d" / "a.yaml").write_text(GOOD)
        wait_until("first", lambda: calls.count >= 1)
        before = settle(calls, watcher)
        (tmp_path / "conf.d" / "b.yaml").write_text(GOOD)
        wait_until("second", lambda: calls.count > before)
    finally:
        watcher.stop()


def test_missing_config_dir_at_start_is_picked_up_later(tmp_path: Path) -> None:
    calls = Calls()
    watcher = ConfigWatcher(tmp_path / "etc", calls)
    watcher.start()
    try:
        (tmp_path / "etc" / "conf.d").mkdir(parents=True)
        (tmp_path / "etc" / "conf.d" / "a.yaml").write_text(GOOD)
        wait_until("the new directory", lambda: calls.count >= 1, timeout=3.0)
    finally:
        watcher.stop()


def test_stop_is_prompt(tmp_path: Path) -> None:
    watcher = ConfigWatcher(tmp_path, Calls())
    watcher.start()
    start = time.monotonic()
    watcher.stop()
    assert time.monotonic() - start < 0.5


def test_a_project_directory_and_its_linked_files_trigger(
    setup: tuple[ConfigWatcher, Calls, Path],
) -> None:
    """Issue 34: a project linked into conf.d, its files elsewhere; after a reload tells
    the watcher what the project read, an edit there, a new override and a new `.env`
    each trigger; unrelated files beside them do not; the link going away does."""
    watcher, calls, conf_d = setup
    project = conf_d.parent.parent / "stacks" / "cloud"
    project.mkdir(parents=True)
    (project / "compose.yaml").write_text(GOOD)
    before = settle(calls, watcher)
    os.symlink(project, conf_d / "cloud")
    wait_until("the link", lambda: calls.count > before, timeout=2.0)
    watcher.watch_also([str(project / "compose.yaml")])
    before = settle(calls, watcher)
    (project / "notes.txt").write_text("not a project file")
    assert settle(calls, watcher) == before
    for what, name in (("edit", "compose.yaml"), ("override", "compose.override.yaml")):
        before = settle(calls, watcher)
        (project / name).write_text(GOOD + f"# {what}\n")
        wait_until(what, lambda b=before: calls.count > b, timeout=2.0)  # type: ignore[misc]
    before = settle(calls, watcher)
    (conf_d / "cloud").unlink()
    wait_until("the link removed", lambda: calls.count > before, timeout=2.0)


def test_a_directory_reached_by_two_paths_is_one_watch_and_stays_quiet(tmp_path: Path) -> None:
    """Project b linked into conf.d and read at its target, while project a includes
    ../b/extra.yaml through conf.d: one directory, two paths. The watcher must watch it
    once and stay quiet (it reloaded every 0.8 s for ever), and an edit there triggers."""
    from healerd.config import DesiredStore, load_conf_dir

    root = tmp_path / "etc"
    conf = root / "conf.d"
    stacks = tmp_path / "stacks"
    (stacks / "b").mkdir(parents=True)
    (conf / "a").mkdir(parents=True)
    (stacks / "b" / "compose.yaml").write_text("services:\n  b:\n    image: busybox\n")
    (stacks / "b" / "extra.yaml").write_text("services:\n  x:\n    image: busybox\n")
    (conf / "a" / "compose.yaml").write_text("include:\n  - ../b/extra.yaml\n")
    (conf / "b").symlink_to(stacks / "b")
    store = DesiredStore()
    state = store.update(load_conf_dir(conf, strict_modes=False))
    assert state.errors == () and {"b", "x"} <= set(state.services)
    with watching(root, store.sources()) as (calls, watcher, before):
        assert settle(calls, watcher) == before  # quiet: nothing changed
        (stacks / "b" / "extra.yaml").write_text("services:\n  x:\n    image: busybox:2\n")
        wait_until("the edit", lambda: calls.count > before, timeout=2.0)


def test_an_edit_of_an_env_file_triggers_a_reload(tmp_path: Path) -> None:
    """A service file's env_file (beside it or elsewhere) is among what its result read,
    so the watcher is told of it: an edit reloads now (a new digest, a rollout), not at
    the next resync; other files beside it stay quiet."""
    from healerd.config import DesiredStore, load_conf_dir

    root = tmp_path / "etc"
    conf = root / "conf.d"
    shared = tmp_path / "shared"
    conf.mkdir(parents=True)
    shared.mkdir()
    (shared / "app.env").write_text("A=1\n")
    (conf / "secrets").write_text("B=1\n")
    (conf / "app.yaml").write_text(
        f"services:\n  app:\n    image: busybox\n    env_file: [{shared / 'app.env'}, secrets]\n"
    )
    store = DesiredStore()
    state = store.update(load_conf_dir(conf, strict_modes=False))
    assert state.errors == () and str(shared / "app.env") in store.sources()
    with watching(root, store.sources()) as (calls, watcher, before):
        (shared / "notes.txt").write_text("not read by any service")
        assert settle(calls, watcher) == before
        (shared / "app.env").write_text("A=2\n")
        wait_until("the env_file edit", lambda: calls.count > before, timeout=2.0)
        before = settle(calls, watcher)
        (conf / "secrets").write_text("B=2\n")  # in conf.d itself, under any name
        wait_until("the edit in conf.d", lambda: calls.count > before, timeout=2.0)


def test_an_env_file_that_breaks_stays_watched_so_its_fix_reloads(tmp_path: Path) -> None:
    """A broken (or missing) env file refuses the service file, and is still among what
    its result read: the edit that fixes it reloads at once."""
    from healerd.config import DesiredStore, load_conf_dir

    conf = tmp_path / "etc" / "conf.d"
    conf.mkdir(parents=True)
    (conf / "app.yaml").write_text(
        f"services:\n  app:\n    image: busybox\n    env_file: {tmp_path / 'app.env'}\n"
    )
    for broken in ("A=1\nnot a pair\n", None):
        if broken is None:
            (tmp_path / "app.env").unlink()
        else:
            (tmp_path / "app.env").write_text(broken)
        store = DesiredStore()
        state = store.update(load_conf_dir(conf, strict_modes=False))
        assert state.errors and str(tmp_path / "app.env") in store.sources()
