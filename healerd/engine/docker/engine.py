"""The Docker engine adapter: every role of healerd.engine.api, one module per role
(build, containers, create, events, images, project), on one client (client.py) whose every
request takes from the engine's meter.

It speaks to the low-level API client because the high-level `containers.list()`
inspects every container: N+1 calls where one will do.
"""

from __future__ import annotations

import threading
from typing import Any

from healerd.engine.api import Labelled, Owner
from healerd.engine.docker.archive import DockerArchive
from healerd.engine.docker.build import DockerBuild
from healerd.engine.docker.client import DockerClient
from healerd.engine.docker.containers import DockerContainers
from healerd.engine.docker.create import DockerCreate
from healerd.engine.docker.events import DockerEvents
from healerd.engine.docker.hooks import DockerHooks
from healerd.engine.docker.images import DockerImages
from healerd.engine.docker.listing import RowCache
from healerd.engine.docker.project import DockerProject, Ensured
from healerd.engine.pacing import Meter
from healerd.model import DockerTLS


class DockerEngine(
    DockerArchive,
    DockerBuild,
    DockerContainers,
    DockerCreate,
    DockerEvents,
    DockerHooks,
    DockerImages,
    DockerProject,
):
    def __init__(
        self,
        base_url: str,
        timeout: float = 30.0,
        pool_size: int = 16,
        tls: DockerTLS | None = None,
    ) -> None:
        self.meter = Meter()
        self.owner: Owner = Labelled()
        self._client = DockerClient(base_url, tls, timeout, pool_size, self.meter)
        self._ensured = Ensured(self._client)
        self._rows = RowCache()
        self._watch_lock = threading.Lock()
        self._watch_stream: Any = None
        self._watch_stopped = False

    def version(self) -> str:
        with self._client.call("version"):
            return str(self._client.api.version(api_version=False).get("Version", "?"))

    def api_version(self) -> str | None:
        return self._client.api_version

    def engine_kind(self) -> str | None:
        return self._client.engine_kind

    def identity(self) -> str:
        with self._client.call("info"):
            info = self._client.api.info()
        # dockerd's ID comes from /etc/docker/key.json, shared by every dockerd of a host;
        # no two of them share a data root.
        engine_id, root = info.get("ID"), info.get("DockerRootDir")
        return f"{engine_id} {root}" if engine_id and root else ""

    def data_root(self) -> str | None:
        with self._client.call("info"):
            root = self._client.api.info().get("DockerRootDir")
        return str(root) if root else None


__all__ = ["DockerEngine"]
