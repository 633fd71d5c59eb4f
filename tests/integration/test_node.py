"""Node awareness against a real dockerd: pressure thresholds hold creates back with a
reason and let them go when lowered; a pull that would fill the disk is refused; with
room for one container the higher priority goes first. Thresholds make the pressure,
not real exhaustion."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker
import psutil

from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for

Gi = 2**30


def ctl(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "healerd.cli.healerctl", "--socket", str(sock), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def status(sock: Path) -> dict[str, Any]:
    p = ctl(sock, "status", "-o", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)  # type: ignore[no-any-return]


def service(sock: Path, name: str) -> dict[str, Any]:
    return next(s for s in status(sock)["services"] if s["name"] == name)


def settings(config: ConfigDir, **keys: object) -> None:
    text = "".join(f"{k}: {v}\n" for k, v in keys.items())
    tmp = config.root / ".healerd.yaml.tmp"
    tmp.write_text(text)
    tmp.replace(config.root / "healerd.yaml")


def test_memory_pressure_holds_a_scale_up_back_until_the_threshold_is_lowered(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    sock = config.root / "healerd.sock"
    config.service("web.yaml", "web", 1)
    healerd.start()
    wait_for("web runs", lambda: cluster.converged("web", 1), timeout=30)
    (first,) = cluster.running("web")

    # 99% of the memory must stay available: this host is under pressure now.
    settings(config, pressure_memory_available="99%")
    healerd.signal(signal.SIGHUP)
    wait_for("pressure seen", lambda: status(sock)["host"]["pressure"]["memory"], timeout=10)
    config.service("web.yaml", "web", 3)
    healerd.signal(signal.SIGHUP)
    wait_for("web waits", lambda: service(sock, "web")["state"] == "WaitingForResources",
             timeout=10)  # fmt: skip
    web = service(sock, "web")
    print("reason:", web["reason"])
    assert web["reason"].startswith("2 container(s) wait for resources: memory pressure: ")
    assert "below the threshold of 99%" in web["reason"]
    holds_for("the scale-up to stay held", lambda: len(cluster.containers("web")) == 1, 3.0)
    assert cluster.running("web")[0]["Id"] == first["Id"]
    table = ctl(sock, "status").stdout
    print(table)
    assert "WaitingForResources" in table and "pressure: MEMORY" in table
    assert "memory pressure: " in table and "healerd: rss " in table
    assert "host under pressure: memory pressure" in healerd.log()

    # Lowered: the scale-up goes on by itself, no restart.
    settings(config, pressure_memory_available="100Mi")
    healerd.signal(signal.SIGHUP)
    wait_for("web scaled up", lambda: cluster.converged("web", 3), timeout=20)
    assert first["Id"] in {c["Id"] for c in cluster.running("web")}
    wait_for("pressure over", lambda: not status(sock)["host"]["pressure"]["memory"], timeout=10)
    assert "host pressure ended" in healerd.log()


def test_a_pull_that_would_cross_the_disk_threshold_is_refused(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    sock = config.root / "healerd.sock"
    # No earlier version of the image is on disk: the margin is the guess, and no disk
    # here has 90 TiB to spare.
    settings(config, pull_disk_margin="90000g")
    config.service("app.yaml", "app", 2)
    healerd.start()
    wait_for("app runs", lambda: cluster.converged("app", 2), timeout=30)
    before = {c["Id"]: c["Labels"] for c in cluster.running("app")}
    # Loopback, and never reached: the refusal comes before any pull.
    config.write("app.yaml", (config.root / "conf.d" / "app.yaml").read_text().replace(
        "image: ", "image: 127.0.0.1:5999/healerd-test/new:2\n    x-old-image: "))  # fmt: skip
    healerd.signal(signal.SIGHUP)
    wait_for("the refusal", lambda: service(sock, "app")["state"] == "WaitingForResources",
             timeout=15)  # fmt: skip
    reason = service(sock, "app")["reason"]
    print("reason:", reason)
    assert reason.startswith(
        "not pulling 127.0.0.1:5999/healerd-test/new:2: it needs about 87.9Ti (pull_disk_margin)"
    )
    assert "the pull would leave less than the threshold of 10%" in reason
    holds_for("the running containers to stay", lambda: {
        c["Id"]: c["Labels"] for c in cluster.running("app")} == before, 3.0)  # fmt: skip
    assert ": pulling " not in healerd.log() and "pull-failed" not in ctl(sock, "events").stdout


def test_with_room_for_one_container_the_higher_priority_is_healed_first(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient
) -> None:
    sock = config.root / "healerd.sock"
    config.service("cache.yaml", "cache", 1)
    config.service("db.yaml", "db", 1, priority=10)
    healerd.start()
    wait_for("both run", lambda: cluster.converged("cache", 1) and cluster.converged("db", 1),
             timeout=30)  # fmt: skip
    # Each container is taken to need 4 GiB, and 6 GiB above the threshold are left:
    # room for exactly one (the busybox containers really take a few MiB, so the
    # real figure hardly moves).
    available = psutil.virtual_memory().available
    settings(
        config,
        pressure_memory_available=available - 6 * Gi,
        container_memory_estimate="4g",
    )
    healerd.signal(signal.SIGHUP)
    wait_for("settings applied", lambda: "applied container_memory_estimate" in healerd.log(),
             timeout=10)  # fmt: skip
    # Both die while healerd is stopped: it sees both losses in one look. The low one
    # dies first.
    ids = {name: cluster.running(name)[0]["Id"] for name in ("cache", "db")}
    healerd.signal(signal.SIGSTOP)
    try:
        for name in ("cache", "db"):
            api.kill(ids[name])
    finally:
        healerd.signal(signal.SIGCONT)
    wait_for("db healed", lambda: cluster.running("db"), timeout=10)  # in place
    assert cluster.running("cache") == []

    # WaitingForResources, read from its event: the state lasts only until db's grant
    # lapses (about 5 s), which a slow poll may miss.
    def cache_waits() -> list[str]:
        return [
            e["message"]
            for e in events(sock)
            if e["kind"] == "waiting-for-resources" and e["service"] == "cache"
        ]

    waits = wait_for("cache waits", cache_waits, timeout=10)
    print("cache waited:", waits)
    assert waits and waits[-1].endswith("db (priority 10) go first")
    # The room comes back once db's grant lapses (its container takes far less than the
    # estimate): cache follows.
    wait_for("cache healed", lambda: cluster.converged("cache", 1), timeout=20)
    # Both are started again in place (issue 28), in priority order.
    order = [e["service"] for e in events(sock) if e["kind"] == "restarted"]
    assert order == ["db", "cache"], order
    assert {name: cluster.running(name)[0]["Id"] for name in ids} == ids
    assert status(sock)["waiting_for_resources"] == {}


def events(sock: Path) -> list[dict[str, Any]]:
    p = ctl(sock, "events", "-o", "json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    return data["events"] if isinstance(data, dict) else data  # type: ignore[no-any-return]
