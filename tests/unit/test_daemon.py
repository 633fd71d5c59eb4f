"""Daemon wiring without threads: settings precedence, reload, signals as flags (and the
gate the image threads wait at, with threads)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from healerd.config import SettingsError
from healerd.core.clock import FakeClock
from healerd.daemon.main import Daemon
from tests.unit.harness.daemon import daemon, settings_for
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine


def test_flags_override_the_settings_file(tmp_path: Path) -> None:
    s = settings_for(
        tmp_path,
        "--workers",
        "3",
        "--docker-host",
        "unix:///x.sock",
        file="workers: 7\nresync_interval: 5s\n",
    )
    assert s.workers == 3 and s.resync_interval == 5.0 and s.docker_host == "unix:///x.sock"
    assert s.config_dir == tmp_path


def test_socket_flag_is_accepted(tmp_path: Path) -> None:
    s = settings_for(tmp_path, "--socket", "/run/x/healerd.sock")
    assert s.socket_path == Path("/run/x/healerd.sock")


def test_bad_flags_are_checked_like_the_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="workers"):
        settings_for(tmp_path, "--workers", "0")


def test_reload_applies_files_and_keeps_last_good_of_a_broken_one(tmp_path: Path) -> None:
    d, _ = daemon(tmp_path)
    f = tmp_path / "conf.d" / "a.yaml"
    f.write_text("services:\n  web:\n    image: img:1\n    replicas: 2\n")
    d.reload()
    assert d.controller.desired.services["web"].replicas == 2
    f.write_text("services:\n  web:\n    image: img:1\n    replicas: -1\n")
    d.reload()
    assert d.controller.desired.services["web"].replicas == 2
    assert d.controller.desired.errors


def test_a_reload_that_fails_unexpectedly_keeps_the_state_and_the_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: an error of a git source's state file left Daemon.reload, and with it the
    main loop: healerd ended, and crash-looped for as long as the error lasted."""
    from healerd.daemon import reload

    d, _ = daemon(tmp_path)
    f = tmp_path / "conf.d" / "a.yaml"
    f.write_text("services:\n  web:\n    image: img:1\n    replicas: 2\n")
    d.reload()

    def broken(*_args: object, **_kw: object) -> list[object]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(reload, "source_results", broken)
    f.write_text("services:\n  web:\n    image: img:1\n    replicas: 3\n")
    d.reload()
    assert d.controller.desired.services["web"].replicas == 2, "the last good state stands"


def test_a_missing_conf_dir_removes_nothing(tmp_path: Path) -> None:
    d, _ = daemon(tmp_path)
    (tmp_path / "conf.d").rmdir()
    d.reload()
    assert d.controller.desired.services == {} and d.controller.desired.hold_orphans


def test_signals_only_set_flags(tmp_path: Path) -> None:
    d, _ = daemon(tmp_path)
    old = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}
    try:
        d.install_signal_handlers()
        os.kill(os.getpid(), signal.SIGHUP)
        d._sleep(0)
        assert d._reload_requested and not d._stop_requested
        os.kill(os.getpid(), signal.SIGTERM)
        d._sleep(0)
        assert d._stop_requested
    finally:
        signal.set_wakeup_fd(-1)
        for s, h in old.items():
            signal.signal(s, h)


def test_a_file_truncated_to_empty_keeps_its_services(tmp_path: Path) -> None:
    d, _ = daemon(tmp_path)
    f = tmp_path / "conf.d" / "a.yaml"
    f.write_text("services:\n  web:\n    image: img:1\n    replicas: 2\n")
    d.reload()
    f.write_text("")  # `cp` or `>` truncates before it writes
    d.reload()
    assert d.controller.desired.services["web"].replicas == 2
    assert any("empty" in e.reason for e in d.controller.desired.errors)
    f.write_text("services: {}\n")
    d.reload()
    assert d.controller.desired.services == {}


def test_a_reload_applies_the_node_keys_of_healerd_yaml_and_a_bad_file_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = "strict_modes: false\n"
    d, _ = daemon(tmp_path)
    (tmp_path / "healerd.yaml").write_text(base)
    d.reload()
    assert d.admission.limits.memory_available.amount == 100 * 2**20
    (tmp_path / "healerd.yaml").write_text(
        base + "pressure_memory_available: 2Gi\nengine_calls_per_second: 5\nworkers: 9\n"
    )
    d.reload()
    assert d.admission.limits.memory_available.amount == 2 * 2**30
    assert d.bucket.rate == 5.0 and d.settings.engine_calls_per_second == 5.0
    assert d.settings.workers != 9  # needs a restart, and says so
    assert "workers changed; takes effect at the next start" in caplog.text
    (tmp_path / "healerd.yaml").write_text(base + "pressure_memory_available: lots\n")
    d.reload()
    assert d.admission.limits.memory_available.amount == 2 * 2**30
    assert "settings not reloaded: " in caplog.text and "pressure_memory_available" in caplog.text
    report = d.node_report()
    assert report.limits.engine_calls_per_second == 5.0 and report.me.rss
    assert (
        len(report.settings_errors) == 1
        and "pressure_memory_available" in (report.settings_errors[0])
    )
    # Said once, not at every resync; fixing the file clears it.
    caplog.clear()
    d.reload()
    assert "settings not reloaded" not in caplog.text
    (tmp_path / "healerd.yaml").write_text(base + "pressure_memory_available: 1Gi\n")
    with caplog.at_level("INFO", logger="healerd"):
        d.reload()
    assert "healerd.yaml is valid again" in caplog.text
    assert d.node_report().settings_errors == ()
    assert d.admission.limits.memory_available.amount == 2**30


@pytest.mark.parametrize("rate", [0.5, 0, -1, True])
def test_engine_call_cap_has_a_floor_of_one_call_per_second(tmp_path: Path, rate: object) -> None:
    from healerd.config.settings import load_settings

    (tmp_path / "healerd.yaml").write_text(f"engine_calls_per_second: {rate}\n")
    with pytest.raises(SettingsError, match="calls per second from 1"):
        load_settings(tmp_path / "healerd.yaml")


def test_a_second_daemon_on_the_same_engine_identity_stops_before_acting(tmp_path: Path) -> None:
    from healerd.engine import EngineError

    _, engine = daemon(tmp_path)
    first = Daemon(settings_for(tmp_path), engine, FakeClock(), id_lock_dir=tmp_path / "run")
    second = Daemon(settings_for(tmp_path), engine, FakeClock(), id_lock_dir=tmp_path / "run")
    first.guard_engine()
    with pytest.raises(EngineError, match="already manages the engine fake-engine-id"):
        second.guard_engine()
    assert second.exit_code == 3 and second._stop_requested
    # Through the loop: the refused daemon never lists, so never acts; nor may it finish
    # a restore a restart cut short (healerd.daemon.restorestart): the gate stays shut.
    second.controller.enqueue_all(force=True)
    second.controller.process_once()
    assert "list" not in engine.calls
    assert not second.images.engine_ours.is_set()
    first.controller.enqueue_all(force=True)
    first.controller.process_once()
    assert first.images.engine_ours.is_set(), "opened by the first look's guard"
    # While the engine is away the check waits for it, and nothing is locked.
    (tmp_path / "other").mkdir()
    _, down = daemon(tmp_path / "other")
    third = Daemon(
        settings_for(tmp_path / "other"), down, FakeClock(), id_lock_dir=tmp_path / "run2"
    )
    down.down = True
    with pytest.raises(EngineError):
        third.guard_engine()
    assert third.exit_code == 0


def test_image_work_waits_until_the_engine_is_this_healerd_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Image GC removes, the checker pulls, images_dir loads: in a second healerd that its
    first look's guard stops, none of them may have begun."""
    from healerd.daemon import restorestart

    monkeypatch.setattr(restorestart, "GUARD_WAIT", 0.01)
    d, _ = daemon(tmp_path)
    began: dict[str, threading.Event] = {}
    for name in ("gc", "updates", "dir"):
        began[name] = threading.Event()
        monkeypatch.setattr(getattr(d.images, name), "run", lambda _stop, e=began[name]: e.set())
    stop = threading.Event()
    threads = d.images.threads(stop)
    for t in threads:
        t.start()
    assert not any(e.wait(0.3) for e in began.values()), "image work began before the guard"
    d.images.engine_ours.set()
    assert all(e.wait(3.0) for e in began.values())
    # A stop before the engine was this healerd's: nothing begins, the threads end.
    (tmp_path / "second").mkdir()
    d2, _ = daemon(tmp_path / "second")
    ran: list[str] = []
    for name in ("gc", "updates", "dir"):
        monkeypatch.setattr(getattr(d2.images, name), "run", lambda _stop, n=name: ran.append(n))
    stop2 = threading.Event()
    threads += d2.images.threads(stop2)
    for t in threads[-3:]:
        t.start()
    stop2.set()
    for t in threads:
        t.join(3.0)
        assert not t.is_alive()
    assert ran == []


def test_after_a_restart_a_service_declared_twice_keeps_the_declaration_that_runs(
    tmp_path: Path,
) -> None:
    from healerd.config import parse_service_text

    conf = tmp_path / "conf.d"
    conf.mkdir(exist_ok=True)
    (conf / "b.yaml").write_text("services:\n  web:\n    image: img:2\n")
    (conf / "a.yaml").write_text("services:\n  web:\n    image: img:1\n")
    runs = parse_service_text("services:\n  web:\n    image: img:2\n", str(conf / "b.yaml"))
    assert runs.services is not None
    d, engine = daemon(tmp_path)
    engine.create_and_start(runs.services["web"], "web-1", {})  # no source label: the hash
    d._prefer_what_runs()
    d.reload()
    assert d.controller.desired.services["web"].image == "img:2"
    assert d.controller.desired.broken_files == (str(conf / "a.yaml"),)
    # The engine away at start: name order, as on a first start.
    d2, engine2 = daemon(tmp_path)
    engine2.down = True
    d2._prefer_what_runs()
    d2.reload()
    assert d2.controller.desired.services["web"].image == "img:1"


def test_containers_carry_the_file_that_declared_them(tmp_path: Path) -> None:
    d, engine = daemon(tmp_path)
    f = tmp_path / "conf.d" / "a.yaml"
    f.write_text("services:\n  web:\n    image: img:1\n    replicas: 2\n")
    d.reload()
    d.controller.enqueue_all(force=True)
    d.controller.process_once()
    assert [c.source_file for c in engine.containers.values()] == [str(f), str(f)]


def test_a_reload_request_is_answered_by_a_reload_begun_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: `healerctl reload` took any new desired state for its answer, so a
    resync's reload under way when it came (the files read before the operator's edit)
    answered "configuration reloaded" for a file it never read."""
    from healerd.daemon import reload
    from healerd.daemon.api import routes
    from healerd.daemon.api.server import ApiOptions, ApiServer
    from tests.unit.harness.api import call

    sock = tmp_path / "healerd.sock"
    engine = FakeEngine(allow=LOOP_CALLS | {"identity"})
    d = Daemon(settings_for(tmp_path, "--socket", str(sock)), engine, FakeClock())
    (tmp_path / "conf.d" / "a.yaml").write_text("services:\n  web:\n    image: img:1\n")
    d.reload()
    real, read, go = reload.read_conf_d, threading.Event(), threading.Event()

    def slow(*args: object, **kw: object) -> object:
        state = real(*args, **kw)  # type: ignore[arg-type]
        read.set()
        go.wait(10)
        return state

    monkeypatch.setattr("healerd.daemon.main.read_conf_d", slow)
    resync = threading.Thread(target=d.reload)
    resync.start()
    assert read.wait(10)  # the resync read the files: the edit comes after
    monkeypatch.setattr("healerd.daemon.main.read_conf_d", real)
    (tmp_path / "conf.d" / "b.yaml").write_text("services:\n  db:\n    image: i\n    replicas: x\n")
    monkeypatch.setattr(routes, "RELOAD_APPLY_WAIT", 10.0)
    server = ApiServer(d, ApiOptions(request_deadline=5.0))
    server.start()
    answer: list[tuple[int, object]] = []
    asked = threading.Thread(target=lambda: answer.append(call(sock, "POST", "/v1/reload")))
    try:
        asked.start()
        deadline = time.monotonic() + 10
        while not d._reload_requested and time.monotonic() < deadline:
            time.sleep(0.01)
        go.set()
        resync.join(10)
        asked.join(0.5)
        assert not answer, f"answered by the reload begun before the request: {answer}"
        assert d._reload_requested
        d.reload()  # what the main loop does with the request
        asked.join(10)
        code, data = answer[0]
        assert code == 200 and isinstance(data, dict), answer
        assert data["message"].startswith("reload refused: 1 error(s)"), data
        assert "b.yaml" in data["config_errors"][0]["file"], data
    finally:
        go.set()
        server.stop()
