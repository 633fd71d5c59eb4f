"""POST /v1/services/NAME/{update,rollback,pin,unpin}: an operator's word on a followed
tag (admin only, as every change; each is an event and a log line naming the caller).

`update` checks now and rolls a new digest out whatever update_window and update_delay
say (never past update_lock or pre_update: those are the application's); `check=1` looks
and tells only. `rollback` goes back to the digest before. `pin` (with `digest`) runs
that digest until `unpin`; auto-update leaves a pinned service alone."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from healerd.core.updates import UpdateRefused
from healerd.daemon.api.changes import ApiError
from healerd.daemon.api.views import DaemonLike
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.api")

VERBS = ("update", "rollback", "pin", "unpin")
PARAMS = {
    "update": {"allow_downgrade", "retry_failed", "check"},
    "pin": {"digest"},
    "rollback": set(),
    "unpin": set(),
}


def _on(one: Callable[[str], str | None], name: str) -> bool:
    return one(name) in ("1", "true")


def update_verb(
    daemon: DaemonLike,
    name: str,
    verb: str,
    one: Callable[[str], str | None],
    who: str,
    release: Callable[[], None] = lambda: None,
) -> tuple[int, Any]:
    """`release`: the request's deadline ends (a rollback may pull its image first)."""
    if name not in daemon.controller.desired.services:
        raise ApiError(404, f"no such service: {name}")
    images = daemon.images
    try:
        if verb == "update":
            return _update(daemon, name, one, who)
        if verb == "rollback":
            release()
            said = images.rollback(name)
        else:
            digest = (one("digest") or "") if verb == "pin" else ""
            if verb == "pin" and not digest:
                raise ApiError(400, "pin needs a digest (sha256:...)")
            said = images.pin(name, digest)
    except UpdateRefused as exc:
        raise ApiError(409, str(exc)) from None
    log.info("%s of %s requested by %s: %s", verb, name, who, said)
    return 200, {"ok": True, "service": name, "message": said}


def _update(
    daemon: DaemonLike, name: str, one: Callable[[str], str | None], who: str
) -> tuple[int, Any]:
    downgrade, retry, look = (
        _on(one, "allow_downgrade"),
        _on(one, "retry_failed"),
        _on(one, "check"),
    )
    if not daemon.images.update_now(name, downgrade=downgrade, retry_failed=retry, look=look):
        raise ApiError(
            409, f"{name} does not follow its tag (x-healerd: {{auto_update: registry}} or notify)"
        )
    allowed = [w for w, on in (("a downgrade", downgrade), ("a failed digest", retry)) if on]
    what = "update check" if look else "update"
    also = f" ({' and '.join(allowed)} allowed once)" if allowed else ""
    daemon.controller.events.record(
        EventKind.UPDATE_REQUESTED, name, f"healerctl {what} by {who}{also}"
    )
    log.info(
        "%s of %s%s requested by %s",
        what,
        name,
        f" ({' and '.join(allowed)} allowed once)" if allowed else "",
        who,
    )
    how = (
        "look only"
        if look
        else "now, whatever update_window and update_delay say (not past update_lock or pre_update)"
    )
    msg = f"{what} of {name} queued ({how})" + (
        f"; {' and '.join(allowed)} allowed once" if allowed else ""
    )
    return 202, {"ok": True, "service": name, "message": f"{msg}: see healerctl status {name}"}


__all__ = ["PARAMS", "VERBS", "update_verb"]
