"""The one place the adapter touches what the docker SDK (and urllib3 under it) do not
offer in public: each touch says why, and tests/unit/test_docker_sdk.py pins the SDK
versions it was checked against (CHECKED_SDK), so that a new SDK fails there first.

Everything else goes through the SDK's public methods or requests' own Session API
(healerd.engine.docker.client).
"""

from __future__ import annotations

import socket
from typing import Any

import docker.auth
import docker.credentials

# The SDK versions (major, minor) these touches were checked against: Debian 12's
# python3-docker, and the one the venv installs (docker>=7).
CHECKED_SDK = ((5, 0), (7, 0), (7, 1), (7, 2))


def forget_config_file(api: Any) -> None:
    """What an APIClient parsed from a docker config file when it was made (there is no
    option to skip it): its HttpHeaders would go with every request, and its
    credentials and helpers would be used where a call is given no auth."""
    api._general_configs, api._auth_configs = {}, docker.auth.AuthConfig({})


def speak(api: Any, version: str) -> None:
    """Makes `api` speak API `version` from its next request (issue 31: negotiated once
    the engine answers). The SDK fixes its version when a client is made, and its "auto"
    asks the engine then, which fails while the engine is down; every URL and version
    check of the SDK reads this one attribute, and the pool stays."""
    api._version = version


def credential_store(name: str, exe: str) -> Any:
    """The SDK's client for docker-credential-NAME running `exe`, the path checked when
    auth.json was read: Store.__init__ would look the program up on PATH (and in SDK 5
    refuse one not found there)."""
    store = docker.credentials.Store.__new__(docker.credentials.Store)
    store.program, store.exe, store.environment = f"docker-credential-{name}", exe, None
    return store


def stream_socket(response: Any) -> socket.socket | None:
    """The socket under a streamed response: shutting it down wakes a reader blocked
    on it, where Response.close() would wait for the reader's own lock."""
    sock = getattr(getattr(response.raw, "_connection", None), "sock", None)
    return sock if isinstance(sock, socket.socket) else None


__all__ = ["CHECKED_SDK", "credential_store", "forget_config_file", "speak", "stream_socket"]
