"""`healerctl export`: round trips to Swarm, Kubernetes and Compose, checked against the
parsed specs; Kubernetes manifests validated offline with kubernetes-validate."""

from __future__ import annotations

import base64
import io
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from healerd.cli import healerctl
from healerd.cli.export.command import load
from healerd.model import ServiceSpec, UpdateOrder

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "conf.d" / "example.yaml"
SECRET_VALUE = "s3cr3t-Value-never-shown"

MULTI = """\
services:
  web:
    image: registry.local/web:1.2
    entrypoint: ["/bin/sh", "-c"]
    command: ["httpd -f -p 8080"]
    replicas: 3
    environment: {LOG_LEVEL: debug, MODE: prod}
    env_file: web.env
    user: "1000:1000"
    working_dir: /srv
    ports: ["8080"]
    volumes: ["web-data:/data", "/srv/conf:/etc/web:ro", "/scratch"]
    mem_limit: 64m
    cpus: 0.5
    stop_grace_period: 5s
    healthcheck:
      test: ["CMD", "wget", "-q", "-O-", "http://127.0.0.1:8080/"]
      interval: 5s
      timeout: 2s
      retries: 4
      start_period: 10s
    update_config: {parallelism: 2, min_ready_seconds: 7s}
  worker:
    image: registry.local/worker:3
    replicas: 4
    healthcheck: {test: "test -e /tmp/ok", interval: 10s}
    update_config: {parallelism: 3, order: stop-first, progress_deadline: 2m}
    priority: 5
    unhealthy_grace: 30s
"""


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = healerctl.main(["export", *args], out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def multi(tmp_path: Path) -> Path:
    (tmp_path / "web.env").write_text(
        f"DB_PASSWORD={SECRET_VALUE}\nAPI_TOKEN='tok-{SECRET_VALUE}'\n"
    )
    path = tmp_path / "multi.yaml"
    path.write_text(MULTI)
    return path


def specs_of(path: Path) -> dict[str, ServiceSpec]:
    services, errors, _ = load([path])
    assert not errors
    return services


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


# -- Swarm ----------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["example", "multi"])
def test_swarm_round_trip(which: str, multi: Path) -> None:
    path = EXAMPLE if which == "example" else multi
    code, out, err = run("--to", "swarm", str(path))
    assert code == 0, err
    stack = yaml.safe_load(out)
    assert stack["version"] == "3.8"
    specs = specs_of(path)
    assert set(stack["services"]) == set(specs)
    for name, spec in specs.items():
        svc = stack["services"][name]
        assert svc["image"] == spec.image
        assert svc["deploy"]["replicas"] == spec.replicas
        assert set(svc.get("environment", {})) == {k for k, _ in spec.environment}
        u = svc["deploy"]["update_config"]
        assert u["parallelism"] == spec.update_config.parallelism
        assert u["order"] == spec.update_order
        assert u["failure_action"] == "rollback"
        assert u["monitor"] == f"{spec.update_config.min_ready_seconds:g}s"
        assert svc["deploy"]["restart_policy"]["condition"] == "any"
        assert "max_attempts" not in svc["deploy"]["restart_policy"]
        if spec.healthcheck:
            assert svc["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")
    if which == "multi":
        web = stack["services"]["web"]
        assert web["deploy"]["resources"]["limits"] == {"memory": "64M", "cpus": "0.5"}
        assert web["healthcheck"]["retries"] == 4 and web["healthcheck"]["interval"] == "5s"
        assert web["volumes"] == ["web-data:/data", "/srv/conf:/etc/web:ro", "/scratch"]
        assert stack["volumes"] == {"web-data": {}}
        # Lost in Swarm: a warning naming each field.
        for field in ("priority", "unhealthy_grace", "update_config.progress_deadline"):
            assert f"worker: {field}:" in err
        assert SECRET_VALUE not in out + err


# -- Kubernetes -----------------------------------------------------------------------------


def by_kind(manifests: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in manifests if d["kind"] == kind}


def container_of(deployment: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


@pytest.mark.parametrize("which", ["example", "multi"])
def test_kubernetes_round_trip(which: str, multi: Path) -> None:
    path = EXAMPLE if which == "example" else multi
    code, out, err = run("--to", "kubernetes", str(path))
    assert code == 0, err
    manifests = docs(out)
    deployments = by_kind(manifests, "Deployment")
    specs = specs_of(path)
    assert set(deployments) == set(specs)
    for name, spec in specs.items():
        d = deployments[name]
        for labels in (d["metadata"]["labels"], d["spec"]["template"]["metadata"]["labels"]):
            assert labels["app.kubernetes.io/name"] == name
            assert labels["healerd.io/service"] == name
        assert d["spec"]["replicas"] == spec.replicas
        rolling = d["spec"]["strategy"]["rollingUpdate"]
        n = spec.update_config.parallelism
        if spec.update_order == UpdateOrder.START_FIRST:
            assert rolling == {"maxSurge": n, "maxUnavailable": 0}
        else:
            assert rolling == {"maxSurge": 0, "maxUnavailable": n}
        assert d["spec"]["minReadySeconds"] == spec.update_config.min_ready_seconds
        c = container_of(d)
        assert c["image"] == spec.image
        assert [e["name"] for e in c.get("env", [])] == [k for k, _ in spec.environment]
        assert ("livenessProbe" in c) == (spec.healthcheck is not None)
    if which == "multi":
        check_multi_kubernetes(manifests, out + err)


def check_multi_kubernetes(manifests: list[dict[str, Any]], printed: str) -> None:
    deployments = by_kind(manifests, "Deployment")
    web, worker = container_of(deployments["web"]), container_of(deployments["worker"])
    assert web["command"] == ["/bin/sh", "-c"] and web["args"] == ["httpd -f -p 8080"]
    probe = web["livenessProbe"]
    assert probe == web["readinessProbe"]
    assert probe["exec"]["command"] == ["wget", "-q", "-O-", "http://127.0.0.1:8080/"]
    assert (probe["periodSeconds"], probe["timeoutSeconds"]) == (5, 2)
    assert (probe["failureThreshold"], probe["initialDelaySeconds"]) == (4, 10)
    assert worker["livenessProbe"]["exec"]["command"] == ["/bin/sh", "-c", "test -e /tmp/ok"]
    assert web["resources"]["limits"] == {"memory": str(64 * 2**20), "cpu": "500m"}
    assert web["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000}
    assert web["envFrom"] == [{"secretRef": {"name": "web-env"}}]
    pod = deployments["web"]["spec"]["template"]["spec"]
    kinds = [next(k for k in v if k != "name") for v in pod["volumes"]]
    assert kinds == ["persistentVolumeClaim", "hostPath", "emptyDir"]
    assert web["volumeMounts"][1] == {"name": "vol-1", "mountPath": "/etc/web", "readOnly": True}
    assert set(by_kind(manifests, "PersistentVolumeClaim")) == {"web-data"}
    assert set(by_kind(manifests, "Service")) == {"web"}  # only web publishes ports
    assert by_kind(manifests, "Service")["web"]["spec"]["ports"][0]["port"] == 8080
    assert deployments["worker"]["spec"]["progressDeadlineSeconds"] == 120
    # No Secret, and not one env_file value, without --include-secrets.
    assert not by_kind(manifests, "Secret")
    assert SECRET_VALUE not in printed
    assert "kubectl create secret generic web-env" in printed


def test_kubernetes_include_secrets_writes_a_secret_only_to_a_file(
    multi: Path, tmp_path: Path
) -> None:
    target = tmp_path / "k8s.yaml"
    code, out, err = run("--to", "kubernetes", "--include-secrets", "-o", str(target), str(multi))
    assert code == 0, err
    assert SECRET_VALUE not in out + err
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    text = target.read_text()
    assert SECRET_VALUE not in text  # base64 only
    secret = by_kind(docs(text), "Secret")["web-env"]
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert values == {"DB_PASSWORD": SECRET_VALUE, "API_TOKEN": f"tok-{SECRET_VALUE}"}
    # Never to a terminal, and only Kubernetes has a Secret to put them in.
    assert run("--to", "kubernetes", "--include-secrets", str(multi))[0] == 2
    assert run("--to", "swarm", "--include-secrets", "-o", str(target), str(multi))[0] == 2


@pytest.mark.parametrize("which", ["example", "multi"])
def test_kubernetes_manifests_validate_offline(which: str, multi: Path) -> None:
    kv: Any = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed (pip install '.[dev]')"
    )
    versions: list[str] = kv.utils.all_versions()
    chosen = sorted({versions[0], versions[-1]})
    assert len(chosen) >= 2, versions
    path = EXAMPLE if which == "example" else multi
    # --strict would refuse multi (priority, ...): validate what a user would deploy.
    args = ["--to", "kubernetes", *(["--strict"] if which == "example" else []), str(path)]
    code, out, err = run(*args)
    assert code == 0, err
    manifests = docs(out)
    assert manifests
    for version in chosen:
        for manifest in manifests:
            kv.validate(manifest, version, strict=True)


# -- Compose --------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["example", "multi"])
def test_compose_round_trip(which: str, multi: Path) -> None:
    path = EXAMPLE if which == "example" else multi
    code, out, err = run("--to", "compose", str(path))
    assert code == 0, err
    compose = yaml.safe_load(out)
    specs = specs_of(path)
    assert set(compose["services"]) == set(specs)
    for name, spec in specs.items():
        svc = compose["services"][name]
        assert svc["image"] == spec.image
        assert svc["deploy"] == {"replicas": spec.replicas}
        assert set(svc.get("environment", {})) == {k for k, _ in spec.environment}
        x = svc["x-healerd"]
        assert x["update_config"]["parallelism"] == spec.update_config.parallelism
        assert x["priority"] == spec.priority
        for key in ("update_config", "restart_policy", "unhealthy_grace", "priority"):
            assert key not in {k for k in svc if not k.startswith("x-")}
    if which == "multi":
        web = compose["services"]["web"]
        assert web["env_file"] == [str(multi.parent / "web.env")]
        assert web["ports"] == ["8080/tcp"] and web["mem_limit"] == "64M"
        assert compose["volumes"] == {"web-data": {"name": "web-data"}}
        assert SECRET_VALUE not in out + err


# -- strict, selection, errors ----------------------------------------------------------------


@pytest.mark.parametrize("target", ["swarm", "kubernetes", "compose"])
def test_strict_refuses_lost_fields_and_writes_nothing(target: str, multi: Path) -> None:
    code, out, err = run("--to", target, "--strict", str(multi))
    assert code == 1
    assert out == ""
    assert "worker: priority:" in err and "error:" in err
    # The example only uses what every target can express.
    code, out, err = run("--to", target, "--strict", str(EXAMPLE))
    assert code == 0, err
    assert out


def test_service_selection_and_unknown_service(multi: Path) -> None:
    code, out, err = run("--to", "kubernetes", "--service", "worker", str(multi))
    assert code == 0, err
    assert set(by_kind(docs(out), "Deployment")) == {"worker"}
    code, out, err = run("--to", "swarm", "--service", "worker", "--service", "nope", str(multi))
    assert code == 5
    assert "no such service: nope" in err and out == ""


def test_invalid_file_is_an_error_naming_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  web:\n    image: x:1\n    replicas: -2\n")
    code, out, err = run("--to", "swarm", str(bad))
    assert code == 1 and out == ""
    assert f"{bad}:4:" in err and "replicas" in err


def test_usage_errors_exit_2(multi: Path) -> None:
    assert run("--to", "nomad", str(multi))[0] == 2
    assert run(str(multi))[0] == 2


def test_output_file(multi: Path, tmp_path: Path) -> None:
    target = tmp_path / "stack.yml"
    code, out, _ = run("--to", "swarm", "-o", str(target), str(multi))
    assert code == 0 and out == ""
    assert set(yaml.safe_load(target.read_text())["services"]) == {"web", "worker"}


# -- Compose's container settings (issue 16) ---------------------------------------------------


def test_container_settings_are_exported_or_reported_lost(tmp_path: Path) -> None:
    from tests.unit.harness.documents import EVERYTHING

    path = tmp_path / "gw.yaml"
    path.write_text(EVERYTHING.replace("    network_mode: host\n", ""))
    (spec,) = specs_of(path).values()
    # Compose: every one, in a form healerd reads back to the same container.
    code, out, err = run("--to", "compose", str(path))
    assert code == 0, err
    back = tmp_path / "back.yaml"
    exported = yaml.safe_load(out)
    svc = exported["services"]["gw"]
    svc.pop("x-healerd"), svc.pop("deploy")
    assert exported["name"] == "gw", "the same project, so the same default network"
    back.write_text(yaml.safe_dump({"name": exported["name"], "services": {"gw": svc}}))
    (again,) = specs_of(back).values()
    assert again.spec_hash == spec.spec_hash
    # Swarm: what a stack cannot do is a loss, the rest is in the stack file.
    code, out, err = run("--to", "swarm", str(path))
    assert code == 0, err
    stack = yaml.safe_load(out)["services"]["gw"]
    assert stack["cap_add"] == ["NET_ADMIN", "SYS_TIME"] and stack["sysctls"]
    assert "privileged" not in stack and "gw: privileged: True: Swarm services cannot" in err
    # Kubernetes: securityContext and tty/stdin; the rest are losses, none dropped silently.
    code, out, err = run("--to", "kubernetes", str(path))
    assert code == 0, err
    (deployment,) = [d for d in docs(out) if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["securityContext"] == {
        "privileged": True,
        "readOnlyRootFilesystem": True,
        "capabilities": {"add": ["NET_ADMIN", "SYS_TIME"], "drop": ["ALL"]},
    }
    assert container["tty"] and container["stdin"]
    assert "gw: sysctls:" in err and "gw: devices:" in err
