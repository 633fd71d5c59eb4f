"""Logging: structured journal entries under systemd, plain stderr lines elsewhere."""

from __future__ import annotations

import logging
import os
import sys
import types
from typing import Any

import pytest

from healerd.daemon import journal
from healerd.daemon.journal import (
    JournalHandler,
    PriorityFormatter,
    make_handler,
    structured_fields,
    under_systemd,
)


class Sent:
    def __init__(self) -> None:
        self.entries: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, message: str, **fields: Any) -> None:
        self.entries.append((message, fields))


def logger_with(handler: logging.Handler) -> logging.Logger:
    log = logging.getLogger(f"healerd.test.{id(handler)}")
    log.handlers = [handler]
    log.propagate = False
    log.setLevel(logging.DEBUG)
    return log


def test_journal_entry_carries_healerd_fields() -> None:
    sent = Sent()
    log = logger_with(JournalHandler(send=sent))
    log.info(
        "%s: created %s (%s)",
        "payment-api",
        "payment-api-abcde-12345",
        "1/3 running",
        extra={
            "healerd_service": "payment-api",
            "container_id": "0123abcd",
            "container_name": "payment-api-abcde-12345",
            "action": "create",
            "reason": "1/3 running",
        },
    )
    message, fields = sent.entries[0]
    assert message == "payment-api: created payment-api-abcde-12345 (1/3 running)"
    assert fields["HEALERD_SERVICE"] == "payment-api"
    assert fields["CONTAINER_ID"] == "0123abcd"
    assert fields["CONTAINER_NAME"] == "payment-api-abcde-12345"
    assert fields["ACTION"] == "create" and fields["REASON"] == "1/3 running"
    assert fields["PRIORITY"] == "6" and fields["SYSLOG_IDENTIFIER"] == "healerd"
    assert isinstance(fields["CODE_LINE"], int)  # systemd.journal.send needs an int
    assert fields["LOGGER"] == log.name


def test_plain_records_get_no_healerd_fields_and_keep_tracebacks() -> None:
    sent = Sent()
    log = logger_with(JournalHandler(send=sent))
    log.warning("engine gone", extra={"reason": "", "unrelated": "x"})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    (_, warn), (text, err) = sent.entries
    assert warn["PRIORITY"] == "4"
    assert not {"HEALERD_SERVICE", "REASON", "UNRELATED"} & set(warn)
    assert err["PRIORITY"] == "3" and "ValueError: boom" in text


def test_structured_fields_only_known_keys() -> None:
    rec = logging.makeLogRecord({"healerd_service": "a", "action": "remove", "other": 1})
    assert structured_fields(rec) == {"HEALERD_SERVICE": "a", "ACTION": "remove"}


def test_a_failing_send_does_not_raise(capsys: pytest.CaptureFixture[str]) -> None:
    def broken(message: str, **fields: Any) -> None:
        raise OSError("journal gone")

    log = logger_with(JournalHandler(send=broken))
    logging.raiseExceptions, old = False, logging.raiseExceptions
    try:
        log.error("still fine")
    finally:
        logging.raiseExceptions = old


def test_priority_prefix_for_stderr_under_systemd() -> None:
    rec = logging.makeLogRecord(
        {"msg": "a\nb", "levelno": logging.WARNING, "levelname": "WARNING", "name": "healerd"}
    )
    assert PriorityFormatter("%(message)s").format(rec) == "<4>a\n<4>b"


def journal_stream_of_stderr() -> str:
    st = os.fstat(sys.stderr.fileno())
    return f"{st.st_dev}:{st.st_ino}"


def test_under_systemd_detection() -> None:
    assert not under_systemd({})
    assert not under_systemd({"JOURNAL_STREAM": "1:2"})
    assert under_systemd({"JOURNAL_STREAM": journal_stream_of_stderr()})


def test_make_handler_elsewhere_is_plain_stderr() -> None:
    h = make_handler({})
    assert isinstance(h, logging.StreamHandler) and h.stream is sys.stderr
    rec = logging.makeLogRecord(
        {"msg": "hi", "levelno": logging.INFO, "levelname": "INFO", "name": "healerd"}
    )
    assert h.format(rec).endswith(" INFO healerd: hi")


def test_make_handler_under_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"JOURNAL_STREAM": journal_stream_of_stderr()}
    sent = Sent()
    monkeypatch.setattr(journal, "_sd_journal", types.SimpleNamespace(send=sent))
    h = make_handler(env)
    assert isinstance(h, JournalHandler)
    logger_with(h).info("x", extra={"healerd_service": "s"})
    assert sent.entries[0][1]["HEALERD_SERVICE"] == "s"
    # Without systemd-python: `<6>` lines on stderr, which journald understands.
    monkeypatch.setattr(journal, "_sd_journal", None)
    h = make_handler(env)
    assert isinstance(h.formatter, PriorityFormatter)
