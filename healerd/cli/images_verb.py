"""`healerctl images`: the images healerd knows (GET /v1/images): which services declare
each, which auto-update pin names it, the archive of images_dir it was loaded from and
when, whether healerd pulled it, its size; then declared images the engine lacks, and
the archives refused with their reasons."""

from __future__ import annotations

import time
from typing import Any

from healerd.cli.output import dump, human_age, human_bytes, table
from healerd.cli.postmortem import CtlLike


def _name(image: dict[str, Any]) -> str:
    refs = [*image["tags"], *image["digests"]]
    return ", ".join(refs) if refs else str(image["id"]).removeprefix("sha256:")[:12]


def _source(image: dict[str, Any], now: float) -> str:
    loaded = image.get("loaded")
    said = []
    if loaded:
        said.append(f"loaded from {loaded['file']} {human_age(now - float(loaded['at']))} ago")
    if image.get("pulled"):
        said.append("pulled")
    if image.get("built"):
        said.append("built here")
    return "; ".join(said) or "-"


def rows(images: list[dict[str, Any]], now: float) -> list[list[object]]:
    return [
        [
            _name(i),
            str(i["id"]).removeprefix("sha256:")[:12],
            human_bytes(i["size"]),
            ", ".join(i["services"]) or "-",
            ", ".join(i["pinned"]) or "-",
            _source(i, now),
        ]
        for i in images
    ]


def images(ctl: CtlLike) -> int:
    data = ctl.client.get("/v1/images", service=ctl.args.service)
    if ctl.fmt != "table":
        dump(data, ctl.fmt, ctl.out)
        return 0
    now = time.time()
    if data["images"]:
        headers = ["IMAGE", "ID", "SIZE", "DECLARED BY", "PINNED BY", "SOURCE"]
        ctl.out.write(table(headers, rows(data["images"], now)) + "\n")
    else:
        ctl.out.write("No images healerd knows of.\n")
    for m in data.get("missing", []):
        ctl.out.write(f"missing: {m['reference']} (declared by {', '.join(m['services'])})\n")
    for r in data.get("refused", []):
        ctl.out.write(f"refused: {data['images_dir']}/{r['file']}: {r['error']}\n")
    return 0


def add_verbs(verb: Any) -> None:
    sp = verb(
        "images",
        "the images healerd knows, largest first: the services that declare each, the "
        "auto-update pins, the archive of images_dir it was loaded from, whether healerd "
        "pulled it, its size; declared images missing; archives refused and why",
    )
    sp.add_argument("service", nargs="?", metavar="SERVICE", help="only the images it declares")


__all__ = ["add_verbs", "images", "rows"]
