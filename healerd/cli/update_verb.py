"""The operator's word on a followed tag (x-healerd: {auto_update: registry | notify}):
`healerctl update SERVICE` rolls a new digest out now, whatever update_window and
update_delay say (never past update_lock or pre_update), or only looks (`--check`); it
also allows, once, what the auto-updater never does alone: go back to a digest the
service ran before when the tag moved back (`--allow-downgrade`), or try again one that
failed (`--retry-failed`). `rollback` goes back to the digest before (pulled first if
it is gone); `pin` runs a digest until `unpin`."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from healerd.cli.client import service_path
from healerd.cli.output import dump
from healerd.cli.postmortem import CtlLike

ROLLBACK_WAIT = 1800.0


def _say(ctl: CtlLike, data: dict[str, Any]) -> int:
    if ctl.fmt != "table":
        dump(data, ctl.fmt, ctl.out)
    else:
        ctl.out.write(f"{data.get('message', 'ok')}\n")
    return 0


def update(ctl: CtlLike) -> int:
    a = ctl.args
    flags = [
        ("allow_downgrade", a.allow_downgrade),
        ("retry_failed", a.retry_failed),
        ("check", a.check),
    ]
    query = "&".join(f"{name}=1" for name, on in flags if on)
    return _say(
        ctl, ctl.client.post(service_path(a.service, "update") + (f"?{query}" if query else ""))
    )


def rollback(ctl: CtlLike) -> int:
    # healerd pulls the previous image first when it is gone: a pull may take minutes.
    path = service_path(ctl.args.service, "rollback")
    return _say(ctl, ctl.client.request("POST", path, timeout=ROLLBACK_WAIT))


def pin(ctl: CtlLike) -> int:
    digest = quote(ctl.args.digest, safe=":")
    return _say(ctl, ctl.client.post(service_path(ctl.args.service, "pin") + f"?digest={digest}"))


def unpin(ctl: CtlLike) -> int:
    return _say(ctl, ctl.client.post(service_path(ctl.args.service, "unpin")))


def add_verbs(verb: Any) -> None:
    sp = verb(
        "update",
        "roll a followed tag's new digest out now (auto_update: registry or notify), "
        "whatever update_window and update_delay say; never past update_lock or pre_update",
    )
    sp.add_argument("service", metavar="SERVICE")
    sp.add_argument(
        "--check",
        action="store_true",
        help="only ask the registry now and tell what it says (status, events)",
    )
    sp.add_argument(
        "--allow-downgrade",
        action="store_true",
        help="if the tag moved back to a digest the service ran before, roll back to it (once)",
    )
    sp.add_argument(
        "--retry-failed",
        action="store_true",
        help="if the tag names a digest whose rollout failed, try it once more",
    )
    sp = verb(
        "rollback",
        "go back to the digest the service ran before (that one is not tried again "
        "until --retry-failed); ends a pin",
    )
    sp.add_argument("service", metavar="SERVICE")
    sp = verb("pin", "run this digest of the service's tag until unpin; auto-update leaves it")
    sp.add_argument("service", metavar="SERVICE")
    sp.add_argument("digest", metavar="DIGEST", help="sha256:<64 hex digits>")
    sp = verb("unpin", "follow the tag again (auto_update) after a pin")
    sp.add_argument("service", metavar="SERVICE")


__all__ = ["add_verbs", "pin", "rollback", "unpin", "update"]
