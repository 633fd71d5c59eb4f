"""Issue 29, point 11: what others chose (containers' output, a registry's error text,
the engine's words) cannot drive the operator's terminal through healerctl. On a
terminal, control characters are shown (`^[`), in table cells always; `logs --raw`, or
output to a pipe, keeps the bytes. healerctl runs against the real API server and the
fake daemon of test_api."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.cli import healerctl
from healerd.cli.output import one_line, table
from healerd.config import ConfigError, DesiredState
from healerd.daemon.api.server import ApiOptions, ApiServer
from healerd.engine import LogStream
from healerd.model import ContainerState, ObservedContainer
from healerd.vocabulary import EventKind
from tests.unit.harness.api import FakeDaemon

# What the review's e11_escapes.py printed through healerctl: a window title, a cleared
# screen, fake coloured text and an OSC 52 write to the clipboard.
EVIL = (
    "ok\x1b]0;owned-title\x07\x1b[2J\x1b[1;31mFAKE: healerd converged\x1b[0m"
    "\x1b]52;c;ZWNobw==\x07\n"
)
SHOWN = "ok^[]0;owned-title^G^[[2J^[[1;31mFAKE: healerd converged^[[0m^[]52;c;ZWNobw==^G\n"
REASON = "cannot pull reg.evil/app:1: unauthorized: \x1b[8mhidden\x1b[0m\x1b]0;x\x07\r\nnext"


class Terminal(io.TextIOWrapper):
    """A terminal as healerctl sees one: a text stream over bytes that says it is a tty."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", newline="")

    def isatty(self) -> bool:
        return True

    def value(self) -> bytes:
        self.flush()
        buffer = self.buffer
        assert isinstance(buffer, io.BytesIO)
        return buffer.getvalue()


class Pipe(Terminal):
    def isatty(self) -> bool:
        return False


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[FakeDaemon]:
    d = FakeDaemon(tmp_path / "healerd.sock")
    server = ApiServer(d, ApiOptions(request_deadline=2.0))
    server.start()
    yield d
    server.stop()


def run(d: FakeDaemon, out: io.TextIOWrapper, *argv: str) -> int:
    err = io.StringIO()
    code = healerctl.main(["--socket", str(d.settings.socket_path), *argv], out, err)
    assert code == 0, err.getvalue()
    return code


def output(d: FakeDaemon, data: bytes) -> None:
    c = ObservedContainer("c1" * 32, "web-abcde-11111", "web", "h", ContainerState.RUNNING, 0)
    d.controller.output = lambda: (c, LogStream([data[:7], data[7:]]))  # split mid-sequence


def test_table_cells_show_control_characters_wherever_they_go() -> None:
    text = table(["NAME", "REASON"], [["web", REASON]])
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "^[[8mhidden^[[0m^[]0;x^G^M^Jnext" in text
    assert table(["A"], [["\x9b2J\x7f"]]).splitlines()[1] == "\\x9b2J^?"
    assert (
        one_line(REASON)
        == "cannot pull reg.evil/app:1: unauthorized: ^[[8mhidden^[[0m^[]0;x^G next"
    )


def test_status_and_events_on_a_terminal_show_escapes(daemon: FakeDaemon) -> None:
    daemon.controller.events.record(EventKind.FAILED, "web", REASON, "web-abcde-11111")
    for argv in (["status"], ["events"], ["describe", "web"]):
        out = Terminal()
        run(daemon, out, *argv)
        assert b"\x1b" not in out.value() and b"\x07" not in out.value(), argv
    # A config error line (not a table) is shown too, on a terminal.
    c = daemon.controller
    bad = ConfigError("/etc/healerd/conf.d/x.yaml", 1, "image", "bad \x1b[2J")
    c.desired = DesiredState(c.desired.services, (bad,), False, ())
    out = Terminal()
    run(daemon, out, "status")
    assert b"bad ^[[2J" in out.value()


def test_logs_on_a_terminal_show_control_characters(daemon: FakeDaemon) -> None:
    output(daemon, EVIL.encode())
    out = Terminal()
    run(daemon, out, "logs", "web")
    assert out.value().decode() == SHOWN
    # A TTY container's CR LF stays; a lone CR, a C1 CSI and bytes that are not UTF-8
    # are shown.
    output(daemon, b"line\r\nover\rwrite \xc2\x9b2J \xff\xfe end\r\n")
    out = Terminal()
    run(daemon, out, "logs", "web")
    assert out.value().decode() == "line\r\nover^Mwrite \\x9b2J \ufffd\ufffd end\r\n"


def test_logs_raw_or_to_a_pipe_are_the_bytes_as_they_are(daemon: FakeDaemon) -> None:
    data = EVIL.encode() + b"\x00\xff\r"
    for out, argv in ((Terminal(), ["--raw"]), (Pipe(), [])):
        output(daemon, data)
        run(daemon, out, "logs", "web", *argv)
        assert out.value() == data, argv


def test_healerctl_logs_asks_for_1000_lines_unless_told(daemon: FakeDaemon) -> None:
    for argv, tail in (([], 1000), (["--tail", "all"], None), (["--tail", "5"], 5)):
        output(daemon, b"x\n")
        run(daemon, Pipe(), "logs", "web", *argv)
        assert daemon.controller.calls[-1] == ("logs", ("web", False, tail, None)), argv
    err = io.StringIO()
    code = healerctl.main(["logs", "web", "--tail", "-1"], io.StringIO(), err)
    assert code == healerctl.EXIT_USAGE


def test_a_cut_is_said_at_the_end_of_the_output(daemon: FakeDaemon) -> None:
    big = b"z" * (9 * 2**20)
    output(daemon, big)
    out = Pipe()
    t0 = time.monotonic()
    run(daemon, out, "logs", "web", "--tail", "all")
    got = out.value()
    assert got[: 8 * 2**20] == big[: 8 * 2**20]
    assert (
        got[8 * 2**20 :]
        == b"\n[healerd: output cut at 8 MiB: ask for less with --tail or --since]\n"
    )
    assert time.monotonic() - t0 < 10
