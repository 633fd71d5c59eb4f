"""`healerctl export --to swarm` for real: the private engine becomes a one-node swarm, the
exported stack is deployed with `docker stack deploy`, and Swarm keeps it running. Values
from the file's `.env` stay out of the stack file (`${VAR}` is written back) and reach
the containers through `docker stack deploy`'s own interpolation.

On this kernel a service's virtual IP does not route (the private engine runs without
iptables), so the test switches every exported service to `deploy.endpoint_mode: dnsrr`
before deploying: names then resolve to the tasks' own addresses. The exporter keeps
Swarm's default (vip), which is what a real cluster wants.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import docker
import yaml

from healerd.cli import healerctl
from tests.integration.harness import unique
from tests.support.busybox_image import COMMAND, build
from tests.support.dockerd import PrivateDockerd
from tests.support.netprobe import fetch_by_name
from tests.support.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "conf.d" / "example.yaml"
EXAMPLE_IMAGE = "healerd-example/busybox:1"

TWO = """\
services:
  web:
    image: {image}
    command: ["httpd", "-f", "-p", "8080", "-h", "${{WEB_ROOT}}"]
    environment: {{API_TOKEN: "tok-${{API_TOKEN}}"}}
    replicas: 2
    stop_grace_period: 1s
    restart_policy: {{delay: 1s}}
  client:
    image: {image}
    command: {command}
    stop_grace_period: 1s
"""
TOKEN = "s3cr3t-from-dot-env"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def docker_cli(dockerd: PrivateDockerd, *args: str, variables: dict[str, str] | None = None) -> str:
    env = {**os.environ, **(variables or {}), "DOCKER_HOST": dockerd.url}
    done = subprocess.run(
        ["docker", *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"docker {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def export_stack(paths: list[Path]) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    code = healerctl.main(["export", "--to", "swarm", *map(str, paths)], out, err)
    assert code == 0, err.getvalue()
    assert TOKEN not in out.getvalue() + err.getvalue()
    stack: dict[str, Any] = yaml.safe_load(out.getvalue())
    for svc in stack["services"].values():
        svc["deploy"]["endpoint_mode"] = "dnsrr"  # see the module docstring
    return stack


def running_tasks(api: docker.APIClient, service: str) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = api.tasks(filters={"service": service})
    return [
        t for t in tasks if t["DesiredState"] == "running" and t["Status"]["State"] == "running"
    ]


def task_containers(api: docker.APIClient, service: str) -> list[str]:
    return [t["Status"]["ContainerStatus"]["ContainerID"] for t in running_tasks(api, service)]


def cleanup(api: docker.APIClient, dockerd: PrivateDockerd, stack: str) -> None:
    with contextlib.suppress(AssertionError):
        docker_cli(dockerd, "stack", "rm", stack)
    label = f"com.docker.stack.namespace={stack}"
    with contextlib.suppress(AssertionError):
        wait_for("the stack's containers to go", lambda: not api.containers(
            all=True, filters={"label": label}), timeout=30, interval=0.5)  # fmt: skip
    with contextlib.suppress(docker.errors.APIError):
        api.leave_swarm(force=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if not api.networks(names=["docker_gwbridge"]):
                break
            api.remove_network("docker_gwbridge")
        except docker.errors.APIError:
            time.sleep(0.5)


def test_exported_stack_runs_on_swarm(
    dockerd: PrivateDockerd, api: docker.APIClient, image: str, tmp_path: Path
) -> None:
    build(api, EXAMPLE_IMAGE)
    two = tmp_path / "two.yaml"
    two.write_text(TWO.format(image=image, command=COMMAND))
    variables = {"WEB_ROOT": "/www", "API_TOKEN": TOKEN}
    env_file = tmp_path / "two.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in variables.items()))
    env_file.chmod(0o600)
    stack_file = tmp_path / "stack.yml"
    stack_file.write_text(yaml.safe_dump(export_stack([EXAMPLE, two]), sort_keys=False))
    stack = unique("hx")
    api.init_swarm(advertise_addr="127.0.0.1", listen_addr=f"127.0.0.1:{free_port()}")
    try:
        # As the exporter's note says: the variables of two.env in the environment.
        docker_cli(dockerd, "stack", "deploy", "-c", str(stack_file),
                   "--resolve-image", "never", stack, variables=variables)  # fmt: skip
        replicas = {"hello": 2, "web": 2, "client": 1}
        for name, want in replicas.items():
            wait_for(f"{name}: {want} running task(s)",
                     lambda n=name, w=want: len(running_tasks(api, f"{stack}_{n}")) == w,
                     timeout=30, interval=0.5)  # fmt: skip
        client = task_containers(api, f"{stack}_client")[0]
        page = wait_for(
            "client to reach web by name",
            lambda: fetch_by_name(api, client, "web", 8080),
            timeout=20,
            interval=0.5,
        )
        assert "hello from healerd" in page
        victim = task_containers(api, f"{stack}_web")[0]
        assert f"API_TOKEN=tok-{TOKEN}" in api.inspect_container(victim)["Config"]["Env"]
        api.kill(victim)
        wait_for("Swarm to replace the killed task", lambda: (
            len(ids := task_containers(api, f"{stack}_web")) == 2 and victim not in ids
        ), timeout=30, interval=0.5)  # fmt: skip
    finally:
        cleanup(api, dockerd, stack)
    assert api.info()["Swarm"]["LocalNodeState"] == "inactive"
