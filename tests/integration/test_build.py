"""`build:` (issue 34) against a real engine: the image healerd builds and the container
it runs from it are docker-compose's (`docker-compose build` + `up`, the oracle of
tests/integration/test_compose_diff.py); a changed context file is rebuilt and rolled out
by `healerctl build`, an ignored one is not; a broken Dockerfile leaves the container
before running, with the builder's error as the service's reason.

The oracle builds through the engine's API as healerd does (COMPOSE_DOCKER_CLI_BUILD=0:
docker-compose 1.29.2 would call the docker CLI otherwise, whose BuildKit this engine
lacks). Its tag is `<project>_<service>` (v1) where healerd's is `<project>-<service>`
(docker compose v2's): the containers are compared without Config.Image, and the images'
labels without each tool's own (io.healerd.*, com.docker.compose.*).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import docker

from tests.integration.harness import IMAGE, normalised
from tests.support import compose_oracle
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

DOCKERFILE = f"""\
ARG VERSION=0
FROM {IMAGE} AS base
RUN echo base > /base.txt

FROM base AS final
ARG VERSION
ENV VERSION=${{VERSION}} GREETING=hello
LABEL org.example.kind=test
COPY app.txt /srv/app.txt
WORKDIR /srv
EXPOSE 8080/tcp
USER 1000:1000
CMD {json.dumps(COMMAND)}

FROM base AS other
CMD ["false"]
"""
IMAGE_KEYS = ("Cmd", "Entrypoint", "Env", "Labels", "WorkingDir", "User", "ExposedPorts")


def context(tmp_path: Path) -> Path:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(DOCKERFILE)
    (ctx / "app.txt").write_text("one\n")
    (ctx / ".dockerignore").write_text("*.log\n")
    return ctx


def stack(ctx: Path) -> str:
    return f"""\
services:
  app:
    build:
      context: {ctx}
      target: final
      args: {{VERSION: "1.2"}}
      labels: {{org.example.built-by: test}}
    stop_grace_period: 2s
"""


def image_config(api: docker.APIClient, ref: str) -> dict[str, Any]:
    found = api.inspect_image(ref)["Config"]
    out = {k: found.get(k) or None for k in IMAGE_KEYS}
    labels = {
        k: v
        for k, v in (out["Labels"] or {}).items()
        if not k.startswith(("io.healerd.", "com.docker.compose."))
    }
    out["Labels"] = labels
    return out


def compose_run(dockerd: PrivateDockerd, project_dir: Path, project: str, *args: str) -> None:
    env = dict(os.environ, DOCKER_HOST=dockerd.url, COMPOSE_DOCKER_CLI_BUILD="0")
    p = subprocess.run(
        [*compose_oracle.command(), "-p", project, *args],
        cwd=project_dir, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, f"docker-compose {' '.join(args)}: {p.stderr[-2000:]}"


def oracle_tag(project: str) -> str:
    return f"{project}_app" if compose_oracle.major() == 1 else f"{project}-app"


def remove_images(api: docker.APIClient, *refs: str) -> None:
    for ref in refs:
        with contextlib.suppress(docker.errors.NotFound):
            api.remove_image(ref, force=True)


def test_healerd_builds_the_image_and_container_docker_compose_builds(
    dockerd: PrivateDockerd,
    healerd: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    api: docker.APIClient,
    tmp_path: Path,
) -> None:
    ctx = context(tmp_path)
    project_dir = tmp_path / "compose"
    project_dir.mkdir()
    (project_dir / "docker-compose.yml").write_text(stack(ctx))
    compose_run(dockerd, project_dir, "bld", "build")
    try:
        compose_run(dockerd, project_dir, "bld", "up", "-d", "--no-build")
        (c,) = api.containers(filters={"label": "com.docker.compose.project=bld"})
        theirs = api.inspect_container(c["Id"])
        config.write("bld.yaml", stack(ctx))
        healerd.start()
        wait_for("app running under healerd", lambda: cluster.converged("app", 1), timeout=120)
        (mine,) = cluster.running("app")
        ours = api.inspect_container(mine["Id"])
        assert ours["Config"]["Image"] == "bld-app"  # docker compose v2's tag
        assert image_config(api, "bld-app") == image_config(api, oracle_tag("bld"))
        labels = api.inspect_image("bld-app")["Config"]["Labels"]
        assert len(labels["io.healerd.build.context-hash"]) == 64
        a, b = normalised(theirs, "app", compose=True), normalised(ours, "app")
        assert a["Config.Cmd"] == COMMAND and a["Config.User"] == "1000:1000"
        # Not compared: the tag (above), and the hostname (each container's short id).
        for key in ("Config.Image", "Config.Hostname"):
            del a[key], b[key]
        differences = [f"{k}: compose {a[k]!r}, healerd {b[k]!r}" for k in a if a[k] != b[k]]
        assert not differences, "\n".join(differences)
    finally:
        healerd.stop()
        cluster.remove_labelled()  # off the project network before Compose removes it
        compose_run(dockerd, project_dir, "bld", "down", "--timeout", "1")
        remove_images(api, "bld-app", oracle_tag("bld"))


def _app(healerd: Healerd) -> dict[str, Any]:
    return next(s for s in healerd.api("/v1/status")["services"] if s["name"] == "app")


def _cat(api: docker.APIClient, container: str) -> str:
    run = api.exec_create(container, ["cat", "/srv/app.txt"])
    return str(api.exec_start(run).decode())


def _backing_off(st: dict[str, Any]) -> bool:
    reason = str(st["reason"])
    return bool(
        st["state"] == "ImagePullBackOff"
        and "cannot build bld2-app" in reason
        and "non-zero code: 3" in reason
    )


def test_a_changed_context_rolls_out_and_a_broken_dockerfile_keeps_the_old_container(
    healerd: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    api: docker.APIClient,
    tmp_path: Path,
) -> None:
    ctx = context(tmp_path)
    config.write("bld2.yaml", stack(ctx))
    healerd.start()
    try:
        wait_for("app running", lambda: cluster.converged("app", 1), timeout=120)
        (first,) = cluster.running("app")
        (ctx / "debug.log").write_text("ignored by .dockerignore\n")
        code, out, err = healerd.ctl("build", "app")
        assert code == 0 and "bld2-app is up to date with its context" in out, out + err
        assert [c["Id"] for c in cluster.running("app")] == [first["Id"]]

        (ctx / "app.txt").write_text("two\n")
        code, out, err = healerd.ctl("build", timeout=120)
        assert code == 0 and "built bld2-app" in out, out + err
        wait_for(
            "the new image rolled out",
            lambda: (
                [c["Id"] for c in cluster.running("app")] not in ([], [first["Id"]])
                and len(cluster.containers("app")) == 1
            ),
            timeout=60,
        )
        (second,) = cluster.running("app")
        assert _cat(api, second["Id"]) == "two\n"

        (ctx / "Dockerfile").write_text(f"FROM {IMAGE} AS final\nRUN exit 3\n")
        code, out, err = healerd.ctl("build", "app", timeout=120)
        assert code == 1 and "FAILED" in out and "non-zero code: 3" in out, out + err
        # One status, both fields: a retry of the build shows Progressing while it runs.
        wait_for(
            "the build failure as the state and reason",
            lambda: _backing_off(_app(healerd)),
            timeout=60,
        )
        assert [c["Id"] for c in cluster.running("app")] == [second["Id"]]
        assert _cat(api, second["Id"]) == "two\n"
    finally:
        healerd.stop()
        cluster.remove_labelled()
        remove_images(api, "bld2-app")
