"""A service file is a Compose project (issue 16): its default network, service-name DNS
across a heal, declared networks with aliases, and named volumes as Compose names them."""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Callable
from typing import Any

import docker
import pytest

from tests.integration.harness import IMAGE
from tests.support import engines
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.netprobe import fetch_by_name
from tests.support.polling import wait_for

# Podman 4.3's netavark 1.4 changes the bridge's MAC address as containers come and go:
# container DNS may stall 15-50 s (../shared/notes/machine-facts.md; fixed in netavark 1.9).
DNS_DEADLINE = 90 if engines.engine_kind() == "podman" else 10

STACK = f"""\
version: "3.8"
services:
  web:
    image: {IMAGE}
    command: ["httpd", "-f", "-p", "8080", "-h", "/www"]
    stop_grace_period: 1s
    volumes: ["site:/srv"]
    update_config: {{min_ready_seconds: 0s}}
  client:
    image: {IMAGE}
    command: {list(COMMAND)}
    stop_grace_period: 1s
    networks:
      default:
      back: {{aliases: [probe]}}
    update_config: {{min_ready_seconds: 0s}}
networks:
  back:
    labels: {{purpose: test}}
volumes:
  site:
"""


def _only(cluster: Cluster, service: str) -> dict[str, Any] | None:
    """The service's one container, running (from one list call: no race between two)."""
    cs = cluster.containers(service)
    return cs[0] if len(cs) == 1 and cs[0]["State"] == "running" else None


@pytest.mark.every_engine
def test_services_reach_each_other_by_name_across_a_heal(
    forwarding: Callable[[docker.APIClient, str], None],
    healerd: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    api: docker.APIClient,
) -> None:
    config.write("shop.yaml", textwrap.dedent(STACK))
    healerd.start()
    wait_for(
        "both running",
        lambda: cluster.converged("web", 1) and cluster.converged("client", 1),
        timeout=30,
    )
    (client,) = cluster.running("client")
    forwarding(api, "shop_default")
    # Podman 4.3 gives a container one nameserver per network, in no fixed order, and its
    # aardvark-dns answers only for the network asked through: the client (on default
    # and back) asks default's, where web is (docs/engines.md). Docker answers for all.
    dns = None
    if engines.engine_kind() == "podman":
        nets = api.inspect_container(client["Id"])["NetworkSettings"]["Networks"]
        dns = str(nets["shop_default"]["Gateway"])
    wait_for(
        "client reaches web by its service name",
        lambda: "hello from healerd" in fetch_by_name(api, client["Id"], "web", 8080, dns),
        timeout=DNS_DEADLINE,
    )
    # The network and the volume, as Compose names them, made by healerd with its labels.
    net = api.inspect_network("shop_default")
    assert net["Labels"]["io.healerd.project"] == "shop"
    assert api.inspect_network("shop_back")["Labels"]["purpose"] == "test"
    assert api.inspect_volume("shop_site")["Labels"]["io.healerd.volume"] == "site"
    (web,) = cluster.running("web")
    info = api.inspect_container(web["Id"])
    assert "shop_default" in info["NetworkSettings"]["Networks"]
    if engines.engine_kind() == "docker":  # Podman's inspect says "bridge" for any bridge
        assert info["HostConfig"]["NetworkMode"] == "shop_default"
    assert "web" in info["NetworkSettings"]["Networks"]["shop_default"]["Aliases"]
    assert any(m["Name"] == "shop_site" for m in info["Mounts"])
    aliases = api.inspect_container(client["Id"])["NetworkSettings"]["Networks"]["shop_back"]
    assert {"client", "probe"} <= set(aliases["Aliases"])
    # Heal the server in place (issue 28): the same container, reached by the name.
    started = info["State"]["StartedAt"]
    api.kill(web["Id"])
    wait_for(
        "web started again in place",
        lambda: (
            (c := _only(cluster, "web")) is not None
            and c["Id"] == web["Id"]
            and api.inspect_container(web["Id"])["State"]["StartedAt"] != started
        ),
        timeout=15,
    )
    wait_for(
        "client reaches the restarted web by name",
        lambda: "hello from healerd" in fetch_by_name(api, client["Id"], "web", 8080, dns),
        timeout=DNS_DEADLINE,
    )
    # Removed: the name leads to its replacement.
    api.remove_container(web["Id"], force=True)
    wait_for(
        "web replaced",
        lambda: (c := _only(cluster, "web")) is not None and c["Id"] != web["Id"],
        timeout=15,
    )
    wait_for(
        "client reaches the new web by name",
        lambda: "hello from healerd" in fetch_by_name(api, client["Id"], "web", 8080, dns),
        timeout=DNS_DEADLINE,
    )


def test_depends_on_service_healthy_orders_the_creates(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient
) -> None:
    """Order observed from the engine's events: app is created only after db reported
    healthy; until then healerctl status says what app waits for."""
    config.write(
        "order.yaml",
        textwrap.dedent(
            f"""\
            services:
              db:
                image: {IMAGE}
                command: ["sh", "-c", "sleep 2; touch /tmp/up; {COMMAND[2]}"]
                stop_grace_period: 1s
                healthcheck: {{test: [CMD, test, -e, /tmp/up], interval: 1s, retries: 30}}
              app:
                image: {IMAGE}
                command: {list(COMMAND)}
                stop_grace_period: 1s
                depends_on: {{db: {{condition: service_healthy}}}}
            """
        ),
    )
    t0 = time.time()
    healerd.start()
    wait_for(
        "app waiting for db",
        lambda: "waiting for db to be healthy" in healerd.ctl("status")[1],
        timeout=10,
    )
    wait_for("app running", lambda: cluster.converged("app", 1), timeout=30)
    events = list(
        api.events(
            since=int(t0) - 1,
            until=int(time.time()) + 1,
            decode=True,
            filters={"type": "container", "label": "io.healerd.service"},
        )
    )

    def first(service: str, action: str) -> float:
        return min(
            float(e["timeNano"])
            for e in events
            if e["Actor"]["Attributes"].get("io.healerd.service") == service
            and e["Action"] == action
        )

    assert first("db", "health_status: healthy") < first("app", "create")


def _exec(api: docker.APIClient, container: str, *argv: str) -> str:
    run = api.exec_create(container, list(argv))
    return str(api.exec_start(run).decode(errors="replace"))


def test_secrets_links_and_a_shared_network_namespace(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient
) -> None:
    """A secret's content is readable at /run/secrets/<name> (read-only), a config at
    /<name>; the linking container resolves the link's alias; a network_mode service:db
    container shares db's network namespace; editing the secret rolls db."""
    secret = config.root / "conf.d" / "db_password.txt"
    config.conf_d.mkdir(parents=True, exist_ok=True)
    secret.write_text("hunter2\n")
    (config.conf_d / "app.conf").write_text("level=info\n")
    config.write(
        "vault.yaml",
        textwrap.dedent(
            f"""\
            secrets:
              db_password: {{file: ./db_password.txt}}
            configs:
              app_conf: {{file: ./app.conf}}
            services:
              db:
                image: {IMAGE}
                command: {list(COMMAND)}
                stop_grace_period: 1s
                secrets: [db_password, {{source: db_password, target: /etc/pw}}]
                configs: [app_conf]
                update_config: {{min_ready_seconds: 0s, order: stop-first}}
              web:
                image: {IMAGE}
                command: {list(COMMAND)}
                stop_grace_period: 1s
                links: ["db:database"]
              side:
                image: {IMAGE}
                command: {list(COMMAND)}
                stop_grace_period: 1s
                network_mode: service:db
            """
        ),
    )
    healerd.start()
    wait_for(
        "all three running",
        lambda: all(cluster.converged(s, 1) for s in ("db", "web", "side")),
        timeout=30,
    )
    (db,), (web,), (side,) = (cluster.running(s) for s in ("db", "web", "side"))
    assert _exec(api, db["Id"], "cat", "/run/secrets/db_password") == "hunter2\n"
    assert _exec(api, db["Id"], "cat", "/etc/pw") == "hunter2\n"
    assert _exec(api, db["Id"], "cat", "/app_conf") == "level=info\n"
    assert "Read-only" in _exec(api, db["Id"], "touch", "/run/secrets/db_password")
    # The link's alias resolves from web (and only there, as Compose's links do).
    answer = _exec(api, web["Id"], "/bin/busybox", "nslookup", "database", "127.0.0.11")
    db_ip = api.inspect_container(db["Id"])["NetworkSettings"]["Networks"]["vault_default"]
    assert db_ip["IPAddress"] in answer, answer
    # side joined db's network namespace.
    info = api.inspect_container(side["Id"])
    assert info["HostConfig"]["NetworkMode"] == f"container:{db['Id']}"
    ns = [_exec(api, c["Id"], "ls", "-l", "/proc/self/ns/net").split("->")[-1] for c in (db, side)]
    assert ns[0] == ns[1], ns
    # db crashes and is started again in place: a new run has a new network namespace,
    # so side, left with `lo` only, is made again in it (issue 28).
    os.kill(int(api.inspect_container(db["Id"])["State"]["Pid"]), 9)

    def side_follows() -> bool:
        c = _only(cluster, "side")
        if c is None or c["Id"] == side["Id"] or c["State"] != "running":
            return False
        pair = [_exec(api, x, "ls", "-l", "/proc/self/ns/net") for x in (db["Id"], c["Id"])]
        return pair[0].split("->")[-1] == pair[1].split("->")[-1]

    wait_for("side in db's new network namespace", side_follows, timeout=30)
    assert _only(cluster, "db") is not None and _only(cluster, "db")["Id"] == db["Id"]  # type: ignore[index]
    # Editing the secret rolls db: its replacement reads the new content.
    secret.write_text("changed\n")
    healerd.ctl("reload")

    wait_for(
        "db replaced after the secret changed",
        lambda: (c := _only(cluster, "db")) is not None and c["Id"] != db["Id"],
        timeout=30,
    )
    db2 = _only(cluster, "db")
    assert db2 is not None
    assert _exec(api, db2["Id"], "cat", "/run/secrets/db_password") == "changed\n"

    # db was replaced: side's namespace held only lo, so side is made again in db2's.
    def side_in_db2() -> bool:
        c = _only(cluster, "side")
        mode = api.inspect_container(c["Id"])["HostConfig"]["NetworkMode"] if c else ""
        return bool(mode == f"container:{db2['Id']}")

    wait_for("side recreated in the new db's network namespace", side_in_db2, timeout=30)
    side2 = _only(cluster, "side")
    assert side2 is not None
    ns = [
        _exec(api, c["Id"], "ls", "-l", "/proc/self/ns/net").split("->")[-1] for c in (db2, side2)
    ]
    assert ns[0] == ns[1], ns
