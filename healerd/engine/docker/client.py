"""The engine's HTTP API as the adapter speaks it: the docker SDK's low-level client
(its unix socket and TLS transports and connection pool), made with nothing of a docker
config file or the environment, and with one chokepoint every request passes: the
transport adapters it mounts are wrapped so that each real HTTP request takes from the
engine's Meter first (healerd.engine.pacing), as client-go's rate limiter does.

Requests the SDK has no public method for (a streamed list, log, pull or event stream)
go through requests' public Session API on the same client, and so through the same
chokepoint.

The API version is negotiated (apiversion.py) at the first call that reaches the
engine, and again after the engine was lost (it may come back upgraded): a client is
made with the floor, which every engine healerd takes accepts, so that making one never
needs the engine up.
"""

from __future__ import annotations

import logging
import socket
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import docker
import docker.errors
import docker.tls
import docker.utils
import requests
import requests.adapters
from requests.models import PreparedRequest

from healerd.engine.api import EngineError, EngineUnavailable
from healerd.engine.docker import apiversion, sdk
from healerd.engine.docker.errors import translated
from healerd.engine.docker.listing import rows_of
from healerd.engine.pacing import Meter
from healerd.model import DockerTLS

_log = logging.getLogger("healerd.engine")


class _Paced(requests.adapters.BaseAdapter):
    """A transport adapter that takes from the meter, then sends through the SDK's own."""

    def __init__(self, inner: requests.adapters.BaseAdapter, meter: Meter) -> None:
        super().__init__()
        self.inner, self._meter = inner, meter

    def send(
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        self._meter.take()
        return self.inner.send(
            request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies
        )

    def close(self) -> None:
        self.inner.close()


def new_api(
    base_url: str,
    tls: DockerTLS | None,
    meter: Meter,
    version: str = apiversion.FLOOR,
    **options: Any,
) -> Any:
    """An APIClient that uses nothing of a docker config file (the SDK reads one when a
    client is made: its credentials, helpers and HTTP headers are dropped; its proxies
    serve only calls healerd never makes), nor requests' environment (a CA bundle that
    would replace docker_tls's CA, proxies, netrc), whose every request takes from
    `meter`, speaking API `version`. Bad `tls` files are an EngineError."""
    try:
        cert = (tls.cert, tls.key) if tls and tls.cert and tls.key else None
        config = tls and docker.tls.TLSConfig(cert, ca_cert=tls.ca, verify=tls.verify)
        api = docker.APIClient(base_url=base_url, version=version, tls=config, **options)
    except docker.errors.TLSParameterError as exc:
        raise EngineError(f"docker_tls: {exc}") from None
    sdk.forget_config_file(api)
    api.trust_env = False
    for prefix, adapter in list(api.adapters.items()):
        api.mount(prefix, _Paced(adapter, meter))
    return api


def listening(base_url: str, timeout: float = 1.0) -> bool:
    """Whether the engine at `base_url` accepts a new connection (unix, tcp, http(s))."""
    parsed = urllib.parse.urlsplit(base_url)
    try:
        if parsed.scheme in ("unix", "http+unix"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(parsed.path or parsed.netloc)
            return True
        port = parsed.port or (2376 if parsed.scheme == "https" else 2375)
        with socket.create_connection((parsed.hostname or "localhost", port), timeout):
            return True
    except OSError:
        return False


def checked(response: requests.Response) -> requests.Response:
    """The response, or the SDK's own error for its status (NotFound, APIError, ...)."""
    try:
        response.raise_for_status()
    except requests.exceptions.HTTPError as exc:
        try:  # the SDK's function raises the error itself, having read its body
            raise docker.errors.create_api_error_from_http_exception(exc) from exc
        finally:
            response.close()
    return response


class DockerClient:
    """One engine address: the pooled client of the calls (`api`), and what makes a
    client of its own for a stream that holds its connection (`new_api`)."""

    def __init__(
        self, base_url: str, tls: DockerTLS | None, timeout: float, pool_size: int, meter: Meter
    ) -> None:
        self.base_url, self.tls, self.meter = base_url, tls, meter
        self.timeout = float(int(timeout))
        self.api = new_api(base_url, tls, meter, timeout=int(timeout), max_pool_size=pool_size)
        # What the engine's /version answered, and the API version spoken with it:
        # None until negotiated, and again once the engine was lost.
        self.engine_version: str | None = None
        self.api_version: str | None = None
        # "docker" or "podman" (apiversion.engine_kind), from the same answer.
        self.engine_kind: str | None = None

    def new_api(self, **options: Any) -> Any:
        version = self.api_version or apiversion.FLOOR
        return new_api(self.base_url, self.tls, self.meter, version, **options)

    @contextmanager
    def call(self, what: str) -> Iterator[None]:
        """translated(), after the API version is negotiated; and an engine that cannot
        be reached drops the pooled connections (and the version: it may come back
        upgraded): a dockerd that shuts down refuses new connections but still
        answers on open ones, and a start slipped through one would be a container its
        shutdown stops again (and waits for, up to its timeout), and healerd would take
        that stop for a crash. Without them, the next call finds the engine away."""
        try:
            with translated(what):
                self.negotiated()
                yield
        except EngineUnavailable:
            self.api.close()
            self.api_version = None
            raise

    def negotiated(self) -> str:
        """The API version spoken with the engine, asked of its /version (unversioned)
        when not known yet; EngineTooOld for an engine below apiversion.FLOOR (asked
        again at the next call: it may be upgraded in place)."""
        if self.api_version is not None:
            return self.api_version
        url = f"{self.api.base_url}/version"
        answer = checked(self.api.get(url, timeout=self.timeout)).json()
        engine, low = str(answer.get("ApiVersion", "")), answer.get("MinAPIVersion")
        newest = apiversion.sdk_newest()
        version = apiversion.negotiate(engine, str(low) if low else None, newest)
        sdk.speak(self.api, version)
        self.engine_version = str(answer.get("Version") or "?")
        self.engine_kind = apiversion.engine_kind(answer)
        self.api_version = version
        _log.info(
            "engine: %s %s speaks API %s (oldest %s); the docker SDK knows up to %s: "
            "healerd speaks API %s",
            self.engine_kind.capitalize(),
            self.engine_version,
            engine,
            low or "?",
            newest,
            version,
        )
        return version

    def listening(self, what: str) -> None:
        """Before a start or a create: the engine still takes new connections. A dockerd
        that shuts down closes its listener first and answers on open connections only
        while it stops its containers: one started then is stopped again by that very
        shutdown, which waits for it (up to its 15 s), and healerd would see a crash.
        A connect, no request (a tenth of a millisecond on a unix socket)."""
        with self.call(what):
            if not listening(self.base_url):
                raise requests.exceptions.ConnectionError(
                    "the engine takes no new connection (shutting down?)"
                )

    def url(self, path: str, *args: str, api: Any = None) -> str:
        """The versioned URL of `path` ("/containers/{0}/logs"), its arguments quoted."""
        quoted = (urllib.parse.quote(a, safe="/:") for a in args)
        client = api or self.api
        return f"{client.base_url}/v{client.api_version}{path.format(*quoted)}"

    def get(self, path: str, *args: str, api: Any = None, **options: Any) -> requests.Response:
        """GET through requests' Session API (stream, timeout, params, headers as
        requests takes them; timeout defaults to the engine timeout); the SDK's errors
        for an error status."""
        options.setdefault("timeout", self.timeout)
        client = api or self.api
        return checked(client.get(self.url(path, *args, api=client), **options))

    def container_rows(self, filters: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
        """Every container (`filters`: the engine's, e.g. a label), its row of the list
        decoded one at a time (listing.rows_of); a garbled body is the engine away."""
        params: dict[str, object] = {"all": 1}
        if filters:
            params["filters"] = docker.utils.convert_filters(filters)
        with self.call("list containers"):
            yield from rows_of(self.get("/containers/json", params=params).text)

    def post(self, path: str, *args: str, **options: Any) -> requests.Response:
        options.setdefault("timeout", self.timeout)
        return checked(self.api.post(self.url(path, *args), **options))


__all__ = ["DockerClient", "checked", "new_api"]
