"""The X-Registry-Auth of a pull or an update check, from healerd's RegistryAuth: {}
(anonymous), the user and password or identity token, or what a credential helper gives.

A helper runs from the path healerd found on PATH and checked when it read auth.json
(healerd.config.credhelpers), never from a lookup of its own (issue 29). Running it is
the engine adapter's `get` (the docker SDK's credential store client); what it gives is
mapped as the SDK maps it: Docker Hub is asked as https://index.docker.io/v1/, the user
`<token>` means an identity token, and no credentials found is an anonymous pull.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from healerd.engine import ImagePullFailed
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
