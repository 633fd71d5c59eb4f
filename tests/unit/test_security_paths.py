"""Second security review (issue 29), path findings: each test failed before its fix.

1. Symlinks in directory components got past the trusted open: `realpath` resolved them
   and only the resolved chain was checked, never the directory holding a link. A user
   owning that directory re-pointed the link (at load, or just before a create) at
   another root-only directory: another service's `.env`, a `privileged` service file,
   a secret. Now every path is walked from `/` (healerd.config.pathwalk) and every
   directory it passes through is checked; at create, env values and secret files must
   still be what was checked at load, and the engine gets a secret's path without links.
6. Bind sources and `x-healerd.project_directory` had no trust check while env files in
   the same directory were refused. One rule now: under strict modes every directory
   that leads to a host path healerd uses or hands to the engine must be trusted; the
   project directory itself too; a bind source itself is the container's data.
13. Credential helpers were found on PATH with no trust check. Now each is found once
   per reload, it and its directories checked, and that path is the one run.

The user is uid 65534 (nobody): directories chowned to it stand for a user's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from healerd.config import (
    EnvFileError,
    FileResult,
    MountRefused,
    effective_environment,
    load_conf_dir,
    load_service_file,
    mounts_for_create,
)
from healerd.config.registryauth import load_registry_auth
from healerd.config.trust import FileRefused, read_trusted_resolved
from healerd.core.executor import Executor
from healerd.daemon.credentials import CredentialsFile
from healerd.engine import ImagePullFailed
from healerd.model import Action, ActionKind, ServiceSpec
from tests.unit.harness.fake_engine import FakeEngine
from tests.unit.harness.files import (
    NOBODY,
    UNIT,
    as_root,
    conf_d,
    service_section,
    trusted_tmp_dir,
    user_dir,
)

PAYMENTS = "STRIPE_KEY=sk_live_payments_only"


@pytest.fixture
def root() -> Iterator[Path]:
    with trusted_tmp_dir() as path:
        yield path


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    return path


def repoint(link: Path, target: Path) -> None:
    """What the user does in her directory: a new link renamed over the old one."""
    tmp = link.with_name(f".{link.name}.tmp")
    tmp.symlink_to(target)
    os.rename(tmp, link)


def errors_of(results: list[FileResult]) -> str:
    [result] = results
    assert result.services is None, "accepted"
    return "\n".join(str(e) for e in result.errors)


class Release:
    """The review's scene: /srv/app/current -> /opt/releases/v1 (APP_MODE=prod), and
    /payments (root, 0700) with another service's .env of the same name."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.app = root / "srv" / "app"
        self.app.mkdir(parents=True, mode=0o755)
        self.v1 = root / "opt" / "releases" / "v1"
        write(self.v1 / ".env", "APP_MODE=prod\n", 0o600)
        write(self.v1 / "pw", "release-password\n", 0o600)
        self.payments = root / "payments"
        write(self.payments / ".env", PAYMENTS + "\n", 0o600)
        write(self.payments / "pw", "payments-password\n", 0o600)
        os.chmod(self.payments, 0o700)
        self.current = self.app / "current"
        self.current.symlink_to(self.v1)
        self.conf = conf_d(root)

    def service(self, body: str) -> Path:
        return write(self.conf / "app.yaml", f"services:\n  app:\n    image: busybox\n{body}")

    def env_service(self) -> Path:
        return self.service(f"    env_file: {self.current}/.env\n")

    def secret_service(self) -> Path:
        return self.service(f"    secrets: [pw]\nsecrets:\n  pw: {{file: {self.current}/pw}}\n")

    def load(self) -> ServiceSpec:
        [result] = load_conf_dir(self.conf, strict_modes=True)
        assert result.services is not None, [str(e) for e in result.errors]
        return result.services["app"]

    def user_takes_the_directory(self) -> None:
        os.chown(self.app, NOBODY, NOBODY)


class Recorder(FakeEngine):
    """A FakeEngine that keeps the specs it was asked to create."""

    def __init__(self) -> None:
        super().__init__()
        self.specs: list[ServiceSpec] = []

    def create_and_start(
        self,
        spec: ServiceSpec,
        name: str,
        labels: Mapping[str, str],
        inherit: Sequence[tuple[str, str]] = (),
    ) -> str:
        self.specs.append(spec)
        return super().create_and_start(spec, name, labels, inherit)


def create(spec: ServiceSpec) -> tuple[Recorder, str | None]:
    """One create through the executor, as a heal makes it: the engine and the error."""
    engine = Recorder()
    executor = Executor(engine, 1)
    try:
        (result,) = executor.apply([Action(ActionKind.CREATE, spec.name, "1 wanted", spec=spec)])
    finally:
        executor.shutdown()
    return engine, result.error


# --- 1. directory links: env files -----------------------------------------------------------


@as_root
def test_an_env_file_behind_a_link_in_a_user_owned_directory_is_refused_at_load(
    root: Path,
) -> None:
    scene = Release(root)
    scene.user_takes_the_directory()
    scene.env_service()
    message = errors_of(load_conf_dir(scene.conf, strict_modes=True))
    assert f"its directory {scene.app} is owned by uid {NOBODY}" in message
    repoint(scene.current, scene.payments)  # and where it leads does not matter
    message = errors_of(load_conf_dir(scene.conf, strict_modes=True))
    assert f"its directory {scene.app} is owned by uid {NOBODY}" in message
    assert "sk_live" not in message


@as_root
def test_at_create_an_env_file_behind_a_link_the_user_re_pointed_is_refused(root: Path) -> None:
    scene = Release(root)
    scene.env_service()
    spec = scene.load()  # /srv/app was root's then
    assert effective_environment(spec) == (("APP_MODE", "prod"),)
    scene.user_takes_the_directory()
    repoint(scene.current, scene.payments)  # just before a create, no reload
    with pytest.raises(EnvFileError) as caught:
        effective_environment(spec)
    assert f"its directory {scene.app} is owned by uid {NOBODY}" in str(caught.value)
    engine, error = create(spec)
    assert error is not None and f"its directory {scene.app} is owned by uid" in error
    assert engine.specs == [] and "sk_live" not in error


def test_at_create_env_values_must_be_the_ones_checked_at_load(root: Path) -> None:
    """Even a change no untrusted user made (root re-points the link, or edits the
    file) reaches no container before a reload has checked it."""
    scene = Release(root)
    scene.env_service()
    spec = scene.load()
    repoint(scene.current, scene.payments)
    with pytest.raises(EnvFileError, match="changed since the service file was last loaded"):
        effective_environment(spec)
    engine, error = create(spec)
    assert error is not None and "changed since" in error and engine.specs == []
    repoint(scene.current, scene.v1)
    write(scene.v1 / ".env", "APP_MODE=debug\n", 0o600)
    with pytest.raises(EnvFileError, match="changed since"):
        effective_environment(spec)
    assert effective_environment(scene.load()) == (("APP_MODE", "debug"),)  # after a reload


# --- 1. directory links: service-file hops ----------------------------------------------------


@as_root
def test_a_conf_d_link_through_a_hop_in_a_user_owned_directory_is_refused(root: Path) -> None:
    """conf.d/link.yaml -> /u/hop -> /trusted/a.yaml: the user re-points `hop` at a
    root-owned `privileged: true` file of her choice."""
    conf = conf_d(root)
    trusted = root / "trusted"
    write(trusted / "a.yaml", "services:\n  a: {image: busybox}\n")
    write(trusted / "b.yaml", "services:\n  a: {image: busybox, privileged: true}\n")
    hop = user_dir(root / "u") / "hop"
    hop.symlink_to(trusted / "a.yaml")
    (conf / "link.yaml").symlink_to(hop)
    message = errors_of(load_conf_dir(conf, strict_modes=True))
    assert f"refused: file {conf / 'link.yaml'} (a symbolic link to {hop}): its directory " in (
        message
    )
    assert f"{root / 'u'} is owned by uid {NOBODY}" in message
    repoint(hop, trusted / "b.yaml")
    assert f"{root / 'u'} is owned by uid {NOBODY}" in errors_of(
        load_conf_dir(conf, strict_modes=True)
    )


@as_root
def test_a_conf_d_link_through_a_directory_link_in_a_user_owned_directory_is_refused(
    root: Path,
) -> None:
    conf = conf_d(root)
    trusted = root / "trusted"
    write(trusted / "a.yaml", "services:\n  a: {image: busybox}\n")
    (user_dir(root / "u") / "dir").symlink_to(trusted)
    (conf / "link.yaml").symlink_to(root / "u" / "dir" / "a.yaml")
    assert f"{root / 'u'} is owned by uid {NOBODY}" in errors_of(
        load_conf_dir(conf, strict_modes=True)
    )


def test_links_in_trusted_directories_are_followed_relative_and_dotdot_too(root: Path) -> None:
    real = write(root / "b" / "c" / "app.env", "A=1\n")
    (root / "a").mkdir()
    (root / "a" / "link").symlink_to("../b/c")
    (root / "b" / "up").symlink_to("..")
    raw, where = read_trusted_resolved(
        root / "a" / "link" / "app.env", "env file", strict=True, limit=100
    )
    assert (raw, where) == (b"A=1\n", real)
    _, where = read_trusted_resolved(
        root / "b" / "up" / "a" / "link" / "app.env", "env file", strict=True, limit=100
    )
    assert where == real


def test_a_loop_of_links_is_refused(root: Path) -> None:
    (root / "x").symlink_to(root / "y")
    (root / "y").symlink_to(root / "x")
    with pytest.raises(FileRefused, match="more than 40 symbolic links on the way"):
        read_trusted_resolved(root / "x" / "app.env", "env file", strict=True, limit=100)


# --- 1. directory links: secrets and configs ---------------------------------------------------


@as_root
def test_a_secret_behind_a_link_in_a_user_owned_directory_is_refused_at_load(root: Path) -> None:
    scene = Release(root)
    scene.user_takes_the_directory()
    scene.secret_service()
    message = errors_of(load_conf_dir(scene.conf, strict_modes=True))
    assert f"its directory {scene.app} is owned by uid {NOBODY}" in message


@as_root
def test_at_create_a_secret_behind_a_link_the_user_re_pointed_is_refused(root: Path) -> None:
    scene = Release(root)
    scene.secret_service()
    spec = scene.load()
    scene.user_takes_the_directory()
    repoint(scene.current, scene.payments)
    with pytest.raises(MountRefused, match=f"its directory {scene.app} is owned by uid"):
        mounts_for_create(spec)
    engine, error = create(spec)
    assert error is not None and "owned by uid" in error and engine.specs == []


def test_the_engine_gets_a_secrets_path_without_links_checked_again_at_create(
    root: Path,
) -> None:
    """dockerd resolves a bind source itself, at create: it must get no link to follow."""
    scene = Release(root)
    scene.secret_service()
    spec = scene.load()
    assert spec.secrets[0].source == f"{scene.current}/pw"  # as written (describe shows it)
    engine, error = create(spec)
    assert error is None
    [sent] = engine.specs
    assert [m.source for m in sent.secrets] == [str(scene.v1 / "pw")]
    repoint(scene.current, scene.payments)  # root changed it, no reload yet
    engine, error = create(spec)
    assert error is not None and "changed since the service file was last loaded" in error
    assert engine.specs == []
    assert "payments-password" not in error


# --- 6. one rule for the project directory and bind sources -----------------------------------


@as_root
def test_a_user_owned_project_directory_is_refused(root: Path) -> None:
    conf = conf_d(root)
    project = user_dir(root / "home-pi" / "iotstack")
    write(
        conf / "iot.yaml",
        f"x-healerd: {{project_directory: {project}}}\n"
        "services:\n  nodered:\n    image: busybox\n    volumes: [./data:/data]\n",
    )
    message = errors_of(load_conf_dir(conf, strict_modes=True))
    assert f"x-healerd.project_directory: refused: project directory {project}: its " in message
    assert f"directory {project} is owned by uid {NOBODY}" in message
    # the same file, its bind source refused too (the directory holding ./data)
    assert f"refused: bind source {project}/data: its directory {project} is owned" in message


@as_root
def test_bind_sources_below_a_user_writable_directory_are_refused(root: Path) -> None:
    conf = conf_d(root)
    bob = user_dir(root / "home-bob")
    user_dir(conf / "volumes")
    write(
        conf / "app.yaml",
        "services:\n  app:\n    image: busybox\n"
        f"    volumes: ['{bob}/data:/data', ./volumes/db:/db, "
        f"{{type: bind, source: {bob}/x/y, target: /y}}]\n",
    )
    message = errors_of(load_conf_dir(conf, strict_modes=True))
    assert f"refused: bind source {bob}/data: its directory {bob} is owned by uid" in message
    assert f"bind source {conf}/volumes/db: its directory {conf}/volumes is owned" in message
    assert f"bind source {bob}/x/y: its directory {bob} is owned" in message
    assert "could swap it for a link to any host path" in message


@as_root
def test_the_compose_md_layout_passes_and_a_data_directory_may_be_the_containers(
    root: Path,
) -> None:
    """COMPOSE.md's example (a project in /srv/iotstack, root's, linked into conf.d)
    passes. The rule judges the way to a source, not the source: a data directory owned
    by the container's user, one not made yet, and a link a trusted directory holds are
    fine; a link that leads through a user's directory is not."""
    project = root / "srv" / "iotstack"
    user_dir(project / "volumes" / "nodered" / "data")  # the container's user's
    os.chown(project / "volumes" / "nodered" / "data", 1000, 1000)
    (project / "logs").symlink_to(root / "var-log")
    write(
        project / "docker-compose.yml",
        "services:\n  nodered:\n    image: busybox\n"
        "    volumes: [./volumes/nodered/data:/data, ./not-yet/made:/m, ./logs:/logs]\n",
    )
    conf = conf_d(root)
    (conf / "iotstack.yaml").symlink_to(project / "docker-compose.yml")
    [result] = load_conf_dir(conf, strict_modes=True)
    assert result.errors == ()
    bob = user_dir(root / "home-bob")
    (project / "logs").unlink()
    (project / "logs").symlink_to(bob / "logs")
    message = errors_of(load_conf_dir(conf, strict_modes=True))
    assert f"refused: bind source {project}/logs: its directory {bob} is owned by uid" in message


def test_strict_modes_off_checks_no_bind_source(root: Path) -> None:
    open_dir = root / "shared"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    text = "services:\n  app:\n    image: busybox\n    volumes: ['./shared/data:/data']\n"
    path = write(root / "app.yaml", text)
    assert load_service_file(path, strict_modes=False).errors == ()
    [error] = load_service_file(path, strict_modes=True).errors
    assert f"bind source {open_dir}/data: its directory {open_dir} is writable by group" in (
        str(error)
    )


# --- 13. credential helpers ---------------------------------------------------------------------


def helper(directory: Path, name: str, secret: str, mode: int = 0o755) -> Path:
    """A docker-credential-NAME that leaves a mark when it runs."""
    path = directory / f"docker-credential-{name}"
    mark = directory / f"ran-{name}"
    write(
        path,
        f"#!/bin/sh\nread server\ntouch {mark}\n"
        f'printf \'{{"ServerURL":"%s","Username":"u","Secret":"{secret}"}}\' "$server"\n',
        mode,
    )
    return path


def auth_json(root: Path, **top: object) -> Path:
    return write(root / "auth.json", json.dumps(top), 0o600)


@as_root
def test_a_credential_helper_in_a_user_writable_directory_is_refused_and_never_run(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from healerd.engine.docker.pullauth import registry_auth as _auth_config

    bob = user_dir(root / "bob-bin")
    planted = helper(bob, "pass", "planted")  # root's file, in bob's directory
    monkeypatch.setenv("PATH", f"{bob}:/usr/bin:/bin")
    creds = load_registry_auth(auth_json(root, credsStore="pass"), strict=True)
    auth = creds.for_image("registry.example/app:1")
    assert auth is not None and auth.helper == "pass"
    with pytest.raises(ImagePullFailed) as caught:
        _auth_config("registry.example/app:1", auth)  # a pull: root would run it
    assert not (bob / "ran-pass").exists()
    assert f"refused: credential helper {planted}: its directory {bob} is owned by uid" in (
        str(caught.value)
    )
    assert auth.helper_path == "" and str(caught.value).endswith(auth.helper_error)


def test_a_group_writable_credential_helper_is_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = root / "bin"
    bin_dir.mkdir()
    found = helper(bin_dir, "ecr-login", "x", 0o775)
    monkeypatch.setenv("PATH", str(bin_dir))
    creds = load_registry_auth(auth_json(root, credHelpers={"r.example": "ecr-login"}), strict=True)
    auth = creds.for_image("r.example/app:1")
    assert auth is not None
    assert f"refused: credential helper {found} is writable by group (mode 0775" in (
        auth.helper_error
    )
    assert "could run anything as root" in auth.helper_error


def test_the_helper_found_at_reload_is_the_one_run(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from healerd.engine.docker.pullauth import registry_auth as _auth_config

    trusted = root / "bin"
    trusted.mkdir()
    helper(trusted, "fake", "from-the-checked-one")
    other = root / "other"
    other.mkdir()
    helper(other, "fake", "from-path-later")
    monkeypatch.setenv("PATH", str(trusted))
    auth = load_registry_auth(auth_json(root, credsStore="fake"), strict=True).for_image("h:1/a")
    assert auth is not None and auth.helper_path == str(trusted / "docker-credential-fake")
    monkeypatch.setenv("PATH", f"{other}:{trusted}")  # PATH now leads elsewhere
    got = _auth_config("h:1/a", auth)
    assert (got["username"], got["password"], got["serveraddress"]) == (
        "u",
        "from-the-checked-one",
        "h:1",
    )
    assert not (other / "ran-fake").exists()


@as_root
def test_a_helper_linked_into_a_user_directory_is_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = root / "bin"
    bin_dir.mkdir()
    bob = user_dir(root / "bob")
    (bin_dir / "docker-credential-pass").symlink_to(helper(bob, "pass", "x"))
    monkeypatch.setenv("PATH", str(bin_dir))
    auth = load_registry_auth(auth_json(root, credsStore="pass"), strict=True).for_image("x:1")
    assert auth is not None and f"its directory {bob} is owned by uid" in auth.helper_error


def test_a_refused_helper_is_shown_by_status_and_the_rest_of_the_file_applies(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(root / "nowhere"))
    path = auth_json(
        root, auths={"h:1": {"username": "u", "password": "p"}}, credHelpers={"g:1": "gone"}
    )
    creds = CredentialsFile()
    assert creds.reload(path, strict=True)
    assert creds.error == (
        f"credential helper docker-credential-gone is not installed on PATH ({root}/nowhere)"
    )
    found = creds.for_image("h:1/a")
    assert found is not None and found.username == "u"
    (root / "nowhere").mkdir()
    helper(root / "nowhere", "gone", "x")
    assert creds.reload(path, strict=True)  # installed: found at the next reload
    assert creds.error == ""
    gone = creds.for_image("g:1/a")
    assert gone is not None and gone.helper_path == str(root / "nowhere" / "docker-credential-gone")


def test_the_unit_runs_healerd_with_a_fixed_path() -> None:
    unit = service_section(UNIT)
    assert "PATH=/usr/sbin:/usr/bin:/sbin:/bin" in unit["Environment"]
