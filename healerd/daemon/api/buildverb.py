"""POST /v1/build (`healerctl build [SERVICE]`): the config read again (so every build
context is hashed as it is now; a changed one rolls its service out), then each service
with `build:` (or the one named) built when its image is not of that context, or always
with `no_cache`. Admin only, as every change; the builds run in the request's thread."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from healerd.daemon.api.changes import ApiError
from healerd.daemon.api.views import DaemonLike
from healerd.engine import EngineError, ImageBuildFailed

log = logging.getLogger("healerd.api")


def build_verb(
    daemon: DaemonLike,
    one: Callable[[str], str | None],
    who: str,
    reload: Callable[[], bool],
) -> tuple[int, Any]:
    """`reload()` reads the config again and says whether it applied."""
    name, no_cache = one("service"), one("no_cache") in ("1", "true")
    since = daemon.controller.build_mark()  # a pass may build first once the reload is in
    if not reload():
        raise ApiError(503, "the configuration was not read again in time: try once more")
    services = daemon.controller.desired.services
    if name is not None and name not in services:
        raise ApiError(404, f"no such service: {name}")
    chosen = [name] if name is not None else sorted(services)
    builds = [(n, services[n]) for n in chosen if services[n].build is not None]
    if name is not None and not builds:
        raise ApiError(409, f"{name} has no build section")
    log.info("build of %s requested by %s", name or "every service that builds", who)
    results = []
    for key, spec in builds:
        try:
            said, ok = daemon.controller.build_now(key, spec, no_cache=no_cache, since=since), True
        except (ImageBuildFailed, EngineError) as exc:
            said, ok = str(exc), False
        results.append({"service": key, "image": spec.image, "ok": ok, "message": said})
        # Looked at again either way: a new image rolls out; after a failure the pass
        # sets the status (the build announced itself there as under way).
        daemon.controller.reconcile_now(key)
    return 200, {"ok": all(r["ok"] for r in results), "builds": results}


__all__ = ["build_verb"]
