"""auth.json: Docker's config.json format, per-registry choice, trust and secrecy."""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.config.registryauth import (
    RegistryAuthError,
    RegistryCredentials,
    auth_file,
    load_registry_auth,
    parse_registry_auth,
    registry_of,
)
from healerd.config.settings import load_settings
from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import LoopSettings
from healerd.core.timings import Timings
from healerd.core.wiring import build_loop
from healerd.daemon.credentials import CredentialsFile
from healerd.model import RegistryAuth
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine
from tests.unit.harness.files import trusted_tmp_dir
from tests.unit.harness.loop import desired, drive, state

SECRET = "s3cr3t-Pa55"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def doc(**top: object) -> bytes:
    return json.dumps(top).encode()


@pytest.fixture
def root() -> Iterator[Path]:
    with trusted_tmp_dir() as path:
        yield path


def write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


# -- the format ---------------------------------------------------------------------------


def test_auths_with_auth_and_with_username_password() -> None:
    creds = parse_registry_auth(
        doc(
            auths={
                "127.0.0.1:5000": {"auth": b64(f"edge:{SECRET}")},
                "https://registry.example.com/v2/": {"username": "bob", "password": "pw:x"},
            }
        )
    )
    a = creds.for_image("127.0.0.1:5000/app:1")
    assert a == RegistryAuth("127.0.0.1:5000", username="edge", password=SECRET)
    b = creds.for_image("registry.example.com/team/app@sha256:" + "0" * 64)
    assert b is not None and (b.username, b.password) == ("bob", "pw:x")
    assert SECRET not in repr(a) and SECRET not in str(creds)


def test_the_registry_of_an_image() -> None:
    assert registry_of("127.0.0.1:5000/app:1") == "127.0.0.1:5000"
    assert registry_of("docker.io/library/x") == "docker.io"
    assert registry_of("x:1") == "docker.io"
    assert registry_of("library/x") == "docker.io"
    assert registry_of("localhost/app") == "localhost"
    assert registry_of("index.docker.io/library/x:2") == "docker.io"


def test_each_pull_uses_its_registrys_entry() -> None:
    creds = parse_registry_auth(
        doc(
            auths={
                "127.0.0.1:5000": {"auth": b64("local:one")},
                "https://index.docker.io/v1/": {"auth": b64("hub:two")},
            }
        )
    )
    hub = RegistryAuth("docker.io", username="hub", password="two")
    assert creds.for_image("127.0.0.1:5000/app:1") == RegistryAuth(
        "127.0.0.1:5000", username="local", password="one"
    )
    assert creds.for_image("docker.io/library/x") == hub
    assert creds.for_image("x:1") == hub
    assert creds.for_image("127.0.0.1:5001/app:1") is None  # another port, another registry
    assert creds.for_image("ghcr.io/o/app:1") is None


def test_helpers_then_auths_then_the_store() -> None:
    creds = parse_registry_auth(
        doc(
            auths={"a.example": {"auth": b64("u:p")}, "https://index.docker.io/v1/": {}},
            credHelpers={"b.example": "ecr-login"},
            credsStore="pass",
        )
    )
    assert creds.for_image("b.example/x") == RegistryAuth("b.example", helper="ecr-login")
    assert creds.for_image("a.example/x") == RegistryAuth("a.example", username="u", password="p")
    # An empty entry (what `docker login` leaves with a store) falls to the store.
    assert creds.for_image("x:1") == RegistryAuth("docker.io", helper="pass")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"auths": {"h": {"auth": "' + SECRET.encode() + b'"', "not valid JSON (line 1"),
        (b"[1]", "must be a JSON object"),
        (doc(auths=[]), "auths must be an object"),
        (doc(auths={"h": {"auth": b64(SECRET)}}), "auths['h'].auth is not base64 of user:"),
        (doc(auths={"h": {"auth": SECRET + "!"}}), "auths['h'].auth is not base64 of user:"),
        (doc(auths={"h": {"password": SECRET}}), "auths['h'] has a password but no username"),
        (doc(auths={"h": {"username": 1}}), "auths['h'].username must be a string"),
        (doc(credHelpers={"h": "../x"}), "credHelpers['h'] must name a helper"),
        (doc(credsStore=7), "credsStore must be a string"),
        (b"\xff\xfe{", "not valid UTF-8"),
    ],
)
def test_a_malformed_file_says_what_without_the_secret(raw: bytes, reason: str) -> None:
    with pytest.raises(RegistryAuthError) as err:
        parse_registry_auth(raw)
    assert reason in str(err.value)
    assert SECRET not in str(err.value)


# -- the file -------------------------------------------------------------------------------


def test_a_missing_file_means_no_credentials(root: Path) -> None:
    creds = load_registry_auth(root / "auth.json", strict=True)
    assert creds == RegistryCredentials()
    assert creds.for_image("127.0.0.1:5000/app:1") is None


def test_a_root_only_file_is_read(root: Path) -> None:
    path = write(root / "auth.json", doc(auths={"h:1": {"auth": b64("u:p")}}))
    assert load_registry_auth(path, strict=True).for_image("h:1/a") is not None


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_file_others_may_read_is_refused_under_strict_modes(root: Path, mode: int) -> None:
    path = write(root / "auth.json", doc(auths={"h:1": {"auth": b64(f"u:{SECRET}")}}), mode)
    with pytest.raises(RegistryAuthError) as err:
        load_registry_auth(path, strict=True)
    assert str(path) in str(err.value) and "readable by" in str(err.value)
    assert f"chmod 600 {path}" in str(err.value) and SECRET not in str(err.value)
    # strict_modes: false (development) reads it.
    assert load_registry_auth(path, strict=False).for_image("h:1/a") is not None


def test_a_file_others_may_write_is_refused(root: Path) -> None:
    path = write(root / "auth.json", doc(), 0o622)
    with pytest.raises(RegistryAuthError, match="writable by group and others"):
        load_registry_auth(path, strict=True)


def test_malformed_json_names_the_file_and_not_the_secret(root: Path) -> None:
    text = json.dumps({"auths": {"h:1": {"username": "u", "password": SECRET}}})
    path = write(root / "auth.json", text[:-8].encode())
    with pytest.raises(RegistryAuthError) as err:
        load_registry_auth(path, strict=True)
    assert str(err.value).startswith(f"{path}: not valid JSON (line 1, column ")
    assert SECRET not in str(err.value)


def test_where_the_file_is(root: Path) -> None:
    assert auth_file(Path("/etc/healerd"), None) == Path("/etc/healerd/auth.json")
    assert auth_file(Path("/etc/healerd"), Path("/srv/a.json")) == Path("/srv/a.json")
    settings = write(root / "healerd.yaml", b"registry_auth: /srv/auth.json\n", 0o644)
    assert load_settings(settings).registry_auth == Path("/srv/auth.json")
    write(settings, b"registry_auth: auth.json\n", 0o644)
    with pytest.raises(Exception, match="must be an absolute path"):
        load_settings(settings)


# -- reloads --------------------------------------------------------------------------------


def test_a_broken_file_at_reload_keeps_the_previous_credentials(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(root / "auth.json", doc(auths={"h:1": {"auth": b64(f"u:{SECRET}")}}))
    creds = CredentialsFile()
    assert creds.reload(path, strict=True) is True
    assert creds.reload(path, strict=True) is False  # unchanged
    write(path, b'{"auths": {"h:1": {"auth": "' + SECRET.encode() + b'"}')
    with caplog.at_level(logging.INFO, logger="healerd"):
        assert creds.reload(path, strict=True) is False
        assert creds.reload(path, strict=True) is False
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and str(path) in errors[0] and "not valid JSON" in errors[0]
    assert creds.error and SECRET not in creds.error
    previous = creds.for_image("h:1/app")
    assert previous is not None and previous.password == SECRET
    write(path, doc(auths={"h:1": {"username": "v", "password": "new"}}))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="healerd"):
        assert creds.reload(path, strict=True) is True
    assert creds.error == "" and creds.for_image("h:1/app") == RegistryAuth(
        "h:1", username="v", password="new"
    )
    assert not any("new" in r.getMessage().split(": ")[-1] for r in caplog.records)
    assert all(SECRET not in r.getMessage() for r in caplog.records)


def test_a_pull_gets_the_credentials_of_its_registry_and_new_ones_retry_at_once(
    root: Path,
) -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"pull"})
    engine.images = set()
    creds = CredentialsFile()
    settings = LoopSettings(
        workers=2,
        parallel_actions=4,
        timings=Timings(backoff=Backoff(0.5, 8.0), pull_backoff=Backoff(60, 300)),
    )
    ctrl = build_loop(engine, clock, settings, credentials=creds.for_image)
    image = "127.0.0.1:5000/app:1"
    ctrl.set_desired(desired(spec("a", 1, image=image), spec("b", 1, image="x:1")))
    drive(ctrl, clock, max_seconds=1)
    assert state(ctrl, "a") == "ImagePullBackOff"
    assert dict(engine.pull_auths) == {image: None, "x:1": None}
    # Credentials arrive (the registry accepts them): the service pulls now, not after
    # its 60 s backoff.
    path = write(root / "auth.json", doc(auths={"127.0.0.1:5000": {"auth": b64("u:p")}}))
    assert creds.reload(path, strict=True)
    engine.pullable.add(image)
    ctrl.retry_pulls()
    drive(ctrl, clock, max_seconds=1)
    assert len(engine.running("a")) == 1
    assert dict(engine.pull_auths) == {
        image: RegistryAuth("127.0.0.1:5000", username="u", password="p"),
        "x:1": None,  # Docker Hub: no entry, an anonymous pull
    }


# -- what the engine adapter sends ----------------------------------------------------------


def test_the_x_registry_auth_of_a_pull(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from healerd.engine import ImagePullFailed
    from healerd.engine.docker.pullauth import registry_auth as _auth_config

    # None is an anonymous pull, not the SDK's own ~/.docker/config.json.
    assert _auth_config("x:1", None) == {}
    assert _auth_config("h:1/a", RegistryAuth("h:1", username="u", password="p")) == {
        "username": "u",
        "password": "p",
        "serveraddress": "h:1",
    }
    token = RegistryAuth("h:1", username="u", identity_token="tok")
    assert _auth_config("h:1/a", token) == {"identitytoken": "tok", "serveraddress": "h:1"}
    # A credential helper, through the SDK's credential store client, run from the path
    # found and checked when auth.json was read (never looked up on PATH here).
    helper = root / "docker-credential-fake"
    helper.write_text(
        "#!/bin/sh\nread server\n"
        'printf \'{"ServerURL":"%s","Username":"u","Secret":"from-helper"}\' "$server"\n'
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", "/nowhere")
    got = _auth_config("h:1/a", RegistryAuth("h:1", helper="fake", helper_path=str(helper)))
    assert (got["username"], got["password"], got["serveraddress"]) == ("u", "from-helper", "h:1")
    hub = _auth_config("x:1", RegistryAuth("docker.io", helper="fake", helper_path=str(helper)))
    assert hub["serveraddress"] == "https://index.docker.io/v1/"  # as the SDK asks a helper
    refused = RegistryAuth("h:1", helper="absent", helper_error="not installed on PATH (/x)")
    with pytest.raises(
        ImagePullFailed, match=r"docker-credential-absent for h:1: not installed on PATH \(/x\)"
    ):
        _auth_config("h:1/a", refused)


HELPERS = {
    # The review's fake helpers (issue 29, point 12): one that fails with a token in its
    # error text, one that prints no JSON, one that prints an empty object; and more.
    "leaky": 'echo "error: refreshing token for $server failed: '
    '{\\"access_token\\":\\"ya29.SECRET-TOKEN\\"}\033]0;x\007"; exit 1',
    "garbled": 'echo "not json"',
    "empty": 'echo "{}"',
    "null": 'echo "null"',
    "long": "head -c 5000 /dev/zero | tr '\\0' T; exit 7",
}


def test_a_failing_credential_helper_is_named_with_its_exit_code_and_nothing_it_said(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from healerd.engine import ImagePullFailed
    from healerd.engine.docker.pullauth import registry_auth as _auth_config

    for name, body in HELPERS.items():
        helper = root / f"docker-credential-{name}"
        helper.write_text(f"#!/bin/sh\nread server\n{body}\n")
        helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{root}:{os.environ['PATH']}")
    caplog.set_level(logging.DEBUG, logger="healerd.engine")
    where = "pull gcr.example/app:1: credential helper docker-credential-{} for gcr.example"
    expected = {
        "leaky": "failed (exit 1)",
        "garbled": "failed: its output is not the credentials JSON of the helper protocol",
        "empty": "failed: its output is not the credentials JSON of the helper protocol",
        "null": "failed: its output is not the credentials JSON of the helper protocol",
        "long": "failed (exit 7)",
    }
    for name, reason in expected.items():
        with pytest.raises(ImagePullFailed) as got:
            auth = RegistryAuth(
                "gcr.example", helper=name, helper_path=str(root / f"docker-credential-{name}")
            )
            _auth_config("gcr.example/app:1", auth)
        assert str(got.value) == f"{where.format(name)} {reason}", name
    # The output is logged at debug level only, escaped and cut.
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    leaky = next(m for m in debug if "docker-credential-leaky exited 1" in m)
    assert "ya29.SECRET-TOKEN" in leaky and "\x1b" not in leaky and "\\x1b]0;x\\x07" in leaky
    long = next(m for m in debug if "docker-credential-long exited 7" in m)
    assert (
        "T" * 200 in long and "T" * 201 not in long and "[4800 more characters not shown]" in long
    )
    assert all("SECRET" not in r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG)


def test_the_daemon_reads_the_file_healerd_yaml_names_at_each_reload(tmp_path: Path) -> None:
    from tests.unit.harness.daemon import daemon

    d, _ = daemon(tmp_path)
    default = write(tmp_path / "auth.json", doc(auths={"h:1": {"auth": b64("dflt:p")}}))
    d.reload()
    found = d.credentials.for_image("h:1/app:1")
    assert found is not None and found.username == "dflt"
    other = write(tmp_path / "other.json", doc(auths={"h:1": {"auth": b64(f"other:{SECRET}")}}))
    (tmp_path / "healerd.yaml").write_text(f"registry_auth: {other}\n")
    d.reload()
    found = d.credentials.for_image("h:1/app:1")
    assert found is not None and found.username == "other"
    write(other, b"{", 0o600)
    d.reload()
    error = d.node_report().credentials_error
    assert error.startswith(f"{other}: not valid JSON") and SECRET not in error
    found = d.credentials.for_image("h:1/app:1")
    assert found is not None and found.username == "other"  # the previous ones stay
    assert default.exists()


def test_the_engine_client_keeps_nothing_of_a_docker_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29, L4 (tests/integration/test_registry.py shows the check itself): the SDK
    reads $DOCKER_CONFIG/config.json when a client is made; healerd keeps none of it
    (credentials, helpers, headers sent with every request), nor requests' environment
    (a CA bundle or proxy of the environment would override docker_tls)."""
    from healerd.engine.docker import DockerEngine

    sdk = tmp_path / "docker-config"
    sdk.mkdir()
    config = {
        "auths": {"registry.example:5000": {"auth": b64("rootuser:root-password")}},
        "credsStore": "pass",
        "HttpHeaders": {"X-Leak": "root"},
    }
    (sdk / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("DOCKER_CONFIG", str(sdk))
    api = DockerEngine("unix:///nonexistent.sock")._client.api
    assert api._general_configs == {} and api._auth_configs.is_empty
    assert api._auth_configs.creds_store is None and api.trust_env is False
