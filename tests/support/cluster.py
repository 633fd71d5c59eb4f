"""What a test or a benchmark sees of the engine: healerd's containers by service, and
counts of their events."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import docker

from healerd.model import LABEL_REPLACES, LABEL_SERVICE, LABEL_SPEC_HASH


class Cluster:
    def __init__(self, api: docker.APIClient) -> None:
        self.api = api

    def containers(
        self, service: str, *, all: bool = True, history: bool = False
    ) -> list[dict[str, Any]]:
        """The service's containers; without `history`, not the failed ones healerd
        replaced and keeps, stopped, for their logs (they never count as replicas)."""
        cs = list(self.api.containers(all=all, filters={"label": f"{LABEL_SERVICE}={service}"}))
        return cs if history else live(cs)

    def history(self, service: str) -> list[dict[str, Any]]:
        everything = self.containers(service, history=True)
        kept = {c["Id"] for c in live(everything)}
        return [c for c in everything if c["Id"] not in kept]

    def running(self, service: str) -> list[dict[str, Any]]:
        return [c for c in self.containers(service) if c["State"] == "running"]

    def converged(self, service: str, replicas: int, spec_hash: str | None = None) -> bool:
        """Exactly `replicas` containers exist for the service, all running (and current)."""
        cs = self.containers(service)
        if len(cs) != replicas or any(c["State"] != "running" for c in cs):
            return False
        return spec_hash is None or all(c["Labels"][LABEL_SPEC_HASH] == spec_hash for c in cs)

    def count_events(self, service: str, action: str, since: float) -> int:
        return len(self.event_times(service, action, since))

    def event_times(self, service: str, action: str, since: float) -> list[float]:
        """When each `action` event of the service's containers happened (engine time)."""
        stream = self.api.events(
            since=_timestamp(since),
            until=_timestamp(time.time() + 0.001),
            filters={"type": "container", "event": action, "label": f"{LABEL_SERVICE}={service}"},
            decode=True,
        )
        return [float(e["timeNano"]) / 1e9 for e in stream]

    def remove_labelled(self, label: str = LABEL_SERVICE) -> None:
        """Force-remove every container with this label (key or key=value): by default
        every container healerd made."""
        cs = self.api.containers(all=True, filters={"label": label})
        for c in cs:
            self._remove(c["Id"])
        # Their anonymous volumes too (a replacement mounts its predecessor's by name).
        for m in (m for c in cs for m in c.get("Mounts") or []):
            if m.get("Type") == "volume" and len(m.get("Name", "")) == 64:
                with contextlib.suppress(docker.errors.APIError):
                    self.api.remove_volume(m["Name"])
        if label == LABEL_SERVICE:
            # The project networks and volumes healerd made (it never removes them itself).
            with contextlib.suppress(docker.errors.APIError):
                self.api.prune_networks(filters={"label": "io.healerd.project"})
            with contextlib.suppress(docker.errors.APIError):
                self.api.prune_volumes(filters={"label": "io.healerd.project"})

    def _remove(self, cid: str, timeout: float = 15.0) -> None:
        """Force-remove one container. The engine may fail to remove its root filesystem
        ("device or resource busy") while a container another engine on this host starts
        holds a copy of the mount for a moment: retried until the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.api.remove_container(cid, force=True)
                return
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                if "resource busy" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.2)


def live(cs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As healerd.core.planner.history: a stopped container that another container of
    its service replaced is history."""
    replaced = {(c.get("Labels") or {}).get(LABEL_REPLACES) for c in cs}
    return [c for c in cs if c["State"] == "running" or c["Id"] not in replaced]


def _timestamp(t: float) -> str:
    """The engine reads `S.N` with N as nanoseconds, so write all nine digits."""
    return f"{int(t)}.{int((t % 1) * 1e9):09d}"
