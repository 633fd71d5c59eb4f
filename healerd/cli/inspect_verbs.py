"""`healerctl logs` and `healerctl describe`: after a failure, what the replica said and
how it ended (the failed containers healerd replaced stay on the engine, stopped, as
history, up to `history_limit` per replica)."""

from __future__ import annotations

import argparse
import time
from typing import Any, Protocol, TextIO
from urllib.parse import quote

from healerd.cli.client import Client
from healerd.cli.output import dump
from healerd.cli.views import describe_text

FOLLOW_INTERVAL = 1.0


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
    a = ctl.args
    params: dict[str, Any] = {"previous": "1" if a.previous else None, "tail": a.tail}
    data = ctl.client.get(_path(a.service, "logs"), **params)
    if data.get("container") is None:
        ctl.err.write(f"healerctl: {a.service}: {data.get('why', 'no container')}\n")
        return 1
    if a.previous and data.get("death"):
        d = data["death"]
        oom = ", OOM-killed" if d.get("oom_killed") else ""
        ctl.err.write(
            f"# {data['container']}: exit code {d.get('exit_code')}{oom}, "
            f"died {d.get('finished_at') or '?'}\n"
        )
    ctl.out.write(data["text"])
    if not a.follow or a.previous:
        return 0
    cid, since = data["container_id"], data["until"]
    try:
        while True:
            time.sleep(FOLLOW_INTERVAL)
            data = ctl.client.get(_path(a.service, "logs"), since=f"{since:.3f}")
            if data.get("container_id") != cid:
                ctl.err.write(f"# {a.service}: now {data.get('container')}\n")
                cid = data.get("container_id")
            ctl.out.write(data["text"])
            ctl.out.flush()
            since = data["until"]
    except KeyboardInterrupt:
        return 0


def describe(ctl: CtlLike) -> int:
    data = ctl.client.get(_path(ctl.args.service, "describe"))
    if ctl.fmt != "table":
        dump(data, ctl.fmt, ctl.out)
    else:
        ctl.out.write(describe_text(ctl.args.service, data))
    return 0


def add_verbs(verb: Any) -> None:
    sp = verb("logs", "a replica's output; --previous: the last failed one's", output=False)
    sp.add_argument("service", metavar="SERVICE")
    sp.add_argument("--previous", "-p", action="store_true", help="the last failed replica")
    sp.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    sp.add_argument("-f", "--follow", action="store_true", help="keep printing new output")
    sp = verb("describe", "one service in detail: spec, replicas, last failures, events")
    sp.add_argument("service", metavar="SERVICE")


__all__ = ["add_verbs", "describe", "logs"]
