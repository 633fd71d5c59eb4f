"""`healerctl sync [SOURCE]`: fetch a git source (or every one) now instead of at its
interval, and say what came of it: the commit fetched, a new one to be loaded, or why
it was refused or could not be fetched (exit 1 then). healerd.yaml's `sources:`."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from healerd.cli.output import dump
from healerd.cli.postmortem import CtlLike


def sync(ctl: CtlLike) -> int:
    name = ctl.args.source
    query = f"?source={quote(name, safe='')}" if name else ""
    data = ctl.client.post(f"/v1/sync{query}")
    if ctl.fmt != "table":
        dump(data, ctl.fmt, ctl.out)
    else:
        ctl.out.write(f"{data.get('message', 'ok')}\n")
    return 0 if data.get("ok") else 1


def add_verbs(verb: Any) -> None:
    sp = verb(
        "sync",
        "fetch a git source of healerd.yaml (or every one) now, check its commit's "
        "signature and say what came of it (exit 1 if a fetch failed or a commit was refused)",
    )
    sp.add_argument("source", nargs="?", metavar="SOURCE")


__all__ = ["add_verbs", "sync"]
