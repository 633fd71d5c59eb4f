"""What healerd relies on that Podman's Docker-compatible API (4.3, Debian 12's) does not
give, refused as an error naming the key (docs/engines.md); measured for issue 31:

- healthcheck: the container list carries no health in its Status text ("Up 3 seconds",
  never "(healthy)"), the health_status event no status, and the checks run only from
  systemd timers: healerd, which reads health from the list, would wait for ever;
- network_mode service:NAME or container:NAME: the list carries no HostConfig, so
  healerd cannot see whose namespace a container joined, nor follow its owner's restart;
- the restart hand-off at a stop: there is no /containers/ID/update (404).
"""

from __future__ import annotations

from healerd.engine.api import EngineError, Unsupported
from healerd.model import ServiceSpec

PODMAN = "podman"
_WHY = {
    "healthcheck": "healerd reads health from the container list, and Podman 4.3's has none",
    "network_mode": "healerd reads whose namespace a container joined from the container "
    "list, and Podman 4.3's does not say",
}


def refused(spec: ServiceSpec) -> list[str]:
    """The keys of `spec` healerd cannot serve on Podman 4.3, as written."""
    keys = []
    check = spec.healthcheck
    if check is not None and not check.disable and check.test and check.test[0] != "NONE":
        keys.append("healthcheck")
    mode = spec.network_mode or ""
    if mode.startswith(("service:", "container:")):
        keys.append("network_mode")
    return keys


def check(kind: str | None, version: str | None, spec: ServiceSpec, name: str) -> None:
    """EngineError for the first key of `spec` Podman cannot serve (on Docker: nothing)."""
    if kind != PODMAN:
        return
    for key in refused(spec):
        written = f"network_mode {spec.network_mode}" if key == "network_mode" else key
        raise EngineError(
            f"create {name}: {written}: not on Podman {version or '?'} ({_WHY[key]}): "
            "use Docker, or drop the key"
        )


def no_update(kind: str | None, version: str | None, what: str) -> None:
    """Unsupported on Podman: it has no endpoint to change a container's restart policy."""
    if kind == PODMAN:
        raise Unsupported(
            f"{what}: not on Podman {version or '?'} (it has no /containers/ID/update): the "
            "engine's restart policy cannot be handed the container"
        )


__all__ = ["PODMAN", "check", "no_update", "refused"]
