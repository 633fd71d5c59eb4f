"""`healerctl update SERVICE`: ask a followed tag's registry now (x-healerd: {auto_update:
registry}), and give the operator's word for what the auto-updater never does alone:
roll back to a digest the service ran before when the tag moved back
(`--allow-downgrade`), or try again a digest that failed a rollout (`--retry-failed`).
Each allowance counts for the service's next check only."""

from __future__ import annotations

from typing import Any

from healerd.cli.client import service_path
from healerd.cli.output import dump
from healerd.cli.postmortem import CtlLike


def update(ctl: CtlLike) -> int:
    a = ctl.args
    flags = [("allow_downgrade", a.allow_downgrade), ("retry_failed", a.retry_failed)]
    query = "&".join(f"{name}=1" for name, on in flags if on)
    data = ctl.client.post(service_path(a.service, "update") + (f"?{query}" if query else ""))
    if ctl.fmt != "table":
        dump(data, ctl.fmt, ctl.out)
    else:
        ctl.out.write(f"{data.get('message', 'ok')}\n")
    return 0


def add_verbs(verb: Any) -> None:
    sp = verb(
        "update",
        "check a service's tag in its registry now (auto_update: registry); a digest it "
        "ran before (a tag moved back) or one that failed is rolled out only when told",
    )
    sp.add_argument("service", metavar="SERVICE")
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


__all__ = ["add_verbs", "update"]
