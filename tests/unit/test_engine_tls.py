"""A `tcp://` engine (issue 29, L13): TLS settings reach the docker SDK, and a plain or
unverified `tcp://` address on another machine is refused unless docker_insecure_tcp.

Each test failed before the fix: `docker_host: tcp://10.0.0.5:2376` became
`http://10.0.0.5:2376` with no way to set TLS, and docker_tls was an unknown key.
tests/integration/test_engine_tls.py talks to a real dockerd with --tlsverify.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.config import Settings, SettingsError, check_settings, load_settings
from healerd.daemon.engineaddr import connect, engine_tls
from healerd.engine.docker import DockerEngine
from healerd.model import DockerTLS
from tests.unit.harness.files import NOBODY, as_root, trusted_tmp_dir


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    with trusted_tmp_dir() as path:
        yield path


def load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "healerd.yaml"
    path.write_text(text)
    return load_settings(path)


def errors_of(tmp_path: Path, text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(SettingsError) as info:
        load(tmp_path, text)
    return [(e.line, e.field, e.reason) for e in info.value.errors]


def pem_files(directory: Path) -> DockerTLS:
    """ca.pem, cert.pem and key.pem (the SDK checks only that they exist), root-only."""
    directory.mkdir(mode=0o700, exist_ok=True)
    for name in ("ca", "cert", "key"):
        (directory / f"{name}.pem").write_text(f"-----BEGIN {name}-----\n")
        os.chmod(directory / f"{name}.pem", 0o600)
    ca, cert, key = (str(directory / f"{n}.pem") for n in ("ca", "cert", "key"))
    return DockerTLS(ca, cert, key)


def test_plain_tcp_to_another_machine_is_refused_unless_insecure_is_said(tmp_path: Path) -> None:
    [(line, field, reason)] = errors_of(tmp_path, "workers: 2\ndocker_host: tcp://10.0.0.5:2375\n")
    assert (line, field) == (2, "docker_host")
    assert "plain HTTP to another machine" in reason and "docker_insecure_tcp: true" in reason
    # A name is no loopback, whatever it resolves to; unverified TLS is no better.
    assert errors_of(tmp_path, "docker_host: tcp://docker.lan:2375\n")
    unverified = "docker_host: tcp://10.0.0.5:2376\ndocker_tls: {verify: false}\n"
    [(_, _, reason)] = errors_of(tmp_path, unverified)
    assert "TLS without verification" in reason
    # Said on purpose, loopback, TLS, or a socket: accepted.
    assert load(tmp_path, "docker_host: tcp://10.0.0.5:2375\ndocker_insecure_tcp: true\n")
    for host in ("tcp://127.0.0.1:2375", "tcp://[::1]:2375", "tcp://localhost:2375"):
        assert load(tmp_path, f"docker_host: {host}\n").docker_host == host
    tls = load(tmp_path, "docker_host: tcp://10.0.0.5:2376\ndocker_tls: {ca: /etc/ca.pem}\n")
    assert tls.docker_tls == DockerTLS(ca="/etc/ca.pem")
    assert load(tmp_path, "docker_host: unix:///run/docker.sock\n")
    # The command line (--docker-host) goes through the same check.
    flag = dataclasses.replace(Settings(), docker_host="tcp://192.168.1.9:2375")
    assert [e.field for e in check_settings(flag, "command line")] == ["docker_host"]


def test_docker_tls_keys_are_checked(tmp_path: Path) -> None:
    text = "docker_tls: {ca: ca.pem, cert: /c.pem, verify: 1, cipher: x}\n"
    got = {(field, reason.split(" (")[0]) for _, field, reason in errors_of(tmp_path, text)}
    assert got == {
        ("docker_tls.ca", "must be an absolute path, not a string"),
        ("docker_tls.verify", "must be true or false, not a number"),
        ("docker_tls.cipher", "unknown key 'cipher'"),
        ("docker_tls.key", "cert and key go together: give both or neither"),
    }
    assert errors_of(tmp_path, "docker_tls: /etc/ca.pem\n")[0][1] == "docker_tls"
    full = "docker_tls: {ca: /a/ca.pem, cert: /a/cert.pem, key: /a/key.pem, verify: true}\n"
    assert load(tmp_path, full).docker_tls == DockerTLS("/a/ca.pem", "/a/cert.pem", "/a/key.pem")


def test_tls_settings_reach_the_sdk_client(tmp_path: Path) -> None:
    tls = pem_files(tmp_path / "certs")
    engine = DockerEngine("tcp://10.0.0.5:2376", tls=tls)
    api = engine._client.api
    assert api.base_url == "https://10.0.0.5:2376"
    assert api.verify == tls.ca and api.cert == (tls.cert, tls.key)
    plain = DockerEngine("tcp://127.0.0.1:2375")._client.api
    assert plain.base_url == "http://127.0.0.1:2375"


def test_an_address_from_the_environment_is_checked_and_its_tls_honoured(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape("engine address refused: tcp://10.0.0.5:2375")):
        connect(Settings(), {"DOCKER_HOST": "tcp://10.0.0.5:2375"})
    assert connect(Settings(docker_insecure_tcp=True), {"DOCKER_HOST": "tcp://10.0.0.5:2375"})
    # The docker CLI's variables: DOCKER_TLS_VERIFY (verified) and DOCKER_CERT_PATH.
    tls = pem_files(tmp_path / "certs")
    env = {
        "DOCKER_HOST": "tcp://10.0.0.5:2376",
        "DOCKER_TLS_VERIFY": "1",
        "DOCKER_CERT_PATH": str(tmp_path / "certs"),
    }
    assert engine_tls(Settings(), env) == tls
    engine = connect(Settings(), env)
    api = engine._client.api
    assert api.base_url == "https://10.0.0.5:2376" and api.verify == tls.ca
    # DOCKER_CERT_PATH alone is TLS without verification: refused to another machine.
    unverified = {k: v for k, v in env.items() if k != "DOCKER_TLS_VERIFY"}
    with pytest.raises(ValueError, match="TLS without verification"):
        connect(Settings(), unverified)
    # healerd.yaml's docker_host wins over the environment, and so does its TLS.
    assert engine_tls(Settings(docker_host="unix:///run/d.sock"), env) is None


def test_tls_files_that_cannot_be_used_are_refused(tmp_path: Path) -> None:
    tls = pem_files(tmp_path / "certs")
    settings = Settings(docker_host="tcp://10.0.0.5:2376", docker_tls=tls)
    os.chmod(tls.key or "", 0o644)
    with pytest.raises(ValueError, match=r"docker_tls key .* is readable by group and others"):
        connect(settings, {})
    os.chmod(tls.key or "", 0o600)
    os.unlink(tls.cert or "")
    with pytest.raises(ValueError, match="docker_tls cert"):
        connect(settings, {})


@as_root
def test_tls_files_in_a_users_directory_are_refused(tmp_path: Path) -> None:
    tls = pem_files(tmp_path / "certs")
    os.chown(tmp_path / "certs", NOBODY, NOBODY)
    settings = Settings(docker_host="tcp://10.0.0.5:2376", docker_tls=tls)
    with pytest.raises(ValueError, match="docker_tls ca"):
        connect(settings, {})
    assert connect(dataclasses.replace(settings, strict_modes=False), {})
