"""`healerctl export` and values from `${VAR}` (security review 2026-12-01, M4): Compose
and stack files get `${VAR}` back, Kubernetes reads them from the service's Secret, a
value in a command or healthcheck is a warning (an error with --strict), the caller's
environment is read only for names given with --environment, and -o FILE is written
0600 through a new file, never through a link."""

from __future__ import annotations

import base64
import io
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from healerd.cli import healerctl
from healerd.config import parse_service_text

PASSWORD = "hunter2-from-dot-env"
CALLER = "daemon-env-secret-AKIA"
APP = """\
services:
  cache:
    image: redis:7
    command: ["redis-server", "--requirepass", "${REDIS_PASSWORD}"]
    healthcheck: {test: ["CMD-SHELL", "redis-cli -a ${REDIS_PASSWORD} ping"]}
    environment:
      AWS_KEY: ${AWS_SECRET_ACCESS_KEY}
      DB_URL: postgres://app:${REDIS_PASSWORD}@db/app
      LITERAL: "costs $$5 (not $(X))"
"""


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = healerctl.main(["export", *args], out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CALLER)  # root's shell, say
    env = tmp_path / "app.env"
    env.write_text(f"REDIS_PASSWORD={PASSWORD}\n")
    env.chmod(0o600)
    path = tmp_path / "app.yaml"
    path.write_text(APP)
    return path


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


@pytest.mark.parametrize("target", ["compose", "swarm"])
def test_compose_and_stack_files_get_the_variables_back(target: str, app: Path) -> None:
    code, out, err = run("--to", target, str(app))
    assert code == 0, err
    assert PASSWORD not in out + err and CALLER not in out + err
    svc = yaml.safe_load(out)["services"]["cache"]
    assert svc["command"] == ["redis-server", "--requirepass", "${REDIS_PASSWORD}"]
    assert svc["healthcheck"]["test"] == ["CMD-SHELL", "redis-cli -a ${REDIS_PASSWORD} ping"]
    # The caller's environment was not read: an unset variable, as in the daemon.
    assert svc["environment"] == {
        "AWS_KEY": "",
        "DB_URL": "postgres://app:${REDIS_PASSWORD}@db/app",
        "LITERAL": "costs $$5 (not $$(X))",
    }
    assert "cache: command: holds the value of ${REDIS_PASSWORD}" in err
    assert "cache: healthcheck: holds the value of ${REDIS_PASSWORD}" in err
    assert str(app.with_suffix(".env")) in err  # where the variables are kept
    # With the same variables, the output declares the same container.
    kept = {k: svc[k] for k in ("image", "command", "healthcheck", "environment")}
    text = yaml.safe_dump({"services": {"cache": kept}})
    again = parse_service_text(text, "out.yaml", env={"REDIS_PASSWORD": PASSWORD})
    assert again.errors == () and again.services is not None
    assert again.services["cache"].command == ("redis-server", "--requirepass", PASSWORD)
    assert dict(again.services["cache"].environment)["LITERAL"] == "costs $5 (not $(X))"


def test_the_callers_environment_only_by_name(app: Path) -> None:
    code, out, err = run("--to", "compose", "--environment", "AWS_SECRET_ACCESS_KEY", str(app))
    assert code == 0, err
    assert CALLER not in out + err
    env = yaml.safe_load(out)["services"]["cache"]["environment"]
    assert env["AWS_KEY"] == "${AWS_SECRET_ACCESS_KEY}"


@pytest.mark.parametrize("target", ["compose", "swarm", "kubernetes"])
def test_strict_refuses_a_value_from_a_variable_in_a_command(target: str, app: Path) -> None:
    code, out, err = run("--to", target, "--strict", str(app))
    assert code == 1 and out == ""
    assert "error: cache: command: holds the value of ${REDIS_PASSWORD}" in err
    assert PASSWORD not in err


def _container(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = [d for d in manifests if d["kind"] == "Deployment"]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _ref(key: str) -> dict[str, Any]:
    return {"secretKeyRef": {"name": "cache-env", "key": key}}


def test_kubernetes_reads_values_from_variables_from_the_secret(app: Path, tmp_path: Path) -> None:
    code, out, err = run("--to", "kubernetes", str(app))
    assert code == 0, err
    assert PASSWORD not in out + err and CALLER not in out + err
    manifests = docs(out)
    assert not [d for d in manifests if d["kind"] == "Secret"]
    c = _container(manifests)
    assert c["args"] == ["redis-server", "--requirepass", "$(REDIS_PASSWORD)"]
    assert c["livenessProbe"]["exec"]["command"] == [
        "/bin/sh",
        "-c",
        "redis-cli -a ${REDIS_PASSWORD} ping",
    ]
    assert c["env"] == [
        {"name": "AWS_KEY", "value": ""},
        {"name": "DB_URL", "valueFrom": _ref("DB_URL")},
        {"name": "LITERAL", "value": "costs $5 (not $(X))"},
        {"name": "REDIS_PASSWORD", "valueFrom": _ref("REDIS_PASSWORD")},
    ]
    assert "create the Secret cache-env (keys DB_URL, REDIS_PASSWORD" in err
    # With --include-secrets, the Secret holds them, in a file only.
    target = tmp_path / "k8s.yaml"
    code, out, err = run("--to", "kubernetes", "--include-secrets", "-o", str(target), str(app))
    assert code == 0, err
    text = target.read_text()
    assert PASSWORD not in out + err + text
    [secret] = [d for d in docs(text) if d["kind"] == "Secret"]
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert values == {"DB_URL": f"postgres://app:{PASSWORD}@db/app", "REDIS_PASSWORD": PASSWORD}


def test_kubernetes_manifests_with_secret_references_validate(app: Path) -> None:
    kv: Any = pytest.importorskip("kubernetes_validate")
    code, out, err = run("--to", "kubernetes", str(app))
    assert code == 0, err
    version = kv.utils.all_versions()[-1]
    for manifest in docs(out):
        kv.validate(manifest, version, strict=True)


@pytest.mark.parametrize("secrets", [False, True])
def test_an_output_file_is_new_0600_and_never_followed(
    secrets: bool, app: Path, tmp_path: Path
) -> None:
    extra = ["--include-secrets"] if secrets else []
    existing = tmp_path / "k8s.yaml"
    existing.write_text("old\n")
    existing.chmod(0o644)
    victim = tmp_path / "victim"
    victim.write_text("root's own\n")
    victim.chmod(0o600)
    link = tmp_path / "link.yaml"
    link.symlink_to(victim)
    for target in (existing, link):
        code, _, err = run("--to", "kubernetes", *extra, "-o", str(target), str(app))
        assert code == 0, err
        info = os.lstat(target)
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        assert target.read_text().startswith("# Generated by `healerctl export")
    assert victim.read_text() == "root's own\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["app.env", "app.yaml", "k8s.yaml", "link.yaml", "victim"]
    )


def test_an_output_file_that_cannot_be_written_leaves_nothing(app: Path, tmp_path: Path) -> None:
    target = tmp_path / "a-directory"
    target.mkdir()
    code, _, err = run("--to", "compose", "-o", str(target), str(app))
    assert code == 1 and f"cannot write {target}" in err
    assert list(target.iterdir()) == []
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


SHORT = """\
x-env: &env
  TOKEN: "${TOKEN}"
services:
  a:
    image: busybox:1.${MINOR}
    environment: ["DEBUG=${DEBUG}", "PUID=1000", "LEVEL=1"]
    command: ["sh", "-c", "sleep 1000 # 1"]
  b:
    image: busybox:1
    environment: *env
"""


def test_a_value_goes_back_only_where_it_came_from(tmp_path: Path) -> None:
    """DEBUG=1 must not turn every 1 into ${DEBUG}: a deploy with another DEBUG would
    change the image and the command. An alias (`*env`) carries its variables along."""
    env = tmp_path / "short.env"
    env.write_text("DEBUG=1\nMINOR=36\nTOKEN=tok-s3cr3t-xyz\n")
    env.chmod(0o600)
    path = tmp_path / "short.yaml"
    path.write_text(SHORT)
    code, out, err = run("--to", "compose", str(path))
    assert code == 0, err
    services = yaml.safe_load(out)["services"]
    assert services["a"]["image"] == "busybox:1.${MINOR}"
    assert services["a"]["environment"] == {"DEBUG": "${DEBUG}", "PUID": "1000", "LEVEL": "1"}
    assert services["a"]["command"] == ["sh", "-c", "sleep 1000 # 1"]
    assert services["b"]["environment"] == {"TOKEN": "${TOKEN}"}
    code, out, err = run("--to", "kubernetes", str(path))
    assert code == 0, err
    assert "tok-s3cr3t-xyz" not in out + err
    deployments = {d["metadata"]["name"]: d for d in docs(out) if d["kind"] == "Deployment"}
    env_a = deployments["a"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env_a == [
        {"name": "DEBUG", "valueFrom": {"secretKeyRef": {"name": "a-env", "key": "DEBUG"}}},
        {"name": "LEVEL", "value": "1"},
        {"name": "PUID", "value": "1000"},
    ]
    env_b = deployments["b"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env_b == [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "b-env", "key": "TOKEN"}}}
    ]
