"""Compose's container_name on a real engine (issue 16): the one replica keeps its fixed
name across a heal in place and a replacement, with its data; a name held by a container
healerd does not own is never taken from it."""

from __future__ import annotations

import textwrap

import docker

from tests.integration.harness import IMAGE
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

STAMP = "test -e /data/born || date +%s%N > /data/born; trap 'exit 0' TERM; sleep 86400 & wait"


def _running_named(cluster: Cluster, service: str, name: str) -> dict[str, object] | None:
    running = cluster.running(service)
    if len(running) == 1 and running[0]["Names"] == [f"/{name}"]:
        return running[0]
    return None


def test_a_fixed_name_survives_a_heal_with_its_data(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient
) -> None:
    config.write(
        "named.yaml",
        textwrap.dedent(
            f"""\
            services:
              broker:
                image: {IMAGE}
                container_name: hd-test-mosquitto
                command: ["sh", "-c", "{STAMP}"]
                volumes: ["/data"]
                stop_grace_period: 1s
                unhealthy_grace: 0s
                healthcheck:
                  test: ["CMD", "sh", "-c", "test ! -f /tmp/sick"]
                  interval: 1s
                  retries: 1
            """
        ),
    )
    healerd.start()
    wait_for("named", lambda: _running_named(cluster, "broker", "hd-test-mosquitto"), 30)
    first = _running_named(cluster, "broker", "hd-test-mosquitto")
    assert first is not None
    born = api.exec_start(api.exec_create(str(first["Id"]), ["cat", "/data/born"])["Id"])
    started = api.inspect_container(str(first["Id"]))["State"]["StartedAt"]

    # docker kill: the same container started again (issue 28), under its name.
    api.kill(str(first["Id"]))
    wait_for(
        "started again in place",
        lambda: (
            _running_named(cluster, "broker", "hd-test-mosquitto") is not None
            and api.inspect_container(str(first["Id"]))["State"]["StartedAt"] != started
        ),
        timeout=30,
    )
    assert [c["Id"] for c in cluster.containers("broker", history=True)] == [first["Id"]]

    # Unhealthy (the mark is in its writable layer, which a restart in place keeps):
    # restarted in place, unhealthy again, so replaced, under the same name.
    api.exec_start(api.exec_create(str(first["Id"]), ["touch", "/tmp/sick"])["Id"])

    def replaced() -> bool:
        c = _running_named(cluster, "broker", "hd-test-mosquitto")
        return c is not None and c["Id"] != first["Id"]

    wait_for("replaced under the same name", replaced, timeout=30)
    new = _running_named(cluster, "broker", "hd-test-mosquitto")
    assert new is not None
    again = api.exec_start(api.exec_create(str(new["Id"]), ["cat", "/data/born"])["Id"])
    assert again == born, "the anonymous volume went over to the replacement"
    # The failed one is gone (a fixed name keeps no history), and nothing was left aside.
    assert [c["Id"] for c in cluster.containers("broker", history=True)] == [new["Id"]]
    assert not [c for c in api.containers(all=True) if "replaced" in c["Names"][0]]


def test_a_name_held_by_a_foreign_container_is_left_to_it(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient, foreign: str
) -> None:
    name = api.inspect_container(foreign)["Name"].lstrip("/")
    config.write(
        "named.yaml",
        f"services:\n  taker:\n    image: {IMAGE}\n    container_name: {name}\n",
    )
    healerd.start()

    def degraded() -> bool:
        _, out, _ = healerd.ctl("status", "taker", "-o", "wide")  # the whole reason
        return "Degraded" in out and f"container_name {name!r} is taken" in out

    wait_for("taker Degraded with the reason", degraded, timeout=20)
    assert cluster.containers("taker") == []
    # The `foreign` fixture checks that the container was neither stopped nor renamed.
