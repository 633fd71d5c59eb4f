"""healerd's engine adapter against a real dockerd that listens on a loopback TCP port
with `--tlsverify` (issue 29, L13): with healerd.yaml's docker_tls it lists, and
follows the event stream (a client of its own), over TLS; without the client
certificate, or in plain HTTP, the engine refuses it.

Before the fix `tcp://` was always plain HTTP, so healerd could not use such an engine
at all. The certificates are made here with openssl: a CA, the engine's (for the IP
127.0.0.1) and healerd's client certificate.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.engine import EngineError
from healerd.engine.docker import DockerEngine
from healerd.model import DockerTLS
from tests.support.dockerd import DISK_POOL, PrivateDockerd
from tests.support.polling import wait_for
from tests.support.registry import free_port

PARENT = Path("/var/lib/healerd-test-tls")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


# Strict verification also wants the key identifiers in a certificate a CA signed.
_KEY_IDS = "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"


def _signed(name: str, cn: str, ext: str, cwd: Path) -> None:
    """NAME-key.pem and NAME-cert.pem, signed by ca.pem, with the extensions `ext`."""
    (cwd / f"{name}.ext").write_text(ext)
    _openssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}-key.pem",
        "-out",
        f"{name}.csr",
        "-subj",
        f"/CN={cn}",
        cwd=cwd,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca-key.pem",
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        f"{name}-cert.pem",
        "-extfile",
        f"{name}.ext",
        cwd=cwd,
    )


def make_certs(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=healerd-test-ca",
        # Python 3.13 (Debian 13) verifies strictly (VERIFY_X509_STRICT, as urllib3 2.3
        # does there): a CA without keyUsage is refused, which 3.11 and Go accept.
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )
    _signed(
        "server",
        "127.0.0.1",
        f"subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n{_KEY_IDS}",
        directory,
    )
    _signed("client", "healerd", f"extendedKeyUsage=clientAuth\n{_KEY_IDS}", directory)
    for pem in directory.glob("*.pem"):
        os.chmod(pem, 0o600)


@pytest.fixture(scope="module")
def tls_dockerd() -> Iterator[tuple[PrivateDockerd, str, Path]]:
    """A private dockerd on 127.0.0.1:PORT with --tlsverify (and its own socket)."""
    PrivateDockerd.reap_stale(PARENT)
    root = PARENT / f"run-{os.getpid()}"
    certs = root / "certs"
    make_certs(certs)
    port = free_port()
    d = PrivateDockerd(
        root,
        bridge_prefix="hdl",
        pool=DISK_POOL,
        extra_args=[
            "--host",
            f"tcp://127.0.0.1:{port}",
            "--tlsverify",
            "--tlscacert",
            str(certs / "ca.pem"),
            "--tlscert",
            str(certs / "server-cert.pem"),
            "--tlskey",
            str(certs / "server-key.pem"),
        ],
    )
    try:
        d.start()
        yield d, f"tcp://127.0.0.1:{port}", certs
    finally:
        d.teardown()


def test_docker_tls_reaches_a_tlsverify_engine_and_plain_http_does_not(
    tls_dockerd: tuple[PrivateDockerd, str, Path],
) -> None:
    dockerd, address, certs = tls_dockerd
    tls = DockerTLS(
        ca=str(certs / "ca.pem"),
        cert=str(certs / "client-cert.pem"),
        key=str(certs / "client-key.pem"),
    )
    engine = DockerEngine(address, timeout=10, tls=tls)
    local = DockerEngine(dockerd.url, timeout=10)
    assert engine.version() == local.version()
    assert engine.identity() == local.identity()
    assert engine.list_managed() == []
    # The event stream has a client of its own: TLS too. Stopped, it ends (a TLS socket
    # shut down from another thread ends mid-chunk: an EngineError, which the daemon's
    # watcher takes as the end it asked for).
    connected = threading.Event()
    ended: list[BaseException | None] = []

    def watch() -> None:
        try:
            engine.watch(lambda e: None, connected.set)
            ended.append(None)
        except EngineError as exc:
            ended.append(exc)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        wait_for("the event stream over TLS", connected.is_set, timeout=10)
    finally:
        engine.stop_watch()
        watcher.join(timeout=10)
    assert not watcher.is_alive() and len(ended) == 1
    # Without healerd's client certificate the engine refuses; plain HTTP gets nowhere.
    no_client_cert = DockerTLS(ca=tls.ca)
    with pytest.raises(EngineError):
        DockerEngine(address, timeout=10, tls=no_client_cert).version()
    with pytest.raises(EngineError):
        DockerEngine(address, timeout=10).version()
    # A CA that did not sign the engine's certificate: not believed.
    other = certs.parent / "other-certs"
    make_certs(other)
    wrong_ca = DockerTLS(ca=str(other / "ca.pem"), cert=tls.cert, key=tls.key)
    with pytest.raises(EngineError):
        DockerEngine(address, timeout=10, tls=wrong_ca).version()
