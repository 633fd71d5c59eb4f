"""Run-once services on a real engine (issue 16, points 5 and 6): restart "no" and
on-failure[:N], and depends_on's service_completed_successfully, with the order seen in
the engine's own events."""

from __future__ import annotations

import json
import textwrap
import time
from typing import Any

import docker

from tests.integration.harness import IMAGE
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for


def _status(healerd: Healerd, service: str) -> dict[str, Any]:
    rc, out, err = healerd.ctl("status", service, "-o", "json")
    assert rc == 0, err
    row: dict[str, Any] = json.loads(out)["services"][0]
    return row


def _events(api: docker.APIClient, since: float) -> list[dict[str, Any]]:
    return list(
        api.events(
            since=int(since) - 1,
            until=int(time.time()) + 1,
            decode=True,
            filters={"type": "container", "label": "io.healerd.service"},
        )
    )


def _first(events: list[dict[str, Any]], service: str, action: str) -> float:
    return min(
        float(e["timeNano"])
        for e in events
        if e["Actor"]["Attributes"].get("io.healerd.service") == service and e["Action"] == action
    )


def test_a_migration_runs_once_then_its_dependent_starts(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient
) -> None:
    """migrate (no restart of its own: a job, because app waits for it to complete) exits
    0 and is never run again; db must be healthy too; app is created after both."""
    config.write(
        "jobs.yaml",
        textwrap.dedent(
            f"""\
            services:
              migrate:
                image: {IMAGE}
                command: ["sh", "-c", "sleep 2; exit 0"]
              db:
                image: {IMAGE}
                command: ["sh", "-c", "sleep 1; touch /tmp/up; {COMMAND[2]}"]
                stop_grace_period: 1s
                healthcheck: {{test: [CMD, test, -e, /tmp/up], interval: 1s, retries: 30}}
              app:
                image: {IMAGE}
                command: {list(COMMAND)}
                stop_grace_period: 1s
                depends_on:
                  migrate: {{condition: service_completed_successfully}}
                  db: {{condition: service_healthy}}
            """
        ),
    )
    t0 = time.time()
    healerd.start()
    wait_for(
        "app waiting for migrate",
        lambda: "waiting for migrate to complete successfully" in _status(healerd, "app")["reason"],
        timeout=15,
    )
    wait_for("app running", lambda: cluster.converged("app", 1), timeout=40)
    wait_for("migrate Completed", lambda: _status(healerd, "migrate")["state"] == "Completed", 10)
    events = _events(api, t0)
    dies = [
        e
        for e in events
        if e["Actor"]["Attributes"].get("io.healerd.service") == "migrate" and e["Action"] == "die"
    ]
    assert [d["Actor"]["Attributes"]["exitCode"] for d in dies] == ["0"]
    assert _first(events, "migrate", "die") < _first(events, "app", "create")
    assert _first(events, "db", "health_status: healthy") < _first(events, "app", "create")
    # Never run again: one container, exited 0, and no second create, after the daemon's
    # own check (healerctl status --check counts a Completed job as what was declared).
    wait_for("all converged", lambda: healerd.ctl("status", "--check")[0] == 0, timeout=20)
    (job,) = cluster.containers("migrate", history=True)
    assert job["State"] == "exited" and "Exited (0)" in job["Status"]
    assert cluster.count_events("migrate", "create", t0) == 1
    assert "exited with code 0" in _status(healerd, "migrate")["reason"]


def test_a_failed_migration_blocks_its_dependent_with_the_reason(
    healerd: Healerd, cluster: Cluster, config: ConfigDir
) -> None:
    config.write(
        "jobs.yaml",
        textwrap.dedent(
            f"""\
            services:
              migrate:
                image: {IMAGE}
                command: ["sh", "-c", "exit 1"]
                restart: "no"
              app:
                image: {IMAGE}
                command: {list(COMMAND)}
                depends_on: {{migrate: {{condition: service_completed_successfully}}}}
            """
        ),
    )
    t0 = time.time()
    healerd.start()
    wait_for("migrate Failed", lambda: _status(healerd, "migrate")["state"] == "Failed", 20)
    assert "exited with code 1" in _status(healerd, "migrate")["reason"]
    wait_for(
        "app blocked",
        lambda: "blocked: migrate failed" in _status(healerd, "app")["reason"],
        timeout=10,
    )
    app = _status(healerd, "app")
    assert app["state"] == "Waiting" and "exited with code 1" in app["reason"], app
    assert cluster.containers("app") == []
    assert cluster.count_events("migrate", "create", t0) == 1  # "no": never run again
    rc, _, _ = healerd.ctl("status", "--check")
    assert rc != 0  # a failed job is not what was declared


def test_on_failure_n_restarts_n_times_then_gives_up(
    healerd: Healerd, cluster: Cluster, config: ConfigDir
) -> None:
    config.write(
        "flaky.yaml",
        textwrap.dedent(
            f"""\
            services:
              flaky:
                image: {IMAGE}
                command: ["sh", "-c", "exit 3"]
                restart: on-failure:2
                restart_policy: {{delay: 1s, max_delay: 1s}}
              fine:
                image: {IMAGE}
                command: ["sh", "-c", "exit 0"]
                restart: on-failure
            """
        ),
    )
    t0 = time.time()
    healerd.start()
    wait_for("flaky Failed", lambda: _status(healerd, "flaky")["state"] == "Failed", 40)
    reason = _status(healerd, "flaky")["reason"]
    assert "exited with code 3 after 2 restart(s) (on-failure:2)" in reason, reason
    # The first run and 2 restarts, in place (issue 28): one container, started 3 times.
    assert cluster.count_events("flaky", "create", t0) == 1
    assert cluster.count_events("flaky", "start", t0) == 3
    assert len(cluster.containers("flaky", history=True)) == 1
    wait_for("fine Completed", lambda: _status(healerd, "fine")["state"] == "Completed", 20)
    assert cluster.count_events("fine", "create", t0) == 1  # exit 0: not a failure
