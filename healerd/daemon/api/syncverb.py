"""POST /v1/sync[?source=NAME]: fetch a git source (or every one) now, `healerctl sync`.

Admin only, as every change. The fetch runs in the source's own thread, as at its
interval; the request waits for that round (at most SYNC_WAIT) so that the answer can
say what came of it: the commit fetched, the one applied, the last error.
"""

from __future__ import annotations

import logging
from typing import Any

from healerd.daemon.api.changes import ApiError
from healerd.daemon.api.views import DaemonLike

log = logging.getLogger("healerd.api")

# Longest the request waits for the fetch it asked for (below healerctl's 40 s).
SYNC_WAIT = 30.0


def sync_verb(
    daemon: DaemonLike, name: str | None, who: str, wait: float = SYNC_WAIT
) -> tuple[int, Any]:
    sources = daemon.sources
    try:
        rounds = sources.sync_now(name)
    except KeyError:
        raise ApiError(404, f"no such source: {(name or '')[:60]}") from None
    if not rounds:
        raise ApiError(404, "no git sources are configured (healerd.yaml's sources:)")
    log.info("sync of %s requested by %s", name or "every source", who)
    done = sources.wait(rounds, wait)
    views = [v for v in sources.views() if v["name"] in rounds]
    failed = [f"{v['name']}: {v['last_error']}" for v in views if v["last_error"]]
    if not done:
        message = f"fetch still under way after {wait:g}s: see healerctl status"
    elif failed:
        message = "; ".join(failed)
    else:
        message = ", ".join(
            f"{v['name']}: {(v['commit'] or '-')[:12]}"
            + (" (new, to be loaded)" if v["candidate_commit"] else "")
            for v in views
        )
    return 200 if done else 202, {
        "ok": done and not failed,
        "done": done,
        "message": message,
        "sources": views,
    }


__all__ = ["SYNC_WAIT", "sync_verb"]
