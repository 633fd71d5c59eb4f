"""`healerctl logs` and `healerctl describe`: after a failure, what the replica said and
how it ended (the failed containers healerd replaced stay on the engine, stopped, as
history, up to `history_limit` per replica)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable
from email.message import Message
from typing import Any, Protocol, TextIO
from urllib.parse import quote

from healerd.cli.client import Client
from healerd.cli.output import dump
from healerd.cli.terminal import LogWriter, VisibleText
from healerd.cli.views import describe_text

FOLLOW_INTERVAL = 1.0
# As the daemon's default (daemon/api/logs.py): healerctl does not import the daemon.
DEFAULT_TAIL = 1000


class CtlLike(Protocol):
    args: argparse.Namespace
    out: TextIO
    err: TextIO
    client: Client

    @property
    def fmt(self) -> str: ...


def _path(name: str, what: str) -> str:
    return f"/v1/services/{quote(name, safe='')}/{what}"


def logs(ctl: CtlLike) -> int:
    """The output as it comes, never held whole: shown for a terminal (terminal.py),
    the bytes as they are with --raw or into a pipe or file."""
    a = ctl.args
    writer = LogWriter(ctl.out, render=isinstance(ctl.out, VisibleText) and not a.raw)
    params: dict[str, Any] = {"previous": "1" if a.previous else None, "tail": a.tail}
    with ctl.client.stream(_path(a.service, "logs"), params) as got:
        if got.headers.get("X-Healerd-Container") is None:
            why = got.headers.get("X-Healerd-Why", "no container")
            ctl.err.write(f"healerctl: {a.service}: {why}\n")
            return 1
        if a.previous and got.headers.get("X-Healerd-Death"):
            ctl.err.write(_death_line(got.headers["X-Healerd-Container"], got.headers))
        _copy(got.pieces, writer)
        cid, since = got.headers.get("X-Healerd-Container-Id"), got.headers["X-Healerd-Until"]
    if not a.follow or a.previous:
        return 0
    try:
        while True:
            time.sleep(FOLLOW_INTERVAL)
            # Everything since the last answer's end: its lines come whatever their number.
            with ctl.client.stream(
                _path(a.service, "logs"), {"since": since, "tail": "all"}
            ) as got:
                if got.headers.get("X-Healerd-Container-Id") != cid:
                    name = got.headers.get("X-Healerd-Container") or "no container"
                    ctl.err.write(f"# {a.service}: now {name}\n")
                    cid = got.headers.get("X-Healerd-Container-Id")
                _copy(got.pieces, writer)
                since = got.headers.get("X-Healerd-Until", since)
    except KeyboardInterrupt:
        return 0


def _copy(pieces: Iterable[bytes], writer: LogWriter) -> None:
    for piece in pieces:
        writer.write(piece)
    writer.flush()


def _death_line(container: str, headers: Message) -> str:
    try:
        d = json.loads(headers["X-Healerd-Death"])
    except ValueError:
        return ""
    oom = ", OOM-killed" if d.get("oom_killed") else ""
    code = d.get("exit_code")
    how = f"exit code {code}{oom}" if code is not None else "stopped"
    why = str(d.get("why") or "")
    if why:  # a run healerd started again in place: its words, the code if they lack it
        how = why if code is None or f"code {code}" in why else f"{why} ({how})"
    return f"# {container}: {how}, died {d.get('finished_at') or '?'}\n"


def describe(ctl: CtlLike) -> int:
    data = ctl.client.get(_path(ctl.args.service, "describe"))
    if ctl.fmt != "table":
        dump(data, ctl.fmt, ctl.out)
    else:
        ctl.out.write(describe_text(ctl.args.service, data))
    return 0


def _tail(text: str) -> str:
    if text == "all" or (text.isascii() and text.isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"a number of lines or all, not {text!r}")


def add_verbs(verb: Any) -> None:
    sp = verb(
        "logs",
        "a replica's output; --previous: the last failed one's (root, the admin group or "
        "healerd.yaml's logs_group only)",
        output=False,
    )
    sp.add_argument("service", metavar="SERVICE")
    sp.add_argument("--previous", "-p", action="store_true", help="the last failed replica")
    sp.add_argument(
        "--tail",
        type=_tail,
        default=str(DEFAULT_TAIL),
        metavar="N|all",
        help=f"only the last N lines (default {DEFAULT_TAIL}; healerd sends at most 8 MiB, "
        "and says so at the end when it cuts)",
    )
    sp.add_argument("-f", "--follow", action="store_true", help="keep printing new output")
    sp.add_argument(
        "--raw",
        action="store_true",
        help="the bytes as they are, even to a terminal (where control characters are "
        "otherwise shown as ^[ and the like, so that output cannot drive the terminal)",
    )
    sp = verb("describe", "one service in detail: spec, replicas, last failures, events")
    sp.add_argument("service", metavar="SERVICE")


__all__ = ["add_verbs", "describe", "logs"]
