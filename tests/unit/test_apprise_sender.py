"""The Apprise sender: a refused send answers without the URL's secrets, and sends to
two targets side by side never mix what Apprise logged (one target's answer never
carries another's URL). Loopback only: a port nobody listens on."""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from healerd.daemon.apprisesend import AppriseSender, _SendLog


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_send_answers_without_the_url_s_secrets(caplog: pytest.LogCaptureFixture) -> None:
    url = f"json://alice:t0ken-xyz@127.0.0.1:{_closed_port()}/hook-path"
    with caplog.at_level(logging.DEBUG):
        ok, said = AppriseSender().send(url, "title", "body", True)
    assert not ok and "connection error" in said.lower(), said  # the plugin's own words
    for secret in ("t0ken-xyz", "hook-path", "alice"):
        assert secret not in said
    assert "t0ken-xyz" not in caplog.text


def test_what_apprise_logs_is_captured_from_the_send_alone() -> None:
    apprise_log = logging.getLogger("apprise")
    AppriseSender()  # sets the apprise logger up as the daemon has it
    inside, other = threading.Event(), threading.Event()

    def another_target() -> None:
        inside.wait(5)
        apprise_log.error("failed to send to json://bob:other-secret@host/")
        other.set()

    t = threading.Thread(target=another_target)
    t.start()
    with _SendLog() as mine:
        apprise_log.error("failed to send to json://alice:my-secret@host/")
        inside.set()
        other.wait(5)
    t.join(5)
    assert mine.lines == ["failed to send to json://alice:my-secret@host/"]


def test_a_url_checked_beside_a_send_leaves_the_send_its_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A notification URL checked (a reload, healerctl validate) while a send runs: the
    send's answer keeps what Apprise logged of it. The check used to raise the logger's
    level around its own call, and a send's lines were dropped meanwhile (its answer then
    said "refused, without a reason")."""
    import apprise

    from healerd.config import notifyconf

    AppriseSender()
    apprise_log = logging.getLogger("apprise")
    checking, logged = threading.Event(), threading.Event()
    real = apprise.Apprise.instantiate

    def slow(url: str, *args: object, **kwargs: object) -> object:
        checking.set()
        assert logged.wait(5)
        return real(url, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(apprise.Apprise, "instantiate", staticmethod(slow))
    check = threading.Thread(target=notifyconf._apprise_knows, args=("json://127.0.0.1:9/",))
    check.start()
    try:
        assert checking.wait(5)
        with _SendLog() as captured:
            apprise_log.warning("Failed to send JSON notification: connection refused")
    finally:
        logged.set()
        check.join(5)
    assert captured.lines == ["Failed to send JSON notification: connection refused"]
    assert apprise_log.level == logging.INFO and not apprise_log.propagate
