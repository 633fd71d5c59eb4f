"""Differential test on real public Compose files (issue 16): each runs once under Debian's
`docker-compose` (Debian 12's 1.29.2, or Debian 13's v2: tests/support/compose_oracle.py)
and once under healerd, from the same file in the same project directory, on the same
private engine; per service the inspected containers must match
(tests/integration/test_compose_diff.py's `normalised`: HostConfig, Config, networks and
aliases).

No registry is reachable here, so each file is changed as little as running it needs,
the same for both tools: every `image` becomes the local test image and every `command`
one that stays up; what the test image cannot run is dropped (an `entrypoint` of the real
image, a `healthcheck` calling its tools, a `user` by name it does not know, host
`devices` this machine lacks, `privileged`, which this CI container cannot run). All the
rest (ports, volumes, networks, hostnames, environment, container_name, depends_on,
restart, ...) is the public file as published (sources in tests/corpus/compose/SOURCES.md).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from tests.integration.harness import IMAGE, normalised
from tests.support import compose_oracle
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "compose"
PUBLIC = (
    "awesome-compose--wordpress-mysql.yaml",
    "awesome-compose--prometheus-grafana.yaml",
    "chirpstack--docker-compose.yaml",
    "octoprint--docker-compose.yaml",
    "pihole--caddy-proxy.yaml",
    "zwave-js-ui--docker.yaml",
)
_DROPPED = ("entrypoint", "healthcheck", "devices", "privileged")


def runnable(text: str) -> dict[str, Any]:
    """The public file, with what the local test image cannot run taken out (see above)."""
    doc: dict[str, Any] = yaml.safe_load(text)
    for svc in doc["services"].values():
        svc["image"] = IMAGE
        svc["command"] = list(COMMAND)
        svc["stop_grace_period"] = "1s"
        for key in _DROPPED:
            svc.pop(key, None)
        if "user" in svc and not re.fullmatch(r"[0-9]+(:[0-9]+)?", str(svc["user"])):
            svc.pop("user")
    return doc


def _compose(dockerd: PrivateDockerd, file: Path, project: str, *args: str) -> None:
    env = dict(os.environ, DOCKER_HOST=dockerd.url)
    cmd = [*compose_oracle.command(), "-f", str(file), "--project-directory", str(file.parent)]
    p = subprocess.run(
        [*cmd, "-p", project, *args], env=env, capture_output=True, text=True, timeout=180
    )
    assert p.returncode == 0, f"docker-compose {' '.join(args)}: {p.stderr[-2000:]}"


def _volumes(api: docker.APIClient) -> set[str]:
    return {str(v["Name"]) for v in api.volumes().get("Volumes") or ()}


def _leave_no_volume(
    api: docker.APIClient, healerd: Healerd, cluster: Cluster, before: set[str]
) -> None:
    """The engine as it was: the file's volumes (made by either tool) go too, once the
    containers that use them are gone (healerd stopped first, or it would heal them)."""
    if healerd.alive():
        healerd.stop()
    cluster.remove_labelled()
    for name in _volumes(api) - before:
        with contextlib.suppress(docker.errors.APIError):
            api.remove_volume(name)


def _normalised(info: dict[str, Any], *, compose: bool = False) -> dict[str, Any]:
    out = normalised(info, "", compose=compose)
    if out["Config.Hostname"] == info["Id"][:12]:
        out["Config.Hostname"] = None  # none declared: the engine's own, the short id
    return out


def _make_external(api: docker.APIClient, doc: dict[str, Any]) -> None:
    """What the file declares `external` must exist before either tool runs it."""
    for key, body in (doc.get("volumes") or {}).items():
        if (body or {}).get("external"):
            api.create_volume((body or {}).get("name", key))
    for key, body in (doc.get("networks") or {}).items():
        if (body or {}).get("external"):
            api.create_network((body or {}).get("name", key))


@pytest.mark.parametrize("public", PUBLIC)
def test_a_public_compose_file_runs_as_docker_compose_runs_it(
    public: str,
    request: pytest.FixtureRequest,
    dockerd: PrivateDockerd,
    healerd: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    api: docker.APIClient,
) -> None:
    project = re.sub(r"[^a-z0-9]", "", public.split("--")[1].removesuffix(".yaml"))[:20]
    text = yaml.safe_dump(runnable((CORPUS / public).read_text(encoding="utf-8")))
    path = config.write(f"{project}.yaml", text)
    doc = yaml.safe_load(text)
    services = set(doc["services"])
    before = _volumes(api)
    request.addfinalizer(lambda: _leave_no_volume(api, healerd, cluster, before))
    _make_external(api, doc)
    try:
        # Inside the try: an `up` that fails half-way (a port taken) leaves containers
        # and volumes that the next tests would find.
        _compose(dockerd, path, project, "up", "-d", "--no-build")
        by_compose = {
            svc: api.inspect_container(c["Id"])
            for svc in services
            for c in api.containers(filters={"label": f"com.docker.compose.service={svc}"})
        }
        assert set(by_compose) == services
    finally:
        # Its container names, fixed ports and networks are healerd's next; volumes stay.
        _compose(dockerd, path, project, "down", "--timeout", "1")
    healerd.start()
    wait_for(
        f"{public}: every service running under healerd",
        lambda: all(cluster.converged(svc, 1) for svc in services),
        timeout=60,
    )
    differences = []
    for svc, theirs in sorted(by_compose.items()):
        (mine,) = cluster.running(svc)
        ours = api.inspect_container(mine["Id"])
        a, b = _normalised(theirs, compose=True), _normalised(ours)
        differences += [f"{svc} {k}: compose {a[k]!r}, healerd {b[k]!r}" for k in a if a[k] != b[k]]
        if theirs["Name"] != compose_oracle.default_name(project, svc):  # container_name
            assert ours["Name"] == theirs["Name"], svc
    assert not differences, "\n".join(differences)
