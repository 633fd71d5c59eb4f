"""`healerctl export --to kubernetes` (issue 34, point 5): a Service for every service
reached by name (depends_on, links, network_mode service:) or listening (ports,
expose), headless without a port; a Job for a run-once service. Every manifest is
validated offline with kubernetes-validate, as tests/unit/test_export.py does."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from healerd.cli import healerctl

STACK = """\
services:
  web:
    image: registry.local/web:1
    depends_on: [api, cache]
    links: ["db:database"]
  api:
    image: registry.local/api:1
    expose: ["9000", "9001/udp", "7000-7002"]
    healthcheck: {test: ["CMD", "true"]}
  cache:
    image: redis:7
  db:
    image: postgres:16
  sidecar:
    image: busybox
    network_mode: service:api
  migrate:
    image: registry.local/api:1
    restart: "no"
  seed:
    image: registry.local/api:1
    restart: on-failure:3
    replicas: 2
    depends_on:
      migrate: {condition: service_completed_successfully}
    healthcheck: {test: ["CMD", "true"]}
  poll:
    image: busybox
    restart: on-failure
  lonely:
    image: busybox
"""


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = healerctl.main(["export", *args], out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def stack(tmp_path: Path) -> Path:
    path = tmp_path / "stack.yaml"
    path.write_text(STACK)
    return path


def manifests(*args: str) -> tuple[list[dict[str, Any]], str]:
    code, out, err = run("--to", "kubernetes", *args)
    assert code == 0, err
    return [d for d in yaml.safe_load_all(out) if d is not None], err


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def test_a_service_reached_by_name_or_listening_has_a_service(stack: Path) -> None:
    docs, _ = manifests(str(stack))
    services = by_kind(docs, "Service")
    # api: depends_on and network_mode service:; cache: depends_on; db: a link.
    # migrate is only waited for (service_completed_successfully); lonely, poll: nobody's.
    assert set(services) == {"api", "cache", "db"}
    for name in ("cache", "db"):
        assert services[name]["spec"]["clusterIP"] == "None", "headless: no port"
        assert "ports" not in services[name]["spec"]
        assert services[name]["spec"]["selector"] == {"app.kubernetes.io/name": name}
    api = services["api"]["spec"]
    assert "clusterIP" not in api
    assert [(p["port"], p["protocol"]) for p in api["ports"]] == [
        (9000, "TCP"), (9001, "UDP"), (7000, "TCP"), (7001, "TCP"), (7002, "TCP"),
    ]  # fmt: skip
    container = by_kind(docs, "Deployment")["api"]["spec"]["template"]["spec"]["containers"][0]
    assert [p["containerPort"] for p in container["ports"]] == [9000, 9001, 7000, 7001, 7002]


def test_a_service_selected_alone_keeps_the_service_its_dependents_need(stack: Path) -> None:
    docs, _ = manifests("--service", "cache", str(stack))
    assert set(by_kind(docs, "Service")) == {"cache"}


def test_a_run_once_service_is_a_job(stack: Path) -> None:
    docs, err = manifests(str(stack))
    jobs = by_kind(docs, "Job")
    assert set(jobs) == {"migrate", "seed", "poll"}
    assert not set(jobs) & set(by_kind(docs, "Deployment"))
    migrate, seed, poll = (jobs[n]["spec"] for n in ("migrate", "seed", "poll"))
    assert migrate["template"]["spec"]["restartPolicy"] == "Never"
    assert (migrate["backoffLimit"], migrate["completions"], migrate["parallelism"]) == (0, 1, 1)
    assert seed["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert (seed["backoffLimit"], seed["completions"], seed["parallelism"]) == (6, 2, 2)
    assert "seed: restart on-failure:3: a Job counts the retries of all its pods" in err
    assert poll["backoffLimit"] == 2**31 - 1, "on-failure without N: no limit"
    # Health restarts no run-once container: readiness only.
    (container,) = seed["template"]["spec"]["containers"]
    assert "livenessProbe" not in container and container["readinessProbe"]
    assert "write a Job" not in err and "restart:" not in err


def test_a_job_reports_its_rollout_settings_lost(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "services:\n  once:\n    image: busybox\n    restart: 'no'\n"
        "    update_config: {parallelism: 2}\n"
    )
    code, out, err = run("--to", "kubernetes", "--strict", str(path))
    assert code == 1 and out == ""
    assert "once: update_config.parallelism: 2: a Job is not rolled out" in err


def test_the_manifests_validate_offline(stack: Path) -> None:
    kv: Any = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed (pip install '.[dev]')"
    )
    versions: list[str] = kv.utils.all_versions()
    docs, _ = manifests(str(stack))
    assert {d["kind"] for d in docs} == {"Deployment", "Job", "Service"}
    for version in sorted({versions[0], versions[-1]}):
        for manifest in docs:
            kv.validate(manifest, version, strict=True)
