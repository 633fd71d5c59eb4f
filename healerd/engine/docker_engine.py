"""The docker SDK adapter: with docker_client.py (the SDK's client, a pull's
credentials) and docker_errors.py (the SDK's errors in healerd's words), the only code
that imports `docker`.

It speaks to the low-level API client (`client.api`) because the high-level
`containers.list()` inspects every container: N+1 calls where one will do.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager, suppress
from typing import Any

import docker
import docker.auth
import docker.credentials
import docker.errors
import docker.tls
import docker.utils
import requests.exceptions
import urllib3.exceptions

from healerd.engine import (
    CannotRestart,
    Death,
    EngineError,
    EngineUnavailable,
    ImageMissing,
    ImagePullFailed,
    LocalImage,
    LogStream,
    imagelist,
    logstream,
    request,
)
from healerd.engine.docker_client import _auth_config, _client, listening
from healerd.engine.docker_errors import needs_new, removed, translated
from healerd.engine.listing import WATCHED_EVENTS, RowCache, event_of, int_or_none, rows_of
from healerd.model import (
    LABEL_SERVICE,
    ContainerState,
    DockerTLS,
    EngineEvent,
    ObservedContainer,
    RegistryAuth,
    ServiceSpec,
)

_log = logging.getLogger("healerd.engine")


class DockerEngine:
    def __init__(
        self,
        base_url: str,
        timeout: float = 30.0,
        pool_size: int = 16,
        tls: DockerTLS | None = None,
    ) -> None:
        self._base_url, self._tls = base_url, tls
        self._timeout = float(int(timeout))
        self._api = _client(base_url, tls, timeout=int(timeout), max_pool_size=pool_size)
        self._watch_lock = threading.Lock()
        self._ensure_lock = threading.Lock()  # two workers must not make one network twice
        self._watch_stream: Any = None
        self._watch_stopped = False
        self._rows = RowCache()
        # Networks found or made by _ensure, not looked up for every create again; a
        # failed create or a prune forgets them (one removed by hand costs one failure).
        self._networks_seen: set[str] = set()

    @contextmanager
    def _call(self, what: str) -> Iterator[None]:
        """translated(), and an engine that cannot be reached drops the pooled
        connections: a dockerd that shuts down refuses new connections but still
        answers on open ones, and a start slipped through one would be a container its
        shutdown stops again (and waits for, up to its timeout), and healerd would take
        that stop for a crash. Without them, the next call finds the engine away."""
        try:
            with translated(what):
                yield
        except EngineUnavailable:
            self._api.close()
            raise

    def _listening(self, what: str) -> None:
        """Before a start or a create: the engine still takes new connections. A dockerd
        that shuts down closes its listener first and answers on open connections only
        while it stops its containers: one started then is stopped again by that very
        shutdown, which waits for it (up to its 15 s), and healerd would see a crash.
        A connect, no request (a tenth of a millisecond on a unix socket)."""
        with self._call(what):
            if not listening(self._base_url):
                raise requests.exceptions.ConnectionError(
                    "the engine takes no new connection (shutting down?)"
                )

    def version(self) -> str:
        with self._call("version"):
            return str(self._api.version(api_version=False).get("Version", "?"))

    def identity(self) -> str:
        with self._call("info"):
            info = self._api.info()
        # dockerd's ID comes from /etc/docker/key.json, shared by every dockerd of a host;
        # no two of them share a data root.
        engine_id, root = info.get("ID"), info.get("DockerRootDir")
        return f"{engine_id} {root}" if engine_id and root else ""

    def data_root(self) -> str | None:
        with self._call("info"):
            root = self._api.info().get("DockerRootDir")
        return str(root) if root else None

    def list_managed(self, service: str | None = None) -> list[ObservedContainer]:
        label = LABEL_SERVICE if service is None else f"{LABEL_SERVICE}={service}"
        return self._rows.parse(self._list_rows({"label": label}), service)

    def _list_rows(self, filters: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
        """APIClient.containers(all=True), its rows decoded one at a time (rows_of)."""
        params: dict[str, object] = {"all": 1}
        if filters:
            params["filters"] = docker.utils.convert_filters(filters)
        with self._call("list containers"):  # a garbled body too, row by row
            response = self._api._get(self._api._url("/containers/json"), params=params)
            yield from rows_of(str(self._api._result(response)))

    def image_present(self, image: str) -> bool:
        try:
            with self._call(f"inspect image {image}"):
                self._api.inspect_image(image)
        except ImageMissing:
            return False
        except EngineError as exc:
            if isinstance(exc.__cause__, docker.errors.NotFound):
                return False
            raise
        return True

    def image_size_hint(self, image: str) -> int | None:
        repo, _ = request.split_reference(image)
        with self._call(f"list images {repo}"):
            found = self._api.images(name=repo)
        sizes = [int(i.get("Size") or 0) for i in found if isinstance(i, dict)]
        return max(sizes) if sizes and max(sizes) > 0 else None

    def pull(self, image: str, auth: RegistryAuth | None = None) -> None:
        """Never with the SDK's own credentials (~/.docker/config.json): only `auth`.

        The engine streams progress while it pulls. engine_timeout bounds the wait for
        its next word, not the whole pull (the SDK's own pull() waits for ever, and a
        registry that accepts and then says nothing held a worker as long as the engine
        waited): a slow pull that moves is never cut; a silent one is ImagePullFailed,
        so that a service whose image is on disk heals from it. An engine that goes away
        mid-pull is EngineUnavailable."""
        repo, tag = request.split_reference(image)
        config = _auth_config(image, auth)
        try:
            with self._call(f"pull {image}"):
                response = self._api._post(
                    self._api._url("/images/create"),
                    params={"fromImage": repo, "tag": tag or "latest"},
                    headers={"X-Registry-Auth": docker.auth.encode_header(config)},
                    stream=True,
                    timeout=self._timeout,
                )
                try:
                    self._api._raise_for_status(response)
                    progress = self._api._stream_helper(response, decode=True)
                    # A failure after the pull began comes in the stream, not as a status.
                    failed = [
                        p["error"] for p in progress if isinstance(p, dict) and p.get("error")
                    ]
                finally:
                    response.close()
        except EngineUnavailable as exc:
            if isinstance(
                exc.__cause__,
                (requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError),
            ):
                raise ImagePullFailed(
                    f"pull {image}: no progress for {self._timeout:g}s (engine_timeout): the "
                    "registry does not answer or the transfer stalled"
                ) from exc
            raise
        except EngineError as exc:
            raise ImagePullFailed(str(exc)) from exc
        if failed:
            raise ImagePullFailed(f"pull {image}: {failed[-1]}")

    def registry_digest(self, image: str, auth: RegistryAuth | None = None) -> str:
        """GET /distribution/NAME/json: the engine asks the registry for the manifest's
        descriptor (a HEAD or GET of one manifest), with `auth` only: {} is anonymous, as
        in `pull` (None would make the SDK look for a docker config file of its own)."""
        try:
            with self._call(f"check {image}"):
                found = self._api.inspect_distribution(image, auth_config=_auth_config(image, auth))
        except EngineUnavailable:
            raise
        except EngineError as exc:
            raise ImagePullFailed(str(exc)) from exc
        digest = (found.get("Descriptor") or {}).get("digest")
        if not isinstance(digest, str) or not digest.startswith("sha256:"):
            raise ImagePullFailed(f"check {image}: the registry gave no digest")
        return digest

    def local_digests(self, image: str) -> tuple[str, ...]:
        with self._call(f"inspect image {image}"):
            found = self._api.inspect_image(image)
        return tuple(str(d) for d in found.get("RepoDigests") or ())

    def create_and_start(
        self,
        spec: ServiceSpec,
        name: str,
        labels: Mapping[str, str],
        inherit: Sequence[tuple[str, str]] = (),
    ) -> str:
        self._listening(f"create {name}")
        labels = request.container_labels(spec, labels)
        binds, mounts, anonymous = self._mounts(spec, inherit)
        port_bindings = request.port_bindings(spec)
        networks = list(spec.networks)
        self._ensure(spec)
        with self._call(f"create {name}"):
            host_config = self._api.create_host_config(
                binds=binds or None,
                mounts=[*mounts, *request.secret_mounts(spec)] or None,
                port_bindings=port_bindings or None,
                mem_limit=spec.mem_limit,
                nano_cpus=int(spec.cpus * 1e9) if spec.cpus else None,
                network_mode=self._network_mode(spec),
                **request.host_options(spec),
            )
            config = self._api.create_container_config(
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
            with self._call(f"start {name}"):
                for net in networks[1:]:
                    endpoint = request.endpoint(spec, net)
                    self._api.connect_container_to_network(container_id, net, **endpoint)
                self._api.start(container_id)
        except EngineError:
            # Leave nothing half-made behind; the next pass creates a fresh one.
            self._networks_seen.clear()
            self._remove_quietly(container_id)
            raise
        return container_id

    def _create_from_config(self, config: Any, name: str, platform: str | None) -> Any:
        """Debian 12's SDK (python3-docker 5.0.3) takes no platform here: only a service
        that asks for one needs a newer SDK. A failure forgets the networks seen: one
        may be gone (look again next time)."""
        try:
            if platform is None:
                return self._api.create_container_from_config(config, name)
            return self._api.create_container_from_config(config, name, platform)
        except docker.errors.APIError:
            self._networks_seen.clear()
            raise
        except TypeError as exc:
            raise EngineError(
                f"create {name}: platform needs the docker SDK 6 or later ({exc})"
            ) from exc

    def _endpoints(self, spec: ServiceSpec, networks: list[str]) -> Any:
        """The primary network's endpoint with the service's aliases, fixed addresses and
        links (None: the engine's default, or a network without aliases such as host)."""
        endpoints = {net: request.endpoint(spec, net) for net in networks}
        if not any(endpoints.values()):
            return None
        return self._api.create_networking_config(
            {net: self._api.create_endpoint_config(**e) for net, e in endpoints.items()}
        )

    def _network_mode(self, spec: ServiceSpec) -> str | None:
        """network_mode service:NAME is the namespace of the oldest running container of
        service NAME (as Compose takes its first); none running is an error, retried."""
        service = request.shared_network(spec)
        if service is None:
            return request.network_mode(spec)
        with self._call(f"list containers of {service}"):
            found = self._api.containers(
                filters={"label": f"{LABEL_SERVICE}={service}", "status": "running"}
            )
        if not found:
            raise EngineError(
                f"network_mode service:{service}: no container of {service} is running yet"
            )
        oldest = min(found, key=lambda c: (c.get("Created", 0), str(c["Id"])))
        return f"container:{oldest['Id']}"

    def _ensure(self, spec: ServiceSpec) -> None:
        """The project's networks and volumes this service uses, made when missing (with
        healerd's labels); one that exists is used as it is, whoever made it."""
        with self._ensure_lock:
            for n in spec.networks_to_create:
                if n.name in self._networks_seen:
                    continue
                with self._call(f"network {n.name}"):
                    # The engine's name filter matches parts of names: compare exactly.
                    found = self._api.networks(names=[n.name])
                    if not any(net.get("Name") == n.name for net in found):
                        self._api.create_network(
                            n.name,
                            driver=n.driver,
                            options=dict(n.options) or None,
                            internal=n.internal,
                            attachable=n.attachable,
                            labels={**dict(n.labels), **request.owner_labels(n)},
                            ipam=request.ipam(n),
                            enable_ipv6=n.enable_ipv6,
                        )
                self._networks_seen.add(n.name)
            for v in spec.volumes_to_create:
                with self._call(f"volume {v.name}"):
                    try:
                        self._api.inspect_volume(v.name)
                    except docker.errors.NotFound:
                        self._api.create_volume(
                            v.name,
                            driver=v.driver,
                            driver_opts=dict(v.options) or None,
                            labels={**dict(v.labels), **request.owner_labels(v)},
                        )

    def _mounts(
        self, spec: ServiceSpec, inherit: Sequence[tuple[str, str]]
    ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
        """The binds, the Mounts and the mount points that get a fresh anonymous volume."""
        return request.mounts(spec, self._inherited(spec, inherit))

    def _inherited(
        self, spec: ServiceSpec, inherit: Sequence[tuple[str, str]]
    ) -> list[tuple[str, str]]:
        """The anonymous volumes a replacement takes over, as `docker compose up` does on
        a recreate: those mounted where the new spec declares an anonymous volume or its
        image a VOLUME; not where the target now has a source of its own, or is gone."""
        if not inherit:
            return []
        declared = {v.target for v in spec.volumes if not v.source and v.kind in ("", "volume")}
        bound = {v.target for v in spec.volumes if v.source or v.kind in ("bind", "tmpfs")}
        with self._call(f"inspect image {spec.image}"):
            config = self._api.inspect_image(spec.image).get("Config") or {}
        declared |= set(config.get("Volumes") or {})
        return [(v, t) for v, t in inherit if t in declared and t not in bound]

    def start(self, container: ObservedContainer) -> None:
        self._listening(f"start {container.name}")
        try:
            with self._call(f"start {container.name}"):
                self._api.start(container.id)
        except EngineError as exc:
            if needs_new(exc.__cause__):
                self._networks_seen.clear()  # perhaps one of ours is gone: look again
                gone = removed(exc.__cause__)
                raise CannotRestart(str(exc), gone=gone) from exc.__cause__
            raise

    def stop(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        try:
            with self._call(f"stop {container.name}"):
                if container.state is ContainerState.PAUSED:
                    self._api.unpause(container.id)
                self._api.stop(
                    container.id, timeout=None if stop_timeout is None else int(stop_timeout)
                )
        except EngineError as exc:
            if not isinstance(exc.__cause__, docker.errors.NotFound):
                raise

    def _remove_quietly(self, container_id: str) -> None:
        """A container made by a create whose start failed, with the anonymous volumes
        made for it (`v`): a retry every few seconds must not leave one behind each time
        (issue 28: 13 in 40 s). Volumes it took over from its predecessor are mounted by
        name and stay: the engine removes only those it made for this container."""
        with suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            self._api.remove_container(container_id, force=True, v=True)

    def prune_volumes(self, keep: AbstractSet[str], dry_run: bool) -> list[str]:
        with self._call("list volumes"):
            listed = self._api.volumes(filters={"label": request.LABEL_PROJECT, "dangling": True})
        names = sorted(str(v["Name"]) for v in listed.get("Volumes") or () if v["Name"] not in keep)
        if dry_run:
            return names
        removed = []
        for name in names:
            try:
                with self._call(f"remove volume {name}"):
                    self._api.remove_volume(name)
                removed.append(name)
                _log.info("removed volume %s (healerctl prune volumes)", name)
            except EngineError as exc:
                cause = exc.__cause__
                in_use = isinstance(cause, docker.errors.APIError) and cause.status_code == 409
                if not (in_use or isinstance(cause, docker.errors.NotFound)):
                    raise
        return removed

    def prune_networks(self, keep: AbstractSet[str]) -> bool:
        self._networks_seen.clear()
        with self._call("list networks"):
            found = self._api.networks(filters={"label": request.LABEL_PROJECT})
        done = True
        for net in found:
            name = str(net.get("Name", ""))
            if name in keep:
                continue
            try:
                with self._call(f"remove network {name}"):
                    self._api.remove_network(net["Id"])
                _log.info("removed network %s: no declared service uses it", name)
            except EngineError as exc:
                cause = exc.__cause__
                if isinstance(cause, docker.errors.NotFound):
                    continue
                if isinstance(cause, docker.errors.APIError) and cause.status_code in (403, 409):
                    done = False  # a container still uses it: the next resync tries again
                    continue
                raise
        return done

    def rename(self, container: ObservedContainer, name: str) -> None:
        with self._call(f"rename {container.name} to {name}"):
            self._api.rename(container.id, name)

    def remove(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        try:
            with self._call(f"remove {container.name}"):
                if container.running:
                    self._api.stop(
                        container.id,
                        timeout=None if stop_timeout is None else int(stop_timeout),
                    )
                self._api.remove_container(container.id, force=True, v=False)
        except EngineError as exc:
            cause = exc.__cause__
            if isinstance(cause, docker.errors.NotFound):
                return
            if (
                isinstance(cause, docker.errors.APIError)
                and cause.status_code == 409
                and "already in progress" in str(cause.explanation or "")
            ):
                return
            raise
        self._drop_volumes(container)

    def _drop_volumes(self, container: ObservedContainer) -> None:
        """Remove the container's anonymous volumes that no container uses any more. A
        replacement mounts its predecessor's by name, so the engine's own `rm -v` would
        leave them behind: healerd removes each once its last container is gone."""
        for volume, _ in container.anon_volumes:
            try:
                with self._call(f"remove volume {volume[:12]}"):
                    self._api.remove_volume(volume)
            except EngineError as exc:
                cause = exc.__cause__
                in_use = isinstance(cause, docker.errors.APIError) and cause.status_code == 409
                if not (in_use or isinstance(cause, docker.errors.NotFound)):
                    raise

    def logs(
        self, container_id: str, tail: int | None, since: float | None, until: float | None = None
    ) -> LogStream:
        what = f"logs {container_id[:12]}"
        query = logstream.params(tail, since, until)
        return logstream.open_stream(
            self._api, container_id, query, self._timeout, lambda: self._call(what)
        )

    def death(self, container_id: str) -> Death:
        with self._call(f"inspect {container_id[:12]}"):
            state = self._api.inspect_container(container_id).get("State") or {}
        running, finished = bool(state.get("Running")), str(state.get("FinishedAt") or "")
        ended = bool(finished) and not finished.startswith("0001")
        return Death(
            exit_code=None if running else int_or_none(state.get("ExitCode")),
            oom_killed=bool(state.get("OOMKilled")),
            finished_at=finished if ended else "",
            error=str(state.get("Error") or ""),
            started_at=str(state.get("StartedAt") or ""),
            ran_before=running and ended,
        )

    def watch(
        self, on_event: Callable[[EngineEvent], None], on_connected: Callable[[], None]
    ) -> None:
        # A client of its own: the stream holds its connection for as long as it lives.
        api = _client(self._base_url, self._tls, timeout=None)
        try:
            with translated("events"):
                # Not api.events(): its chunk reader can hold the last event back until
                # the next one arrives (docker-py over urllib3 2), and a held-back `die`
                # is a missed heal. requests yields each chunk as it arrives.
                filters = {"type": ["container"], "label": [LABEL_SERVICE], "event": WATCHED_EVENTS}
                resp = api._get(
                    api._url("/events"),
                    params={"filters": json.dumps(filters)},
                    stream=True,
                    timeout=None,
                )
                api._raise_for_status(resp)
            with self._watch_lock:
                if self._watch_stopped:
                    resp.close()
                    return
                self._watch_stream = resp
            on_connected()
            with translated("events"):
                for line in resp.iter_lines(chunk_size=None):
                    event = event_of(line) if line else None
                    if event is not None:
                        on_event(event)
        except (AttributeError, ValueError, OSError, requests.exceptions.RequestException) as exc:
            # close() from another thread surfaces as one of these inside requests.
            with self._watch_lock:
                if self._watch_stopped:
                    return
            raise EngineUnavailable(f"events: stream broken ({exc})") from exc
        finally:
            with self._watch_lock:
                self._watch_stream = None
            api.close()

    def stop_watch(self) -> None:
        with self._watch_lock:
            self._watch_stopped = True
            stream = self._watch_stream
        if stream is None:
            return
        # Response.close() would wait for the reader thread's buffer lock; shutting the
        # socket down wakes the reader with end-of-stream instead.
        sock = getattr(getattr(stream.raw, "_connection", None), "sock", None)
        if isinstance(sock, socket.socket):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def list_images(self) -> list[LocalImage]:
        with self._call("list images"):
            return imagelist.local_images(self._api.images())

    def images_in_use(self) -> set[str]:
        return {str(c["ImageID"]) for c in self._list_rows() if c.get("ImageID")}

    def set_restart_policy(self, container_id: str, policy: str) -> None:
        with self._call(f"update {container_id[:12]}"), suppress(docker.errors.NotFound):
            restart = {"Name": policy, "MaximumRetryCount": 0}
            self._api.update_container(container_id, restart_policy=restart)

    def remove_image(self, image_id: str) -> bool:
        try:
            with self._call(f"remove image {image_id[:19]}"):
                self._api.remove_image(image_id, force=False, noprune=False)
        except EngineError as exc:
            # 409: a container uses it (perhaps one made a moment ago) or several
            # repositories name it. Never forced.
            cause = exc.__cause__
            if isinstance(cause, docker.errors.APIError) and cause.status_code in (404, 409):
                _log.info("image %s kept: %s", image_id[:19], cause.explanation or cause)
                return False
            raise
        return True
