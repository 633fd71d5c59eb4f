"""depends_on's `restart: true` on a real engine (issue 16, point 6): when a dependency is
replaced, its dependents are recreated; without it they are left alone (as in Compose)."""

from __future__ import annotations

import textwrap
import time

from tests.integration.harness import IMAGE
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for


def _one_id(cluster: Cluster, service: str) -> str | None:
    running = cluster.running(service)
    return str(running[0]["Id"]) if len(running) == 1 else None


def test_dependents_with_restart_true_follow_a_replaced_dependency(
    healerd: Healerd, cluster: Cluster, config: ConfigDir
) -> None:
    config.write(
        "stack.yaml",
        textwrap.dedent(
            f"""\
            services:
              db:
                image: {IMAGE}
                command: {list(COMMAND)}
                stop_grace_period: 1s
              app:
                image: {IMAGE}
                command: {list(COMMAND)}
                stop_grace_period: 1s
                depends_on: {{db: {{condition: service_started, restart: true}}}}
              side:
                image: {IMAGE}
                command: {list(COMMAND)}
                stop_grace_period: 1s
                depends_on: [db]
            """
        ),
    )
    healerd.start()
    for s in ("db", "app", "side"):
        wait_for(f"{s} running", lambda s=s: _one_id(cluster, s) is not None, timeout=30)
    db, app, side = (_one_id(cluster, s) for s in ("db", "app", "side"))
    # The engine's creation times are whole seconds: let the dependency's replacement be
    # made in a later second than the dependents.
    wait_for("a second later", lambda: _later(cluster), timeout=5)
    # A crash of db is healed in place: an automatic restart, which Compose's
    # `restart: true` leaves out ("excludes automated restart by the container runtime").
    started = cluster.api.inspect_container(db)["State"]["StartedAt"]
    cluster.api.kill(db)
    wait_for(
        "db started again in place",
        lambda: (
            cluster.api.inspect_container(db)["State"]["StartedAt"] != started
            and _one_id(cluster, "db") == db
        ),
        timeout=30,
    )
    wait_for("settled", lambda: healerd.ctl("status", "--check")[0] == 0, timeout=30)
    assert _one_id(cluster, "app") == app, "an in-place heal of db recreates no dependent"
    # Removed, db is replaced: a new container, which app follows.
    cluster.api.remove_container(db, force=True)
    wait_for("db replaced", lambda: _one_id(cluster, "db") not in (None, db), timeout=30)
    wait_for("app recreated", lambda: _one_id(cluster, "app") not in (None, app), timeout=30)
    assert _one_id(cluster, "side") == side, "without restart: true a dependent stays"
    new_app = _one_id(cluster, "app")
    wait_for("settled", lambda: healerd.ctl("status", "--check")[0] == 0, timeout=30)
    assert _one_id(cluster, "app") == new_app, "recreated once, not again and again"


def _later(cluster: Cluster) -> bool:
    created = max(int(c["Created"]) for c in cluster.containers("app"))
    return time.time() >= created + 1.05
