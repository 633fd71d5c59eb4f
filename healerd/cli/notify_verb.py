"""`healerctl notify test [--url URL]`: a test message to each of healerd.yaml's
notification targets (or to one URL), sent by the daemon now, and what each answered."""

from __future__ import annotations

from typing import Any

from healerd.cli.output import dump
from healerd.cli.postmortem import CtlLike

EXIT_SOME_FAILED = 1


def notify(ctl: CtlLike) -> int:
    a = ctl.args
    body = {"url": a.url} if a.url else {}
    data = ctl.client.request("POST", "/v1/notify/test", body=body, timeout=120.0)
    if ctl.fmt != "table":
        dump(data, ctl.fmt, ctl.out)
    else:
        for t in data.get("targets", []):
            word = "sent" if t.get("ok") else "FAILED"
            ctl.out.write(f"{t.get('name')}: {word}: {t.get('answer')}\n")
        ctl.out.write(f"{data.get('message', '')}\n")
    return 0 if data.get("ok") else EXIT_SOME_FAILED


def add_verbs(verb: Any) -> None:
    sp = verb(
        "notify",
        "notifications: `notify test` sends a test message to each target of healerd.yaml "
        "(or to --url) now, and says what each answered (exit 1 if one refused)",
    )
    sp.add_argument("action", choices=["test"], metavar="test")
    sp.add_argument("--url", help="send to this Apprise URL only (sent in the body, never logged)")


__all__ = ["add_verbs", "notify"]
