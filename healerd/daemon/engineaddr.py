"""Which engine healerd talks to, and how: the address (healerd.yaml, the command line,
$DOCKER_HOST, the local socket) and its TLS (healerd.yaml's `docker_tls`, or, for an
address from $DOCKER_HOST, the docker CLI's $DOCKER_TLS_VERIFY and $DOCKER_CERT_PATH).

healerd.yaml and the flags are checked with the settings (healerd.config.dockertls); an
address from the environment is checked here by the same rule before any connection.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from healerd.config import Settings
from healerd.config.dockertls import plain_tcp_problem
from healerd.config.trust import FileRefused, read_trusted
from healerd.engine import EngineError
from healerd.engine.docker import DockerEngine
from healerd.model import DockerTLS

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
TLS_FILE_LIMIT = 1 << 20  # a PEM file; a certificate chain is a few KiB


def engine_url(settings: Settings, environ: Mapping[str, str]) -> str:
    return settings.docker_host or environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def engine_tls(settings: Settings, environ: Mapping[str, str]) -> DockerTLS | None:
    """healerd.yaml's docker_tls; else, for an address from the environment, the docker
    CLI's rule: TLS when $DOCKER_TLS_VERIFY is set (non-empty: verified) or
    $DOCKER_CERT_PATH is, with ca.pem, cert.pem and key.pem from $DOCKER_CERT_PATH
    (default ~/.docker, which the unit's ProtectHome hides)."""
    if settings.docker_tls is not None or settings.docker_host:
        return settings.docker_tls
    verify = environ.get("DOCKER_TLS_VERIFY", "") != ""
    cert_path = environ.get("DOCKER_CERT_PATH", "")
    if not (verify or cert_path):
        return None
    base = cert_path or os.path.join(os.path.expanduser("~"), ".docker")
    files = {name: os.path.join(base, f"{name}.pem") for name in ("ca", "cert", "key")}
    return DockerTLS(**files, verify=verify)


def check_tls_files(tls: DockerTLS, *, strict: bool) -> None:
    """The TLS files as trusted as a config file (the CA and certificate decide whom
    healerd believes to be its engine), the key also root-only; ValueError if not. The
    SDK opens them again by name: this catches a careless mode, not a race with root."""
    files = (("docker_tls ca", tls.ca, False), ("docker_tls cert", tls.cert, False))
    for what, name, private in (*files, ("docker_tls key", tls.key, True)):
        if name is None:
            continue
        try:
            read_trusted(Path(name), what, strict=strict, limit=TLS_FILE_LIMIT, private=private)
        except (FileRefused, OSError) as exc:
            raise ValueError(
                str(exc) if isinstance(exc, FileRefused) else f"{what}: {exc}"
            ) from None


def connect(settings: Settings, environ: Mapping[str, str]) -> DockerEngine:
    """The engine adapter; raises ValueError when the address is refused (a plain
    `tcp://` to another machine without docker_insecure_tcp) or its TLS files cannot be
    used. Nothing is asked of the engine yet."""
    url, tls = engine_url(settings, environ), engine_tls(settings, environ)
    problem = plain_tcp_problem(url, tls, settings.docker_insecure_tcp)
    if problem:
        raise ValueError(f"engine address refused: {problem}")
    if tls is not None:
        check_tls_files(tls, strict=settings.strict_modes)
    try:
        return DockerEngine(
            url, timeout=settings.engine_timeout, pool_size=settings.workers * 4, tls=tls
        )
    except EngineError as exc:
        raise ValueError(str(exc)) from None


__all__ = ["DEFAULT_DOCKER_HOST", "check_tls_files", "connect", "engine_tls", "engine_url"]
