"""Logging: structured journal entries under systemd, plain lines on stderr elsewhere.

Under systemd (stderr is the journal stream named by $JOURNAL_STREAM, or $INVOCATION_ID
is set) and with systemd-python installed (Debian: python3-systemd), each record becomes
one journal entry: MESSAGE, PRIORITY, SYSLOG_IDENTIFIER=healerd, LOGGER, CODE_*, plus
healerd's own fields taken from `extra=` on the record:

    log.info("%s: created %s", key, name,
             extra={"healerd_service": key, "container_id": cid, "action": "create",
                    "reason": reason})

gives HEALERD_SERVICE=, CONTAINER_ID=, ACTION=, REASON=, so that
`journalctl -u healerd HEALERD_SERVICE=payment-api` works. Keys of `extra` that are not
in FIELDS are ignored; empty values are left out.

Under systemd without systemd-python, lines go to stderr with a `<priority>` prefix,
which journald turns into the entry's PRIORITY. Elsewhere: `time LEVEL logger: message`.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

_sd_journal: Any
try:
    _sd_journal = importlib.import_module("systemd.journal")
except ImportError:
    _sd_journal = None

# extra= key on a log record -> journal field.
FIELDS: dict[str, str] = {
    "healerd_service": "HEALERD_SERVICE",
    "container_id": "CONTAINER_ID",
    "container_name": "CONTAINER_NAME",
    "action": "ACTION",
    "reason": "REASON",
    "healerd_state": "HEALERD_STATE",
}

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
IDENTIFIER = "healerd"


def syslog_priority(levelno: int) -> int:
    if levelno >= logging.CRITICAL:
        return 2
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    if levelno >= logging.INFO:
        return 6
    return 7


def structured_fields(record: logging.LogRecord) -> dict[str, str]:
    """The healerd fields a record carries (from `extra=`), as journal field names."""
    out: dict[str, str] = {}
    for key, field in FIELDS.items():
        value = record.__dict__.get(key)
        if value is None or value == "":
            continue
        out[field] = str(value)
    return out


def under_systemd(env: Mapping[str, str] | None = None, stream: TextIO | None = None) -> bool:
    """True if our stderr goes to the journal (systemd's documented JOURNAL_STREAM check),
    or if systemd started us ($INVOCATION_ID) and journald listens."""
    environ = os.environ if env is None else env
    journal_stream = environ.get("JOURNAL_STREAM", "")
    if journal_stream:
        try:
            st = os.fstat((stream or sys.stderr).fileno())
            dev, ino = journal_stream.split(":", 1)
            if st.st_dev == int(dev) and st.st_ino == int(ino):
                return True
        except (OSError, ValueError, AttributeError):
            pass
    return bool(environ.get("INVOCATION_ID")) and os.path.exists("/run/systemd/journal/socket")


class JournalHandler(logging.Handler):
    """One journal entry per record, with healerd's structured fields."""

    def __init__(self, send: Callable[..., Any] | None = None, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        if send is None:
            if _sd_journal is None:
                raise RuntimeError("systemd-python (python3-systemd) is not installed")
            send = _sd_journal.send
        self._send = send
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields: dict[str, str | int] = {
                "PRIORITY": str(syslog_priority(record.levelno)),
                "SYSLOG_IDENTIFIER": IDENTIFIER,
                "LOGGER": record.name,
                "THREAD_NAME": record.threadName or "",
                "CODE_FILE": record.pathname,
                "CODE_LINE": record.lineno,  # systemd.journal.send formats it with {:d}
                "CODE_FUNC": record.funcName,
            }
            fields.update(structured_fields(record))
            self._send(self.format(record), **fields)
        except Exception:
            self.handleError(record)


class PriorityFormatter(logging.Formatter):
    """`<6>message`: stderr lines journald files under the right priority."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        text = super().format(record)
        return "\n".join(prefix + line for line in text.splitlines() or [""])


def make_handler(env: Mapping[str, str] | None = None) -> logging.Handler:
    """The handler for healerd's root logger, chosen as the module docstring says."""
    if under_systemd(env):
        if _sd_journal is not None:
            return JournalHandler()
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(PriorityFormatter("%(name)s: %(message)s"))
        return handler
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(PLAIN_FORMAT))
    return handler


def setup_logging(level: str) -> None:
    """Structured journal entries under systemd, plain stderr lines elsewhere."""
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[make_handler()])
    # Every engine request at debug level would drown what healerd itself says.
    logging.getLogger("urllib3").setLevel(logging.WARNING)


__all__ = [
    "FIELDS",
    "JournalHandler",
    "make_handler",
    "setup_logging",
    "structured_fields",
    "syslog_priority",
    "under_systemd",
]
