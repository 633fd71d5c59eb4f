"""An image's digest asked of its registry itself (registry v2 API), for an engine without
Docker's /distribution endpoint (Podman 4.3 answers it 404): a HEAD of the manifest with
the Accept headers of manifest lists and OCI indexes (so the digest is the one a pull by
tag records, as Docker's descriptor is), the Bearer token flow or basic auth, with the
credentials healerd read from auth.json (pullauth.auth_config).

Plain HTTP only for a registry on a loopback address (Docker's own default: 127.0.0.0/8
is insecure), after HTTPS failed; HTTPS is verified with requests' CA bundle.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping

import requests
import requests.utils

from healerd.engine.api import ImagePullFailed
from healerd.engine.reference import split_reference

ACCEPT = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    )
)
_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io")


class _Refused(Exception):
    """The registry or its token service refused the credentials (401 or 403)."""


def locate(image: str) -> tuple[str, str, str]:
    """(registry host, repository, tag or digest) as the v2 API names them: Docker Hub
    is registry-1.docker.io, and its one-word repositories are library/NAME."""
    repo, ref = split_reference(image)
    first, _, rest = repo.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = "docker.io", repo
    if host in _HUB:
        host = "registry-1.docker.io"
        path = path if "/" in path else f"library/{path}"
    return host, path, ref or "latest"


def _loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0].strip("[]") if host.count(":") <= 1 else host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _token(
    session: requests.Session, challenge: Mapping[str, str], auth: Mapping[str, str], timeout: float
) -> str:
    """A Bearer token from the challenge's realm, for its service and scope: with the
    user and password (basic), an identity token (OAuth refresh), or anonymous."""
    realm = challenge.get("realm", "")
    params = {k: challenge[k] for k in ("service", "scope") if challenge.get(k)}
    if auth.get("identitytoken"):
        form = {**params, "grant_type": "refresh_token", "client_id": "healerd"}
        form["refresh_token"] = auth["identitytoken"]
        answer = session.post(realm, data=form, timeout=timeout)
    else:
        basic = (auth["username"], auth["password"]) if auth.get("username") else None
        answer = session.get(realm, params=params, auth=basic, timeout=timeout)
    if answer.status_code in (401, 403):
        raise _Refused(f"its token service answered {answer.status_code}")
    answer.raise_for_status()
    found = answer.json()
    token = found.get("token") or found.get("access_token")
    if not isinstance(token, str) or not token:
        raise ValueError(f"the token service {realm} gave no token")
    return token


def _head(
    session: requests.Session, url: str, auth: Mapping[str, str], timeout: float
) -> requests.Response:
    """HEAD the manifest, answering one auth challenge (Bearer or Basic)."""
    headers = {"Accept": ACCEPT}
    answer = session.head(url, headers=headers, timeout=timeout)
    if answer.status_code != 401:
        return answer
    scheme, _, params = answer.headers.get("WWW-Authenticate", "").partition(" ")
    if scheme.lower() == "bearer":
        parsed = requests.utils.parse_dict_header(params)
        challenge = {k: v for k, v in parsed.items() if v is not None}
        headers["Authorization"] = f"Bearer {_token(session, challenge, auth, timeout)}"
        return session.head(url, headers=headers, timeout=timeout)
    if scheme.lower() == "basic" and auth.get("username"):
        basic = (auth["username"], auth["password"])
        return session.head(url, headers=headers, auth=basic, timeout=timeout)
    return answer


def _digest(session: requests.Session, url: str, answer: requests.Response, timeout: float) -> str:
    """The Docker-Content-Digest header; without it, the sha256 of the manifest's body
    (a GET with the same headers)."""
    digest = answer.headers.get("Docker-Content-Digest", "")
    if digest.startswith("sha256:"):
        return digest
    got = session.get(url, headers=dict(answer.request.headers), timeout=timeout)
    got.raise_for_status()
    return "sha256:" + hashlib.sha256(got.content).hexdigest()


def registry_digest(image: str, auth: Mapping[str, str], timeout: float = 30.0) -> str:
    """The digest the registry gives for `image`'s manifest (or index): `auth` as
    pullauth.auth_config makes it ({} anonymous). ImagePullFailed when it cannot tell."""
    host, path, ref = locate(image)
    if ref.startswith("sha256:"):
        return ref
    schemes = ("https", "http") if _loopback(host) else ("https",)
    with requests.Session() as session:
        session.trust_env = True  # HTTPS_PROXY and NO_PROXY, as the engine's pulls
        for scheme in schemes:
            url = f"{scheme}://{host}/v2/{path}/manifests/{ref}"
            try:
                answer = _head(session, url, auth, timeout)
                if answer.status_code in (401, 403):
                    raise _Refused(f"it answered {answer.status_code}")
                if answer.status_code == 404:
                    raise ImagePullFailed(f"check {image}: no such manifest in {host}")
                answer.raise_for_status()
                return _digest(session, url, answer, timeout)
            except (requests.exceptions.SSLError, requests.exceptions.ConnectionError):
                if scheme == schemes[-1]:
                    raise ImagePullFailed(f"check {image}: {host} cannot be reached") from None
            except _Refused as exc:
                raise ImagePullFailed(
                    f"check {image}: the registry refused the credentials ({exc})"
                ) from None
            except (requests.exceptions.RequestException, ValueError) as exc:
                raise ImagePullFailed(f"check {image}: {host}: {exc}") from None
    raise ImagePullFailed(f"check {image}: {host} cannot be reached")


__all__ = ["ACCEPT", "locate", "registry_digest"]
