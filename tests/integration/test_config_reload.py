"""Hot reload: file changes apply within a second without SIGHUP; broken writes change nothing."""

from __future__ import annotations

import time

from tests.integration.conftest import IMAGE, ConfigDir, unique
from tests.integration.harness import Cluster, Healerd, holds_for, wait_for


def running_ids(cluster: Cluster, name: str) -> list[str]:
    return sorted(c["Id"] for c in cluster.containers(name) if c["State"] == "running")


def test_files_are_applied_without_sighup(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    healerd.start()
    wait_for("the watcher", lambda: "for changes (inotify)" in healerd.log(), timeout=10)
    name = unique("hot")

    config.service("hot.yaml", name, 1)
    wait_for("a new file applied", lambda: cluster.converged(name, 1), timeout=20)

    start = time.monotonic()
    config.service("hot.yaml", name, 3)
    wait_for("replicas 1 -> 3", lambda: len(cluster.containers(name)) == 3, timeout=20)
    print(f"replicas change: first new container after {time.monotonic() - start:.2f}s")
    wait_for("three running", lambda: cluster.converged(name, 3), timeout=20)
    ids = running_ids(cluster, name)

    for broken in (
        "services:\n  x: [\n",  # invalid YAML
        f"services:\n  {name}:\n    image: {IMAGE}\n    replicas: 1\n    bogus: 1\n",
    ):
        reported = healerd.log().count("config error:")
        config.write("hot.yaml", broken)
        wait_for(
            "the error reported",
            lambda n=reported: healerd.log().count("config error:") > n,  # type: ignore[misc]
            timeout=10,
        )
        holds_for("containers unchanged", lambda: running_ids(cluster, name) == ids, 2.0)

    config.service("hot.yaml", name, 2)
    wait_for("the fix applied", lambda: cluster.converged(name, 2), timeout=20)

    (config.conf_d / "hot.yaml").unlink()
    wait_for("containers gone", lambda: cluster.containers(name) == [], timeout=20)
    assert healerd.alive()
