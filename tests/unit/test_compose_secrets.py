"""Compose's secrets and configs (issue 16): file-based ones, bind-mounted read-only as
docker compose mounts them on one engine; every wrong value refused with file, line and
field; uid/gid/mode warned about; the file's content in the spec hash."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from healerd.config import parse_service_text
from healerd.engine.docker.request import secret_mounts
from healerd.model import SecretMount, ServiceSpec

STACK = """\
secrets:
  db_password:
    file: ./secrets/db.txt
  api_key:
    file: {abs_key}
configs:
  app:
    file: app.conf
services:
  db:
    image: busybox
    secrets:
      - db_password
      - source: api_key
        target: key
      - source: db_password
        target: /etc/db/password
    configs:
      - app
      - source: app
        target: /etc/app/app.conf
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "db.txt").write_text("hunter2\n")
    (tmp_path / "key.txt").write_text("k\n")
    (tmp_path / "app.conf").write_text("level=info\n")
    return tmp_path


def load(project: Path, text: str) -> dict[str, ServiceSpec]:
    result = parse_service_text(textwrap.dedent(text), str(project / "stack.yaml"), env={})
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None
    return result.services


def errors(project: Path, text: str) -> list[str]:
    result = parse_service_text(textwrap.dedent(text), str(project / "stack.yaml"), env={})
    return [str(e).removeprefix(str(project) + "/") for e in result.errors]


def stack(project: Path) -> str:
    return STACK.format(abs_key=project / "key.txt")


def test_secrets_and_configs_are_mounted_where_compose_mounts_them(project: Path) -> None:
    db = load(project, stack(project))["db"]
    assert db.secrets == (
        SecretMount("db_password", f"{project}/secrets/db.txt", "/run/secrets/db_password"),
        SecretMount("api_key", f"{project}/key.txt", "/run/secrets/key"),
        SecretMount("db_password", f"{project}/secrets/db.txt", "/etc/db/password"),
    )
    assert db.configs == (
        SecretMount("app", f"{project}/app.conf", "/app"),
        SecretMount("app", f"{project}/app.conf", "/etc/app/app.conf"),
    )
    # As docker-compose 1.29.2 sends a secret: a read-only bind in HostConfig.Mounts.
    assert secret_mounts(db)[0] == {
        "Target": "/run/secrets/db_password",
        "Source": f"{project}/secrets/db.txt",
        "Type": "bind",
        "ReadOnly": True,
    }
    assert len(secret_mounts(db)) == 5 and db.secrets_digest


def test_editing_a_secret_file_changes_the_spec_hash(project: Path) -> None:
    before = load(project, stack(project))["db"]
    (project / "secrets" / "db.txt").write_text("changed\n")
    after = load(project, stack(project))["db"]
    assert before.spec_hash != after.spec_hash
    assert before.secrets == after.secrets  # only the digest of the content moved


def test_a_service_without_secrets_keeps_its_hash(project: Path) -> None:
    plain = load(project, "services:\n  web:\n    image: busybox\n")["web"]
    declared = load(project, stack(project) + "  web:\n    image: busybox\n")["web"]
    assert plain.spec_hash == declared.spec_hash and plain.secrets_digest == ""


def test_uid_gid_and_mode_are_warned_about_as_compose_does(
    project: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = stack(project) + "  web:\n    image: busybox\n    secrets:\n"
    text += "      - {source: api_key, uid: '103', gid: '103', mode: 0440}\n"
    with caplog.at_level(logging.WARNING, "healerd.config"):
        web = load(project, text)["web"]
    assert web.secrets[0].target == "/run/secrets/api_key"
    (warning,) = [r.getMessage() for r in caplog.records if "api_key" in r.getMessage()]
    assert "uid, gid, mode: not honoured" in warning and "services.web.secrets[0]" in warning


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "secrets:\n  s: {external: true}\nservices: {}\n",
            "2:7: secrets.s.external: external secrets live in a Swarm",
        ),
        (
            "secrets:\n  s: {environment: TOKEN}\nservices: {}\n",
            "2:7: secrets.s.environment: is not supported yet",
        ),
        (
            "configs:\n  c: {content: hi}\nservices: {}\n",
            "2:7: configs.c.content: is not supported",
        ),
        ("secrets:\n  s: {}\nservices: {}\n", "secrets.s.file: is required"),
        ("secrets:\n  s: {file: 3}\nservices: {}\n", "2:7: secrets.s.file: must be a path"),
        ("secrets:\n  s: {file: x, driver: d}\nservices: {}\n", "secrets.s.driver: is a Swarm"),
        ("secrets: [a]\nservices: {}\n", "1:1: secrets: must map names to their settings"),
        (
            "services:\n  w:\n    image: busybox\n    secrets: [nope]\n",
            "4:5: services.w.secrets: uses secret 'nope', which the file's top-level secrets",
        ),
        (
            "services:\n  w:\n    image: busybox\n    configs: [nope]\n",
            "4:5: services.w.configs: uses config 'nope', which the file's top-level configs",
        ),
        (
            "services:\n  w:\n    image: busybox\n    secrets: pw\n",
            "4:5: services.w.secrets: must be a list of secret names or mappings",
        ),
        (
            "services:\n  w:\n    image: busybox\n    secrets: [{target: /x}]\n",
            "services.w.secrets[0].source: must name a secret",
        ),
        (
            "services:\n  w:\n    image: busybox\n    secrets: [{source: pw, owner: me}]\n",
            "services.w.secrets[0].owner: unknown key 'owner'",
        ),
        (
            "services:\n  w:\n    image: busybox\n    secrets: [{source: pw, mode: rw}]\n",
            "services.w.secrets[0].mode: must be a number",
        ),
        (
            "services:\n  w:\n    image: busybox\n    secrets: [pw, {source: pw, target: pw}]\n",
            "services.w.secrets[1]: target '/run/secrets/pw' is mounted twice",
        ),
    ],
)
def test_a_wrong_secret_is_refused_with_file_line_and_field(
    project: Path, text: str, message: str
) -> None:
    found = errors(project, text)
    assert any(message in e for e in found), found


def test_a_missing_secret_file_is_an_error_naming_it(project: Path) -> None:
    text = "secrets:\n  pw: {file: ./nope.txt}\nservices:\n  w:\n    image: busybox\n"
    text += "    secrets: [pw]\n"
    (found,) = errors(project, text)
    assert found.startswith("stack.yaml:6:5: services.w.secrets: 'pw': cannot read ")
    assert "nope.txt" in found


def test_a_secret_may_not_take_a_volumes_target(project: Path) -> None:
    text = stack(project) + "  web:\n    image: busybox\n    secrets: [db_password]\n"
    text += "    volumes: [/srv:/run/secrets/db_password]\n"
    found = errors(project, text)
    assert any(
        "services.web.volumes: target '/run/secrets/db_password' is also" in e for e in found
    )


def test_the_shipped_schema_accepts_these_files(project: Path) -> None:
    from tests.unit.harness.documents import STACK as NETWORK_STACK
    from tests.unit.harness.documents import load as load_yaml
    from tests.unit.harness.documents import validator

    deploy = "  d:\n    image: busybox\n    scale: 1\n    gpus: all\n    deploy:\n"
    deploy += "      resources: {limits: {cpus: '0.5', memory: 64m, pids: 10}, "
    deploy += "reservations: {devices: [{capabilities: [gpu], count: all}]}}\n"
    for text in (stack(project) + deploy, NETWORK_STACK):
        data = load_yaml(textwrap.dedent(text), "stack.yaml")
        assert [e.message for e in validator().iter_errors(data)] == []
        assert errors(project, text) == []
