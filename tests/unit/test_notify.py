"""sd_notify: the datagram protocol, the Notifier's rules, and a Daemon under a real
NOTIFY_SOCKET (READY, STATUS, WATCHDOG only while the loop progresses, RELOADING, STOPPING)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.core.clock import SystemClock
from healerd.daemon import notify
from healerd.daemon.main import Daemon, build_parser, resolve_settings
from healerd.daemon.notify import Notifier, sd_notify, watchdog_interval
from healerd.model import ObservedContainer
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine


class Listener:
    """A NOTIFY_SOCKET as systemd has it: a datagram socket, read by a thread."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            self.messages.append((time.monotonic(), data.decode()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()

    def lines(self) -> list[tuple[float, str]]:
        return [(t, line) for t, m in list(self.messages) for line in m.split("\n")]

    def wait_for(self, prefix: str, after: float = 0.0, timeout: float = 5.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in self.lines():
                if t >= after and line.startswith(prefix):
                    return t
            time.sleep(0.02)
        raise AssertionError(f"no {prefix!r} after {after}: {self.lines()}")


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    lst = Listener(str(tmp_path / "notify.sock"))
    yield lst
    lst.close()


def test_datagram_to_a_path_socket(listener: Listener, tmp_path: Path) -> None:
    env = {"NOTIFY_SOCKET": str(tmp_path / "notify.sock")}
    assert sd_notify("READY=1\nSTATUS=ok", env)
    listener.wait_for("STATUS=ok")
    assert listener.messages[0][1] == "READY=1\nSTATUS=ok"


def test_datagram_to_an_abstract_socket() -> None:
    name = f"healerd-test-{os.getpid()}-{time.monotonic_ns()}"
    lst = Listener("\0" + name)
    try:
        assert sd_notify("WATCHDOG=1", {"NOTIFY_SOCKET": "@" + name})
        lst.wait_for("WATCHDOG=1")
    finally:
        lst.close()


def test_no_socket_is_a_quiet_no_op(tmp_path: Path) -> None:
    assert not sd_notify("READY=1", {})
    assert not sd_notify("READY=1", {"NOTIFY_SOCKET": "vsock:2:1"})
    # Nobody listening: logged at debug level, never raised.
    assert not sd_notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "absent.sock")})
    n = Notifier(env={})
    assert not n.enabled and n.tick_interval == float("inf")
    n.ready("x")
    n.tick(lambda: "x", 0.0, 100.0)


def test_watchdog_interval_from_the_environment() -> None:
    assert watchdog_interval({}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "60000000"}) == 60.0
    assert watchdog_interval({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "1"}) is None
    pid = str(os.getpid())
    assert watchdog_interval({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": pid}) == 2.0
    assert watchdog_interval({"WATCHDOG_USEC": "junk"}) is None


def recorder(env: dict[str, str]) -> tuple[Notifier, list[str]]:
    sent: list[str] = []

    def send(m: str) -> bool:
        sent.append(m)
        return True

    return Notifier(env={"NOTIFY_SOCKET": "/x", **env}, send=send), sent


def test_status_only_on_change_and_at_most_once_a_second() -> None:
    n, sent = recorder({})
    assert n.status("a", now=100.0)
    assert not n.status("a", now=102.0)  # unchanged: not sent again
    assert n.status("b", now=102.5)
    assert sent == ["STATUS=a", "STATUS=b"]


def test_status_rate_limit() -> None:
    n, sent = recorder({})
    n.status("a", now=100.0)
    assert not n.status("b", now=100.4)
    assert n.status("b", now=101.0)
    assert n.status("multi\nline", now=102.0)
    assert sent == ["STATUS=a", "STATUS=b", "STATUS=multi line"]


def test_watchdog_only_while_the_loop_progresses() -> None:
    n, sent = recorder({"WATCHDOG_USEC": "60000000"})
    assert n.stall_after == 30.0 and n.tick_interval == 1.0
    n.tick(lambda: "s", last_progress=100.0, now=129.0)
    assert sent == ["STATUS=s", "WATCHDOG=1"]
    n.tick(lambda: "s", last_progress=100.0, now=130.5)  # stalled 30.5 s > W/2
    assert sent == ["STATUS=s", "WATCHDOG=1"]
    n.tick(lambda: "s", last_progress=131.0, now=131.5)
    assert sent[-1] == "WATCHDOG=1"


def test_reloading_carries_monotonic_usec() -> None:
    n, sent = recorder({})
    n.reloading()
    n.ready("after")
    n.stopping()
    assert sent[0].startswith("RELOADING=1\nMONOTONIC_USEC=")
    usec = int(sent[0].split("MONOTONIC_USEC=")[1])
    assert abs(usec / 1e6 - time.clock_gettime(time.CLOCK_MONOTONIC)) < 5
    assert sent[1] == "READY=1\nSTATUS=after"
    assert sent[2].startswith("STOPPING=1")


def test_a_ready_that_was_not_sent_is_sent_again_at_the_next_tick() -> None:
    sent: list[str] = []
    fail = [True]

    def send(m: str) -> bool:
        sent.append(m)
        return not fail[0]

    n = Notifier(env={"NOTIFY_SOCKET": "/x"}, send=send)
    n.reloading()
    n.ready("after")  # lost: systemd would keep the unit "reloading"
    fail[0] = False
    n.tick(lambda: "after", last_progress=0.0, now=0.0)
    assert sent[2] == "READY=1"
    n.tick(lambda: "after", last_progress=0.0, now=0.0)
    assert sent.count("READY=1") == 1  # once it went out, never again


class GatedEngine(FakeEngine):
    """list_managed blocks while the gate is closed: a stuck reconcile loop."""

    def __init__(self) -> None:
        super().__init__(allow=LOOP_CALLS | {"watch", "stop_watch"})
        self.gate = threading.Event()
        self.gate.set()

    def list_managed(self, service: str | None = None) -> list[ObservedContainer]:
        self.gate.wait()
        return super().list_managed(service)


def test_daemon_notifies_systemd_and_stops_the_watchdog_while_stalled(
    listener: Listener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    monkeypatch.setenv("WATCHDOG_USEC", "2000000")  # ticks every 0.5 s, stall after 1 s
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.setattr(notify, "STATUS_INTERVAL", 0.5)
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "a.yaml").write_text("services:\n  web:\n    image: img:1\n")
    settings = resolve_settings(
        build_parser().parse_args(
            [
                *("--config-dir", str(tmp_path), "--socket", str(tmp_path / "api.sock")),
                *("--state-dir", str(tmp_path / "state")),
            ]
        )
    )
    engine = GatedEngine()
    d = Daemon(settings, engine, SystemClock())
    assert d.notifier.enabled and d.notifier.stall_after == 1.0
    runner = threading.Thread(target=d.run, daemon=True)
    runner.start()
    try:
        ready = listener.wait_for("READY=1")
        listener.wait_for("STATUS=", after=ready)
        first_ping = listener.wait_for("WATCHDOG=1", after=ready)
        listener.wait_for("STATUS=1/1 services converged, 1 containers", timeout=10)

        # The loop gets stuck in an engine call: pings stop, STATUS still flows.
        engine.gate.clear()
        stalled_at = time.monotonic()
        d.controller.reconcile_now()
        time.sleep(3.5)
        quiet_from = stalled_at + 2.0  # stall_after (1 s) + a tick + slack
        late = [t for t, line in listener.lines() if line == "WATCHDOG=1" and t >= quiet_from]
        assert not late, f"WATCHDOG=1 while stalled, {[t - stalled_at for t in late]}"
        resumed_at = time.monotonic()
        engine.gate.set()
        listener.wait_for("WATCHDOG=1", after=resumed_at)

        # A reload: RELOADING=1 with MONOTONIC_USEC, then READY=1.
        reload_at = time.monotonic()
        d.request_reload()
        reloading = listener.wait_for("RELOADING=1", after=reload_at)
        listener.wait_for("MONOTONIC_USEC=", after=reload_at)
        listener.wait_for("READY=1", after=reloading)
    finally:
        engine.gate.set()
        d.request_stop()
        runner.join(10)
    stopping = listener.wait_for("STOPPING=1")
    assert not runner.is_alive()
    lines = [line for _, line in listener.lines()]
    kinds = [line.split("=")[0] for line in lines]
    assert kinds[0] == "READY" and kinds[1] == "STATUS"
    assert ready <= first_ping <= stopping
    assert "WATCHDOG" not in kinds[kinds.index("STOPPING") :]
