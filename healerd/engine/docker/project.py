"""A Compose project's networks and volumes: made when a create needs them, pruned when
no declared service uses them (ProjectResources)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import docker.errors

from healerd.engine.api import EngineError
from healerd.engine.docker import request
from healerd.engine.docker.client import DockerClient
from healerd.model import ServiceSpec

_log = logging.getLogger("healerd.engine")


class Ensured:
    """The project's networks and volumes a service uses, made when missing (with
    healerd's labels); one that exists is used as it is, whoever made it. Networks found
    or made are not looked up for every create again; a failed create or start, or a
    prune, forgets them (one removed by hand costs one failure)."""

    def __init__(self, client: DockerClient) -> None:
        self._client = client
        self._lock = threading.Lock()  # two workers must not make one network twice
        self._seen: set[str] = set()

    def forget(self) -> None:
        self._seen.clear()

    def ensure(self, spec: ServiceSpec) -> None:
        api = self._client.api
        with self._lock:
            for n in spec.networks_to_create:
                if n.name in self._seen:
                    continue
                with self._client.call(f"network {n.name}"):
                    # The engine's name filter matches parts of names: compare exactly.
                    found = api.networks(names=[n.name])
                    if not any(net.get("Name") == n.name for net in found):
                        api.create_network(
                            n.name,
                            driver=n.driver,
                            options=dict(n.options) or None,
                            internal=n.internal,
                            attachable=n.attachable,
                            labels={**dict(n.labels), **request.owner_labels(n)},
                            ipam=request.ipam(n),
                            enable_ipv6=n.enable_ipv6,
                        )
                self._seen.add(n.name)
            for v in spec.volumes_to_create:
                with self._client.call(f"volume {v.name}"):
                    try:
                        api.inspect_volume(v.name)
                    except docker.errors.NotFound:
                        api.create_volume(
                            v.name,
                            driver=v.driver,
                            driver_opts=dict(v.options) or None,
                            labels={**dict(v.labels), **request.owner_labels(v)},
                        )


def in_use_or_gone(exc: EngineError, *in_use: int) -> bool:
    """Whether the engine refused a removal because something still uses it (`in_use`
    statuses) or it is gone already: no error for a prune."""
    cause = exc.__cause__
    if isinstance(cause, docker.errors.NotFound):
        return True
    return isinstance(cause, docker.errors.APIError) and cause.status_code in in_use


def host_directory(name: str, attrs: Mapping[str, Any]) -> str:
    """Where a volume's files are on the host, from its inspect (volume_path)."""
    driver, options = attrs.get("Driver"), attrs.get("Options") or {}
    if driver != "local" or options:
        given = f"driver {driver}" + (
            f" with options {', '.join(sorted(options))}" if options else ""
        )
        raise EngineError(
            f"volume {name}: its files are not in a directory of this host ({given}): "
            "only a local volume without driver options can be copied"
        )
    mountpoint = attrs.get("Mountpoint")
    if not isinstance(mountpoint, str) or not mountpoint.startswith("/"):
        raise EngineError(f"volume {name}: the engine gives no mount point ({mountpoint!r})")
    return mountpoint


class DockerProject:
    """ProjectResources."""

    _client: DockerClient
    _ensured: Ensured

    def prune_volumes(self, keep: AbstractSet[str], dry_run: bool) -> list[str]:
        with self._client.call("list volumes"):
            listed = self._client.api.volumes(
                filters={"label": request.LABEL_PROJECT, "dangling": True}
            )
        names = sorted(str(v["Name"]) for v in listed.get("Volumes") or () if v["Name"] not in keep)
        if dry_run:
            return names
        removed = []
        for name in names:
            try:
                with self._client.call(f"remove volume {name}"):
                    self._client.api.remove_volume(name)
                removed.append(name)
                _log.info("removed volume %s (healerctl prune volumes)", name)
            except EngineError as exc:
                if not in_use_or_gone(exc, 409):
                    raise
        return removed

    def volume_path(self, name: str) -> str:
        with self._client.call(f"volume {name}"):
            attrs = self._client.api.inspect_volume(name)
        return host_directory(name, attrs)

    def prune_networks(self, keep: AbstractSet[str]) -> bool:
        self._ensured.forget()
        with self._client.call("list networks"):
            found = self._client.api.networks(filters={"label": request.LABEL_PROJECT})
        done = True
        for net in found:
            name = str(net.get("Name", ""))
            if name in keep:
                continue
            try:
                with self._client.call(f"remove network {name}"):
                    self._client.api.remove_network(net["Id"])
                _log.info("removed network %s: no declared service uses it", name)
            except EngineError as exc:
                if not in_use_or_gone(exc, 403, 409):
                    raise
                if not isinstance(exc.__cause__, docker.errors.NotFound):
                    done = False  # a container still uses it: the next resync tries again
        return done


__all__ = ["DockerProject", "Ensured", "host_directory", "in_use_or_gone"]
