"""What healerd relies on that Podman's Docker-compatible API (4.3, Debian 12's) does not
give, refused at create time as the service's error, naming the key (docs/engines.md).

Podman 4.3's container list carries no health in its Status text ("Up 3 seconds", never
"(healthy)"), its health_status event no status, and its checks run only from systemd
timers: healerd, which reads health from the list, would wait for a health that never
comes (measured: issue 31)."""

from __future__ import annotations

from healerd.engine.api import EngineError
from healerd.model import ServiceSpec

PODMAN = "podman"


def refused(spec: ServiceSpec) -> list[str]:
    """The keys of `spec` healerd cannot serve on Podman 4.3, as written."""
    check = spec.healthcheck
    if check is not None and not check.disable and check.test and check.test[0] != "NONE":
        return ["healthcheck"]
    return []


def check(kind: str | None, version: str | None, spec: ServiceSpec, name: str) -> None:
    """EngineError for the first key of `spec` Podman cannot serve (on Docker: nothing)."""
    if kind != PODMAN:
        return
    for key in refused(spec):
        raise EngineError(
            f"create {name}: {key}: not on Podman {version or '?'} (healerd needs an engine "
            "whose container list reports health; Podman 4.3's does not): use Docker, or "
            "drop the key"
        )


__all__ = ["PODMAN", "check", "refused"]
