"""The seed scenario and its relatives, against a real dockerd."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import docker
import pytest

from tests.integration.harness import current_hash, started_again
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for


@pytest.mark.every_engine
def test_replicas_follow_edits_with_sighup(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    path = config.service("scale.yaml", "scale", 3)
    spec_hash = current_hash(path, "scale")
    healerd.start()
    for replicas in (3, 1, 5):
        config.service("scale.yaml", "scale", replicas)
        healerd.signal(signal.SIGHUP)
        wait_for(
            f"{replicas} replicas",
            lambda r=replicas: cluster.converged("scale", r, spec_hash),
            timeout=20,
        )
        holds_for(
            f"exactly {replicas} replicas",
            lambda r=replicas: cluster.converged("scale", r, spec_hash),
            0.5,
        )


def test_restarted_healerd_adopts_what_runs(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    path = config.service("adopt.yaml", "adopt", 3)
    spec_hash = current_hash(path, "adopt")
    healerd.start()
    wait_for("3 replicas", lambda: cluster.converged("adopt", 3, spec_hash), timeout=20)
    before = sorted(c["Id"] for c in cluster.containers("adopt"))
    healerd.kill9()
    t0 = time.time()
    healerd.start()
    wait_for(
        "the new healerd's first pass", lambda: "adopt: Converged" in healerd.log(), timeout=20
    )
    holds_for(
        "no create or remove",
        lambda: (
            cluster.count_events("adopt", "create", t0) == 0
            and cluster.count_events("adopt", "destroy", t0) == 0
        ),
        1.0,
    )
    assert sorted(c["Id"] for c in cluster.containers("adopt")) == before


def test_sigterm_exits_quickly_and_leaves_containers_running(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    path = config.service("term.yaml", "term", 2)
    spec_hash = current_hash(path, "term")
    healerd.start()
    wait_for("2 replicas", lambda: cluster.converged("term", 2, spec_hash), timeout=20)
    before = sorted(c["Id"] for c in cluster.running("term"))
    t0 = time.monotonic()
    code = healerd.stop(timeout=5)
    elapsed = time.monotonic() - t0
    print(f"SIGTERM -> exit in {elapsed:.2f}s, code {code}")
    assert code == 0 and elapsed < 5
    assert sorted(c["Id"] for c in cluster.running("term")) == before


def test_deleting_a_service_file_removes_its_containers_only(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    gone = config.service("gone.yaml", "gone", 2)
    config.service("stays.yaml", "stays", 1)
    healerd.start()
    wait_for(
        "both services",
        lambda: cluster.converged("gone", 2) and cluster.converged("stays", 1),
        timeout=20,
    )
    stays = [c["Id"] for c in cluster.containers("stays")]
    gone.unlink()
    healerd.signal(signal.SIGHUP)
    wait_for("gone removed", lambda: cluster.containers("gone") == [], timeout=20)
    assert [c["Id"] for c in cluster.containers("stays")] == stays


def test_containers_of_an_undeclared_service_are_removed_after_restart(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    """Labels are the record: a healerd that never saw the service still cleans it up."""
    path = config.service("old.yaml", "old", 2)
    healerd.start()
    wait_for("2 replicas", lambda: cluster.converged("old", 2), timeout=20)
    healerd.kill9()
    path.unlink()
    healerd.start()
    wait_for("orphans removed", lambda: cluster.containers("old") == [], timeout=20)


def test_a_second_healerd_for_the_same_engine_refuses_to_start(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient, tmp_path: Path
) -> None:
    config.service("one.yaml", "one", 1)
    healerd.start()
    wait_for("1 replica", lambda: cluster.converged("one", 1), timeout=20)
    second = Healerd(config.root, healerd.docker_host, tmp_path / "second.log")
    with pytest.raises(AssertionError, match="exited at start"):
        second.start()
    assert second.proc is not None and second.proc.wait(timeout=10) == 3
    assert "refusing to start a second one" in second.log()
    assert healerd.alive() and cluster.converged("one", 1)
    # The first one still heals (in place: the same container starts again).
    (victim,) = cluster.running("one")
    started = api.inspect_container(victim["Id"])["State"]["StartedAt"]
    t0 = time.time()
    api.kill(victim["Id"])
    wait_for(
        "the first healerd to heal",
        lambda: cluster.converged("one", 1) and started_again(api, victim["Id"], started),
        timeout=5,
    )
    assert cluster.count_events("one", "create", t0) == 0
