"""`healerctl snapshots [SERVICE]`: the volume snapshots healerd keeps (x-healerd:
{snapshot: [VOLUME]}), newest first: when each was taken, before which update (the
digest the service ran and the one it went to), its volumes and their sizes."""

from __future__ import annotations

import time
from typing import Any

from healerd.cli.output import dump, human_age, human_bytes, table
from healerd.cli.postmortem import CtlLike


def short(digest: str) -> str:
    """sha256:0123456789ab... as 0123456789ab; anything else as it is."""
    return digest.split(":", 1)[-1][:12] if digest else "-"


def rows(snapshots: list[dict[str, Any]], now: float) -> list[list[object]]:
    return [
        [
            s["service"],
            s["id"],
            human_age(now - float(s["created"])),
            human_bytes(s["bytes"]),
            ", ".join(f"{v['name']} ({human_bytes(v['bytes'])})" for v in s["volumes"]),
            f"{short(s['from_digest'])} -> {short(s['to_digest'])}",
        ]
        for s in snapshots
    ]


def snapshots(ctl: CtlLike) -> int:
    data = ctl.client.get("/v1/snapshots", service=ctl.args.service)
    if ctl.fmt != "table":
        dump(data, ctl.fmt, ctl.out)
        return 0
    found = data["snapshots"]
    if not found:
        ctl.out.write("No snapshots.\n")
        return 0
    headers = ["SERVICE", "ID", "AGE", "SIZE", "VOLUMES", "UPDATE (FROM -> TO)"]
    ctl.out.write(table(headers, rows(found, time.time())) + "\n")
    return 0


def add_verbs(verb: Any) -> None:
    sp = verb(
        "snapshots",
        "the volume snapshots healerd keeps (x-healerd: {snapshot: [VOLUME]}), newest first: "
        "age, size, volumes, and the update each was taken before",
    )
    sp.add_argument("service", nargs="?", metavar="SERVICE")


__all__ = ["add_verbs", "rows", "snapshots"]
