"""The docker SDK's client as healerd makes it (no config file, no environment) and the
credentials of a pull: the adapter's (healerd.engine.docker_engine) ways in."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import docker
import docker.auth
import docker.credentials
import docker.errors
import docker.tls

from healerd.engine import EngineError, credhelper
from healerd.engine.pullauth import HelperFailed, auth_config
from healerd.model import DockerTLS, RegistryAuth

# The oldest API we need (Debian 12's docker.io 20.10 speaks 1.41); newer engines
# still accept it, so pinning avoids a version probe that fails while the engine is down.
API_VERSION = "1.41"


def _helper_get(name: str, exe: str, server: str) -> Mapping[str, str] | None:
    """The SDK's credential store client for docker-credential-NAME at `exe`, the path
    checked at the last reload (Store.__init__ would look it up on PATH again)."""
    store = docker.credentials.Store.__new__(docker.credentials.Store)
    store.program, store.exe, store.environment = f"docker-credential-{name}", exe, None
    try:
        found = store.get(server)
        return {"Username": str(found["Username"]), "Secret": str(found["Secret"])}
    except docker.credentials.CredentialsNotFound:
        return None
    except _HELPER_ERRORS as exc:
        raise HelperFailed(credhelper.detail(store.program, exc)) from None


# What running a helper may raise: the SDK's errors, and on output that is no
# credentials KeyError/ValueError/TypeError (healerd.engine.credhelper).
_HELPER_ERRORS = (docker.errors.DockerException, docker.credentials.StoreError, *credhelper.BAD)


def _auth_config(image: str, auth: RegistryAuth | None) -> dict[str, str]:
    """The X-Registry-Auth of a pull or a check (healerd.engine.pullauth)."""
    return auth_config(image, auth, _helper_get)


def _client(base_url: str, tls: DockerTLS | None, **options: Any) -> Any:
    """An APIClient that uses nothing of a docker config file (the SDK reads one when a
    client is made: its credentials, helpers and HTTP headers are dropped; its proxies
    serve only calls healerd never makes), nor requests' environment (a CA bundle that
    would replace docker_tls's CA, proxies, netrc). Bad `tls` files are an EngineError."""
    try:
        cert = (tls.cert, tls.key) if tls and tls.cert and tls.key else None
        config = tls and docker.tls.TLSConfig(cert, ca_cert=tls.ca, verify=tls.verify)
        api = docker.APIClient(base_url=base_url, version=API_VERSION, tls=config, **options)
    except docker.errors.TLSParameterError as exc:
        raise EngineError(f"docker_tls: {exc}") from None
    api._general_configs, api._auth_configs, api.trust_env = {}, docker.auth.AuthConfig({}), False
    return api


def listening(base_url: str, timeout: float = 1.0) -> bool:
    """Whether the engine at `base_url` accepts a new connection (unix, tcp, http(s))."""
    parsed = urlsplit(base_url)
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


__all__ = ["API_VERSION", "_auth_config", "_client", "listening"]
