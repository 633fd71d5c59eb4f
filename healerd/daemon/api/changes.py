"""Two daemon-wide changes of the API, apart from HTTP: pruning volumes and sending a
test notification."""

from __future__ import annotations

import logging
from typing import Any

from healerd.core.controller import PruneRefused
from healerd.daemon.api.views import DaemonLike

log = logging.getLogger("healerd.api")


class ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


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
