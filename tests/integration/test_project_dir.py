"""A project directory linked into conf.d (issue 34 points 1 and 2): a Compose file, its
override, an `extends: file:` and a `.env`, run once with Debian's docker-compose from
the directory (`docker-compose up -d`, no -f: it finds the files as a user's shell
would) and once under healerd through a link in conf.d; the inspected containers must be
equal, as in tests/integration/test_compose_diff.py. Then the project is edited as an
operator would: a change in the override applies, a broken override changes nothing
and names itself, and removing the link removes the project's services."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.integration.harness import normalised
from tests.support import compose_oracle
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for

PROJECT = "edgeproj"
BASE = """\
services:
  broker:
    image: ${{IMAGE}}
    command: {command}
    stop_grace_period: 2s
    environment: [ROLE=broker, "SITE=${{SITE}}"]
    labels: {{tier: base}}
    volumes: [data:/data]
  app:
    extends: {{file: common/app.yml, service: worker}}
    environment: {{ROLE: app}}
    depends_on: [broker]
volumes:
  data: {{}}
"""
COMMON = """\
services:
  worker:
    image: ${{IMAGE}}
    command: {command}
    stop_grace_period: 2s
    working_dir: /srv
    hostname: worker
    environment: {{LOG: info, ROLE: worker}}
    dns_search: [common.lan]
"""
OVERRIDE = """\
services:
  broker:
    environment: [SITE=override, EXTRA=1]
    labels: {{tier: override}}
    hostname: broker-{n}
  app:
    dns_search: [override.lan]
"""


@pytest.fixture
def project(dockerd: PrivateDockerd, tmp_path: Path, image: str) -> Iterator[Path]:
    directory = tmp_path / "stacks" / PROJECT
    command = list(COMMAND)
    (directory / "common").mkdir(parents=True)
    (directory / "compose.yaml").write_text(BASE.format(command=command))
    (directory / "common" / "app.yml").write_text(COMMON.format(command=command))
    (directory / "compose.override.yaml").write_text(OVERRIDE.format(n=1))
    (directory / ".env").write_text(f"IMAGE={image}\nSITE=seven\n")
    yield directory
    _compose(dockerd, directory, "down", "--volumes", "--timeout", "1", check=False)


def _compose(dockerd: PrivateDockerd, directory: Path, *args: str, check: bool = True) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    p = subprocess.run(
        [*compose_oracle.command(), *args],
        cwd=directory,
        env=env | {"DOCKER_HOST": dockerd.url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0 or not check, f"docker-compose {args}: {p.stderr[-2000:]}"


def _by_compose(api: docker.APIClient) -> dict[str, Any]:
    found = {}
    for c in api.containers(filters={"label": f"com.docker.compose.project={PROJECT}"}):
        info = api.inspect_container(c["Id"])
        found[info["Config"]["Labels"]["com.docker.compose.service"]] = info
    assert set(found) == {"broker", "app"}, sorted(found)
    return found


def test_a_linked_project_runs_as_docker_compose_runs_it_and_reloads_whole(
    project: Path,
    dockerd: PrivateDockerd,
    healerd: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    api: docker.APIClient,
) -> None:
    _compose(dockerd, project, "up", "-d", "--no-build")
    theirs = _by_compose(api)
    _compose(dockerd, project, "rm", "--stop", "--force")
    os.symlink(project, config.conf_d / "edge")
    healerd.start()
    wait_for(
        "both services under healerd",
        lambda: cluster.converged("broker", 1) and cluster.converged("app", 1),
        timeout=60,
    )
    differences = []
    for svc in ("broker", "app"):
        (mine,) = cluster.running(svc)
        ours = api.inspect_container(mine["Id"])
        a, b = normalised(theirs[svc], svc, compose=True), normalised(ours, svc)
        differences += [f"{svc} {k}: compose {a[k]!r}, healerd {b[k]!r}" for k in a if a[k] != b[k]]
        if svc == "broker":  # labels are left out of `normalised`: this one is merged
            assert ours["Config"]["Labels"]["tier"] == theirs[svc]["Config"]["Labels"]["tier"]
    assert not differences, "\n".join(differences)
    (broker,) = cluster.running("broker")
    env = api.inspect_container(broker["Id"])["Config"]["Env"]
    assert "SITE=override" in env and "EXTRA=1" in env
    assert any(
        m["Name"] == f"{PROJECT}_data" for m in api.inspect_container(broker["Id"])["Mounts"]
    )

    # An edit of the override applies (the link's target directory is watched).
    (project / "compose.override.yaml").write_text(OVERRIDE.format(n=2))
    wait_for(
        "the edited override applied",
        lambda: any(
            api.inspect_container(c["Id"])["Config"]["Hostname"] == "broker-2"
            for c in cluster.running("broker")
        ),
        timeout=30,
    )
    wait_for("broker converged", lambda: cluster.converged("broker", 1), timeout=30)
    ids = sorted(c["Id"] for c in cluster.running("broker") + cluster.running("app"))

    # A broken override: the whole project keeps its last good state, the error names it.
    (project / "compose.override.yaml").write_text("services:\n  app:\n    restart: sometimes\n")
    override = str(project / "compose.override.yaml")
    wait_for("the error named", lambda: f"{override}:3" in healerd.log(), timeout=15)
    holds_for(
        "containers unchanged",
        lambda: sorted(c["Id"] for c in cluster.running("broker") + cluster.running("app")) == ids,
        2.0,
    )

    # The link removed: the project's services go.
    (config.conf_d / "edge").unlink()
    wait_for(
        "the project removed",
        lambda: not cluster.containers("broker") and not cluster.containers("app"),
        timeout=30,
    )
