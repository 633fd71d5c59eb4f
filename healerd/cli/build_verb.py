"""`healerctl build [SERVICE] [--no-cache]`: the config read again (each build context
hashed as it is now) and every service with `build:` (or SERVICE) built whose image is
not of its context; the result per service. Exit 1 when a build failed."""

from __future__ import annotations

from typing import Any

from healerd.cli.output import dump, table
from healerd.cli.postmortem import CtlLike
from healerd.cli.terminal import visible

BUILD_WAIT = 3600.0  # a build may take long on a small board


def build(ctl: CtlLike) -> int:
    params = {"service": ctl.args.service, "no_cache": "1" if ctl.args.no_cache else None}
    query = {k: v for k, v in params.items() if v is not None}
    data = ctl.client.request("POST", "/v1/build", query, timeout=BUILD_WAIT)
    if ctl.fmt != "table":
        dump(data, ctl.fmt, ctl.out)
    elif not data["builds"]:
        ctl.out.write("No service builds its image.\n")
    else:
        builds = data["builds"]
        rows: list[list[object]] = [
            [b["service"], b["image"], "ok" if b["ok"] else "FAILED", b["message"].split("\n")[0]]
            for b in builds
        ]
        ctl.out.write(table(["SERVICE", "IMAGE", "BUILD", "RESULT"], rows) + "\n")
        for b in (b for b in builds if not b["ok"]):
            # The builder's last lines, as it wrote them (control characters shown).
            lines = b["message"].split("\n")[1:]
            ctl.out.write("".join(f"  {b['service']}: {visible(line)}\n" for line in lines))
    return 0 if data["ok"] else 1


def add_verbs(verb: Any) -> None:
    sp = verb(
        "build",
        "read the config again and build the images of the services with build: whose "
        "context changed (or is not built yet); they roll out on the new image",
    )
    sp.add_argument("service", nargs="?", metavar="SERVICE")
    sp.add_argument(
        "--no-cache",
        action="store_true",
        help="build even when up to date, without the build cache",
    )


__all__ = ["add_verbs", "build"]
