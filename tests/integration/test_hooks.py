"""Compose's lifecycle hooks against a real dockerd (issue 33, point 5): post_start runs
in every container healerd starts, after the start (a heal does not wait for it);
pre_stop runs before healerd removes a running container (fewer replicas, a changed
spec), within stop_grace_period, and a hook that fails or hangs never holds a stop
beyond that bound. Each hook writes into a bind-mounted directory of the test's, named
after the container's host name (its id's first 12 characters)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import docker

from tests.integration.harness import HEAL_DEADLINE, current_hash, started_again
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

# How long a post_start sleeps before it writes: longer than a heal may take.
SLOW_HOOK = 5


def _shared(tmp_path: Path) -> Path:
    shared = tmp_path / "hooks"
    shared.mkdir(mode=0o700)
    return shared


def _service(
    config: ConfigDir, name: str, replicas: int, shared: Path, *extra: str, grace: str = "2s"
) -> Path:
    """One service of the test image with `shared` at /hooks and the `extra` lines."""
    lines = [
        "services:",
        f"  {name}:",
        f"    image: {config.image}",
        f"    command: {json.dumps(config.command)}",
        f"    stop_grace_period: {grace}",
        f"    replicas: {replicas}",
        f"    volumes: ['{shared}:/hooks']",
        *extra,
    ]
    return config.write(f"{name}.yaml", "\n".join(lines) + "\n")


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _events(healerd: Healerd, service: str, kind: str) -> list[dict[str, Any]]:
    found = healerd.api("/v1/events", service=service)["events"]
    return [e for e in found if e["kind"] == kind]


def test_post_start_runs_after_each_start_and_a_heal_does_not_wait_for_it(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient, tmp_path: Path
) -> None:
    shared = _shared(tmp_path)
    path = _service(
        config,
        "poststart",
        1,
        shared,
        "    post_start:",
        "      - command: [sh, -c, 'sleep $$WAIT; echo $$MARK >> /hooks/post-$$(hostname)']",
        f"        environment: {{WAIT: '{SLOW_HOOK}', MARK: started}}",
    )
    spec_hash = current_hash(path, "poststart")
    healerd.start()
    wait_for("1 replica", lambda: cluster.converged("poststart", 1, spec_hash), timeout=30)
    (c,) = cluster.running("poststart")
    marks = shared / f"post-{api.inspect_container(c['Id'])['Config']['Hostname']}"
    wait_for("post_start's mark", lambda: _text(marks) == "started\n", timeout=SLOW_HOOK + 10)

    # Two kills in a row, the second while the first heal's post_start still sleeps:
    # each heal is the engine's start alone.
    for _ in range(2):
        before = api.inspect_container(c["Id"])["State"]["StartedAt"]
        t0 = time.monotonic()
        api.kill(c["Id"])
        wait_for(
            "the same container running again",
            lambda before=before: started_again(api, c["Id"], before),
            timeout=HEAL_DEADLINE,
            interval=0.01,
        )
        assert time.monotonic() - t0 < HEAL_DEADLINE
    # The second start's hook ran to its end (the first one's died with its container).
    wait_for(
        "post_start after the heal", lambda: _text(marks) == "started\n" * 2, timeout=SLOW_HOOK + 10
    )
    assert [x["Id"] for x in cluster.running("poststart")] == [c["Id"]]


def test_a_failing_post_start_is_told_masked_and_the_container_keeps_running(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, tmp_path: Path
) -> None:
    shared = _shared(tmp_path)
    path = _service(
        config,
        "failing",
        1,
        shared,
        "    environment: {DB_PASSWORD: s3cret-value}",
        "    post_start:",
        "      - command: [sh, -c, 'echo cannot reach db with $$DB_PASSWORD $$TOKEN >&2; exit 3']",
        "        environment: [TOKEN=hook-token-value]",
        "      - command: [touch, /hooks/never]",
    )
    spec_hash = current_hash(path, "failing")
    healerd.start()
    wait_for("1 replica", lambda: cluster.converged("failing", 1, spec_hash), timeout=30)
    wait_for("hook-failed", lambda: _events(healerd, "failing", "hook-failed"), timeout=10)
    (event,) = _events(healerd, "failing", "hook-failed")
    assert "post_start[0] exited with code 3" in event["message"]
    assert "[DB_PASSWORD] [TOKEN]" in event["message"]
    assert "s3cret" not in healerd.log() and "hook-token" not in healerd.log()
    assert not (shared / "never").exists()  # the hooks after a failed one do not run
    (c,) = cluster.running("failing")
    assert c["State"] == "running"


def test_pre_stop_runs_before_a_scale_down_and_before_a_changed_spec_replaces(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient, tmp_path: Path
) -> None:
    shared = _shared(tmp_path)
    hook = [
        "    pre_stop:",
        "      - command: [sh, -c, 'echo $$MODE > /hooks/pre-$$(hostname)']",
        "        environment: {MODE: drained}",
    ]
    path = _service(config, "prestop", 2, shared, *hook)
    healerd.start()
    wait_for("2 replicas", lambda: cluster.converged("prestop", 2, current_hash(path, "prestop")))
    hosts = {
        c["Id"]: api.inspect_container(c["Id"])["Config"]["Hostname"]
        for c in cluster.running("prestop")
    }
    assert not list(shared.iterdir())

    path = _service(config, "prestop", 1, shared, *hook)
    wait_for("1 replica", lambda: len(cluster.running("prestop")) == 1, timeout=15)
    (kept,) = [c["Id"] for c in cluster.running("prestop")]
    (gone,) = set(hosts) - {kept}
    assert _text(shared / f"pre-{hosts[gone]}") == "drained\n"
    assert not (shared / f"pre-{hosts[kept]}").exists()

    path = _service(config, "prestop", 1, shared, "    environment: {V: '2'}", *hook)
    new_hash = current_hash(path, "prestop")
    wait_for("rolled", lambda: cluster.converged("prestop", 1, new_hash), timeout=30)
    wait_for(
        "the old one gone", lambda: kept not in {c["Id"] for c in cluster.containers("prestop")}
    )
    assert _text(shared / f"pre-{hosts[kept]}") == "drained\n"
    assert _events(healerd, "prestop", "hook-failed") == []


def test_a_pre_stop_that_hangs_holds_the_stop_no_longer_than_its_bound(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient, tmp_path: Path
) -> None:
    shared = _shared(tmp_path)
    hook = [
        "    pre_stop:",
        "      - command: [sh, -c, 'touch /hooks/began-$$(hostname); sleep 600']",
        "      - command: [touch, /hooks/second]",
    ]
    path = _service(config, "hangs", 1, shared, *hook)
    healerd.start()
    wait_for("1 replica", lambda: cluster.converged("hangs", 1, current_hash(path, "hangs")))
    (c,) = cluster.running("hangs")
    host = api.inspect_container(c["Id"])["Config"]["Hostname"]

    _service(config, "hangs", 0, shared, *hook)
    wait_for(
        "the hook began", lambda: (shared / f"began-{host}").exists(), timeout=10, interval=0.02
    )
    t0 = time.monotonic()
    wait_for("removed", lambda: not cluster.containers("hangs"), timeout=15, interval=0.02)
    held = time.monotonic() - t0
    # The hook's bound is the 2 s stop_grace_period; the stop itself is at once (the
    # command exits on TERM).
    assert 1.5 < held < 2 + 1.5, held
    assert not (shared / "second").exists()
    (event,) = _events(healerd, "hangs", "hook-failed")
    assert "pre_stop[0] passed its 2s and was left running; the stop goes on" in event["message"]
    assert os.path.exists(shared / f"began-{host}")
