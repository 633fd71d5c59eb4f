"""The `docker_tls:` section of healerd.yaml, and when a `tcp://` engine needs it.

A `tcp://` engine speaks plain HTTP unless TLS is set: every request would cross the
network in clear, registry passwords (X-Registry-Auth) and the env-file values of each
create included, and anyone on the path could answer as the engine. So healerd refuses a
plain (or unverified) `tcp://` address that is not loopback unless `docker_insecure_tcp:
true` says that is meant. The files are those of dockerd's `--tlsverify` (`ca.pem`,
`cert.pem`, `key.pem`); the engine adapter hands them to the docker SDK.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from healerd.config.errors import describe, unknown_key_reason
from healerd.config.keys import At, Key
from healerd.config.yamlload import LineDict
from healerd.model import DockerTLS

# Addresses that speak HTTP without TLS (docker-py turns tcp:// into http://).
PLAIN_SCHEMES = ("tcp", "http")


def _path(value: object) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"must be an absolute path, not {describe(value)}")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {describe(value)}")
    return value


# (name, type, doc, example, parse): the rows of docs/reference/config.md and the checks.
_ROWS: tuple[tuple[str, str, str, str, Any], ...] = (
    (
        "ca",
        "absolute path or null",
        "The CA certificate that signed the engine's certificate (dockerd's "
        "`--tlscacert`, the client's `ca.pem`); null: the system's CAs.",
        "/etc/healerd/docker/ca.pem",
        _path,
    ),
    (
        "cert",
        "absolute path or null",
        "healerd's client certificate (`cert.pem`), for an engine that runs with "
        "`--tlsverify`; with `key`.",
        "/etc/healerd/docker/cert.pem",
        _path,
    ),
    (
        "key",
        "absolute path or null",
        "The client certificate's private key (`key.pem`); root-only.",
        "/etc/healerd/docker/key.pem",
        _path,
    ),
    (
        "verify",
        "boolean",
        "Check the engine's certificate (against `ca`) and its name. false encrypts but "
        "lets anyone on the path answer as the engine: counts as insecure (see "
        "`docker_insecure_tcp`).",
        "false",
        _bool,
    ),
)

_DEFAULTS = DockerTLS()
DOCKER_TLS_CHILDREN: tuple[Key, ...] = tuple(
    Key(name, type, doc, example, default=getattr(_DEFAULTS, name))
    for name, type, doc, example, _ in _ROWS
)
_PARSERS = {name: parse for name, _, _, _, parse in _ROWS}


def check_docker_tls(value: Any, at: At) -> DockerTLS | None:
    """The section as a mapping from healerd.yaml, or already built (check_settings);
    null is no TLS."""
    if value is None:
        return None
    if isinstance(value, DockerTLS):
        fields: dict[Any, Any] = {n: getattr(value, n) for n in _PARSERS}
        body: LineDict | None = None
    elif isinstance(value, dict):
        fields, body = value, value if isinstance(value, LineDict) else None
    else:
        at.error(f"must be a mapping of {', '.join(_PARSERS)}, not {describe(value)}")
        return None

    def at_key(key: object) -> At:
        return at.key(body, key) if body is not None else at.child(key, at.line)

    before = len(at.errors)
    good: dict[str, Any] = {}
    for key, raw in fields.items():
        parse = _PARSERS.get(key) if isinstance(key, str) else None
        if parse is None:
            if not (isinstance(key, str) and key.startswith("x-")):
                at_key(key).error(unknown_key_reason(key, _PARSERS))
            continue
        if raw is None:
            continue  # null: the default
        try:
            good[key] = parse(raw)
        except ValueError as exc:
            at_key(key).error(str(exc))
    tls = DockerTLS(**good)
    if (tls.cert is None) != (tls.key is None):
        at_key("cert" if tls.cert is None else "key").error(
            "cert and key go together: give both or neither"
        )
    return tls if len(at.errors) == before else None


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: traffic that never leaves the machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: where it points is the network's to say


def plain_tcp_problem(address: str, tls: DockerTLS | None, insecure: bool) -> str | None:
    """Why healerd refuses this engine address, or None: a plain (or unverified TLS)
    `tcp://` or `http://` address that is not loopback, unless `insecure`."""
    try:
        parts = urlsplit(address)
        host = parts.hostname or ""
    except ValueError:
        return None  # the SDK says what is wrong with it
    secure = tls is not None and tls.verify
    if parts.scheme not in PLAIN_SCHEMES or secure or insecure or is_loopback(host):
        return None
    what = "TLS without verification" if tls is not None else "plain HTTP"
    how = " by posing as the engine" if tls is not None else ""
    return (
        f"{address} would be {what} to another machine: anyone on the path could "
        f"read{how} every request, registry passwords and env-file values included, and "
        "answer as the engine. Set docker_tls (the engine's CA, and healerd's client "
        "certificate and key for an engine with --tlsverify), or docker_insecure_tcp: "
        "true if that is really meant"
    )


__all__ = [
    "DOCKER_TLS_CHILDREN",
    "check_docker_tls",
    "is_loopback",
    "plain_tcp_problem",
]
