"""What a test or a benchmark sees of the engine: healerd's containers by service, and
counts of their events."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import docker

from healerd.model import LABEL_SERVICE, LABEL_SPEC_HASH


class Cluster:
    def __init__(self, api: docker.APIClient) -> None:
        self.api = api

    def containers(self, service: str, *, all: bool = True) -> list[dict[str, Any]]:
        return list(self.api.containers(all=all, filters={"label": f"{LABEL_SERVICE}={service}"}))

    def running(self, service: str) -> list[dict[str, Any]]:
        return [c for c in self.containers(service) if c["State"] == "running"]

    def converged(self, service: str, replicas: int, spec_hash: str | None = None) -> bool:
        """Exactly `replicas` containers exist for the service, all running (and current)."""
        cs = self.containers(service)
        if len(cs) != replicas or any(c["State"] != "running" for c in cs):
            return False
        return spec_hash is None or all(c["Labels"][LABEL_SPEC_HASH] == spec_hash for c in cs)

    def count_events(self, service: str, action: str, since: float) -> int:
        stream = self.api.events(
            since=_timestamp(since),
            until=_timestamp(time.time() + 0.001),
            filters={"type": "container", "event": action, "label": f"{LABEL_SERVICE}={service}"},
            decode=True,
        )
        return sum(1 for _ in stream)

    def remove_labelled(self, label: str = LABEL_SERVICE) -> None:
        """Force-remove every container with this label (key or key=value): by default
        every container healerd made."""
        for c in self.api.containers(all=True, filters={"label": label}):
            with contextlib.suppress(docker.errors.NotFound):
                self.api.remove_container(c["Id"], force=True)


def _timestamp(t: float) -> str:
    """The engine reads `S.N` with N as nanoseconds, so write all nine digits."""
    return f"{int(t)}.{int((t % 1) * 1e9):09d}"
