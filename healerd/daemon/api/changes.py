"""Daemon-wide calls of the API, apart from HTTP: pruning volumes, sending a test
notification, and the image list (`healerctl images`)."""

from __future__ import annotations

import logging
from typing import Any

from healerd.core.controller import PruneRefused
from healerd.core.readlanes import Reader
from healerd.daemon.api.views import DaemonLike, ImageWorkLike
from healerd.engine import EngineError

log = logging.getLogger("healerd.api")


class ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def images_response(images: ImageWorkLike, service: str | None, reader: Reader) -> tuple[int, Any]:
    """GET /v1/images (healerd.daemon.imageview), of one service's images or all."""
    try:
        found = images.images_view(reader)
    except EngineError as exc:
        raise ApiError(503, f"cannot list images: engine unreachable: {exc}") from None
    if service is not None:
        found["images"] = [i for i in found["images"] if service in i["services"]]
        found["missing"] = [m for m in found["missing"] if service in m["services"]]
    return 200, found


def prune_volumes(daemon: DaemonLike, dry_run: bool, who: str) -> tuple[int, Any]:
    try:
        names = daemon.controller.prune_volumes(dry_run)
    except PruneRefused as exc:
        raise ApiError(409, str(exc)) from None
    log.info(
        "prune volumes%s requested by %s: %s",
        " (dry run)" if dry_run else "",
        who,
        ", ".join(names) or "none",
    )
    verb = "would remove" if dry_run else "removed"
    msg = f"{verb} {len(names)} volume(s)" + (": " + ", ".join(names) if names else "")
    return 200, {"ok": True, "dry_run": dry_run, "volumes": names, "message": msg}


def notify_test(daemon: DaemonLike, body: dict[str, Any]) -> tuple[int, Any]:
    """A test message to each target, or to the body's `url` (never in the request line:
    that may be logged), sent now; what each answered, masked."""
    url = body.get("url")
    if url is not None and (not isinstance(url, str) or "://" not in url):
        raise ApiError(400, "url: an Apprise URL such as json://HOST/PATH")
    if url is None and not daemon.settings.notifications:
        raise ApiError(409, "no notification target in healerd.yaml (notifications:)")
    results = daemon.notices.test(url)
    sent = sum(1 for r in results if r["ok"])
    return 200, {
        "ok": sent == len(results),
        "targets": results,
        "message": f"{sent} of {len(results)} target(s) took the test message",
    }


__all__ = ["ApiError", "notify_test", "prune_volumes"]
