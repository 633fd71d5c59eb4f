"""The X-Registry-Auth of a pull or an update check, from healerd's RegistryAuth: {}
(anonymous), the user and password or identity token, or what a credential helper gives.

A helper runs from the path healerd found on PATH and checked when it read auth.json
(healerd.config.credhelpers), never from a lookup of its own (issue 29): the docker SDK's
credential store client, given that path (`helper_get`). What it gives is mapped as the
SDK maps it: Docker Hub is asked as https://index.docker.io/v1/, the user `<token>`
means an identity token, and no credentials found is an anonymous pull.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import docker.credentials
import docker.errors

from healerd.engine.api import ImagePullFailed
from healerd.engine.docker import credhelper, sdk
from healerd.model import RegistryAuth

# (helper name, its program's path, server) -> {"Username": ..., "Secret": ...}, or None
# when it has no credentials for the server; raises HelperFailed.
HelperGet = Callable[[str, str, str], Mapping[str, str] | None]
_HUB_SERVER = "https://index.docker.io/v1/"


class HelperFailed(Exception):
    """The helper ran and failed; the message says how."""


def auth_config(image: str, auth: RegistryAuth | None, get: HelperGet) -> dict[str, str]:
    if auth is None:
        return {}
    if auth.helper:
        return _from_helper(image, auth, get)
    if auth.identity_token:
        return {"identitytoken": auth.identity_token, "serveraddress": auth.registry}
    return {"username": auth.username, "password": auth.password, "serveraddress": auth.registry}


def _from_helper(image: str, auth: RegistryAuth, get: HelperGet) -> dict[str, str]:
    where = f"credential helper docker-credential-{auth.helper} for {auth.registry}"
    if not auth.helper_path:
        raise ImagePullFailed(f"pull {image}: {where}: {auth.helper_error or 'not found'}")
    server = _HUB_SERVER if auth.registry == "docker.io" else auth.registry
    try:
        found = get(auth.helper, auth.helper_path, server)
    except HelperFailed as exc:
        raise ImagePullFailed(f"pull {image}: {where} {exc}") from None
    if found is None:
        return {}
    if found["Username"] == "<token>":
        return {"identitytoken": found["Secret"], "serveraddress": server}
    return {"username": found["Username"], "password": found["Secret"], "serveraddress": server}


def helper_get(name: str, exe: str, server: str) -> Mapping[str, str] | None:
    """What docker-credential-NAME at `exe` gives for `server` (HelperGet)."""
    store = sdk.credential_store(name, exe)
    try:
        found = store.get(server)
        return {"Username": str(found["Username"]), "Secret": str(found["Secret"])}
    except docker.credentials.CredentialsNotFound:
        return None
    except _HELPER_ERRORS as exc:
        raise HelperFailed(credhelper.detail(store.program, exc)) from None


# What running a helper may raise: the SDK's errors, and on output that is no
# credentials KeyError/ValueError/TypeError (healerd.engine.docker.credhelper).
_HELPER_ERRORS = (docker.errors.DockerException, docker.credentials.StoreError, *credhelper.BAD)


def registry_auth(image: str, auth: RegistryAuth | None) -> dict[str, str]:
    """The X-Registry-Auth of a pull or a check of `image`."""
    return auth_config(image, auth, helper_get)


__all__ = ["HelperFailed", "auth_config", "helper_get", "registry_auth"]
