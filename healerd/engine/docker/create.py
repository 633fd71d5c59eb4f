"""A service's container made and started (ContainerRuntime.create_and_start): the
create request from the spec (healerd.engine.docker.request), the project's networks
and volumes first, and nothing half-made left behind when the start fails."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from typing import Any

import docker.errors
import requests.exceptions

from healerd.engine.api import EngineError, Inherited, Owner
from healerd.engine.docker import apiversion, podman, request
from healerd.engine.docker.client import DockerClient
from healerd.engine.docker.listing import observed
from healerd.engine.docker.project import Ensured
from healerd.model import LABEL_SERVICE, ServiceSpec


class DockerCreate:
    _client: DockerClient
    _ensured: Ensured
    owner: Owner

    def create_and_start(
        self, spec: ServiceSpec, name: str, labels: Mapping[str, str], inherit: Inherited = ()
    ) -> str:
        self._client.listening(f"create {name}")
        self._supported(spec, name)
        api = self._client.api
        labels = request.container_labels(spec, self.owner.labels(spec, name, labels))
        binds, mounts, anonymous = request.mounts(spec, self._inherited(spec, inherit))
        port_bindings = request.port_bindings(spec)
        networks = list(spec.networks)
        self._ensured.ensure(spec)
        with self._client.call(f"create {name}"):
            host_config = api.create_host_config(
                binds=binds or None,
                mounts=[*mounts, *request.secret_mounts(spec)] or None,
                port_bindings=port_bindings or None,
                mem_limit=spec.mem_limit,
                nano_cpus=int(spec.cpus * 1e9) if spec.cpus else None,
                network_mode=self._network_mode(spec),
                **request.host_options(spec),
            )
            config = api.create_container_config(
                image=spec.image,
                command=list(spec.command) if spec.command is not None else None,
                entrypoint=list(spec.entrypoint) if spec.entrypoint is not None else None,
                environment=[f"{k}={v}" for k, v in spec.environment] or None,
                labels=labels,
                user=spec.user,
                working_dir=spec.working_dir,
                volumes=anonymous or None,
                ports=request.exposed(spec) or None,
                host_config=host_config,
                healthcheck=request.healthcheck(spec),
                stop_timeout=int(spec.stop_grace_period),
                networking_config=self._endpoints(spec, networks[:1]),
                **request.container_options(spec),
            )
            # The SDK ties StdinOnce to stdin_open; Compose (and `docker run -i`) do not.
            config["StdinOnce"] = False
            created = self._create_from_config(config, name, spec.platform)
        container_id = str(created["Id"])
        try:
            with self._client.call(f"start {name}"):
                for net in networks[1:]:
                    endpoint = request.endpoint(spec, net)
                    api.connect_container_to_network(container_id, net, **endpoint)
                api.start(container_id)
        except EngineError:
            # Leave nothing half-made behind; the next pass creates a fresh one.
            self._ensured.forget()
            self._remove_quietly(container_id)
            raise
        return container_id

    def _supported(self, spec: ServiceSpec, name: str) -> None:
        """A field that needs a newer API than the one spoken with this engine is the
        create's error (the service's action error), before anything is made; so is
        a key Podman cannot serve, on Podman (podman.py)."""
        podman.check(self._client.engine_kind, self._client.engine_version, spec, name)
        needs = request.api_needs(spec)
        if needs:
            with self._client.call(f"create {name}"):
                version = self._client.negotiated()
            for what, needed in needs:
                apiversion.needs(version, needed, f"create {name}: {what}")

    def _create_from_config(self, config: Any, name: str, platform: str | None) -> Any:
        """Debian 12's SDK (python3-docker 5.0.3) takes no platform here: only a service
        that asks for one needs a newer SDK. A failure forgets the networks seen: one
        may be gone (look again next time)."""
        api = self._client.api
        try:
            if platform is None:
                return api.create_container_from_config(config, name)
            return api.create_container_from_config(config, name, platform)
        except docker.errors.APIError:
            self._ensured.forget()
            raise
        except TypeError as exc:
            raise EngineError(
                f"create {name}: platform needs the docker SDK 6 or later ({exc})"
            ) from exc

    def _endpoints(self, spec: ServiceSpec, networks: list[str]) -> Any:
        """The primary network's endpoint with the service's aliases, fixed addresses and
        links (None: the engine's default, or a network without aliases such as host)."""
        api = self._client.api
        endpoints = {net: request.endpoint(spec, net) for net in networks}
        if not any(endpoints.values()):
            return None
        return api.create_networking_config(
            {net: api.create_endpoint_config(**e) for net, e in endpoints.items()}
        )

    def _network_mode(self, spec: ServiceSpec) -> str | None:
        """network_mode service:NAME is the namespace of the oldest running container of
        service NAME (as Compose takes its first) whose signature verifies (never a copy
        carrying its labels); none running is an error, retried."""
        service = request.shared_network(spec)
        if service is None:
            return request.network_mode(spec)
        with self._client.call(f"list containers of {service}"):
            found = self._client.api.containers(
                all=True, filters={"label": f"{LABEL_SERVICE}={service}"}
            )
        # The whole service to the owner: its report of unverified ones stays as it is.
        mine = [c for c in self.owner.mine([observed(r) for r in found], service) if c.running]
        if not mine:
            raise EngineError(
                f"network_mode service:{service}: no container of {service} is running yet"
            )
        oldest = min(mine, key=lambda c: (c.created, c.id))
        return f"container:{oldest.id}"

    def _inherited(self, spec: ServiceSpec, inherit: Inherited) -> list[tuple[str, str]]:
        """The anonymous volumes a replacement takes over, as `docker compose up` does on
        a recreate: those mounted where the new spec declares an anonymous volume or its
        image a VOLUME; not where the target now has a source of its own, or is gone."""
        if not inherit:
            return []
        declared = {v.target for v in spec.volumes if not v.source and v.kind in ("", "volume")}
        bound = {v.target for v in spec.volumes if v.source or v.kind in ("bind", "tmpfs")}
        with self._client.call(f"inspect image {spec.image}"):
            config = self._client.api.inspect_image(spec.image).get("Config") or {}
        declared |= set(config.get("Volumes") or {})
        return [(v, t) for v, t in inherit if t in declared and t not in bound]

    def _remove_quietly(self, container_id: str) -> None:
        """A container made by a create whose start failed, with the anonymous volumes
        made for it (`v`): a retry every few seconds must not leave one behind each time
        (issue 28: 13 in 40 s). Volumes it took over from its predecessor are mounted by
        name and stay: the engine removes only those it made for this container."""
        with suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            self._client.api.remove_container(container_id, force=True, v=True)


__all__ = ["DockerCreate"]
