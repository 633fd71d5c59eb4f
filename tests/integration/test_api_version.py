"""The Docker API version negotiated with the real engine (issue 31): Debian 12's dockerd
20.10 speaks API 1.41, so healerd speaks 1.41 with it (the venv's SDK knows newer), says
so once in its log and on `healerctl status`; a field that needs API 1.44 is the
service's error, naming the Docker release, while the other services converge. Debian
13's dockerd 26.1 (its host's engine, or HEALERD_TEST_ENGINE=docker26) speaks 1.45:
healerd speaks the lower of 1.45 and its SDK's newest, and the same field works there.
Each test runs on the release it is about and is skipped, saying so, on the other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healerd.engine.docker import apiversion
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.fakedockerd import FakeDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

# bind.recursive: readonly is ReadOnlyForceRecursive, added in API 1.44 (Docker 25).
NEWER = (
    "[{type: bind, source: /usr/share, target: /share, read_only: true, "
    "bind: {recursive: readonly}}]"
)


def only_on(cluster: Cluster, release: str) -> None:
    """Skip unless the engine answering is Docker `release`: the run's engine is the
    host's own on the default kind (20.10 on Debian 12, 26.1 on Debian 13)."""
    version = str(cluster.api.version().get("Version", ""))
    if not version.startswith(release + "."):
        pytest.skip(f"pinned to dockerd {release}; this engine is {version}")


def test_api_1_41_is_spoken_with_dockerd_20_10_and_a_1_44_field_is_refused(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    only_on(cluster, "20.10")
    config.service("plain.yaml", "plain", 2)
    config.service("newer.yaml", "newer", 2, volumes=NEWER)
    # recursive: disabled is NonRecursive, which API 1.40 has: it works on 20.10.
    config.service("flat.yaml", "flat", 1, volumes=NEWER.replace("readonly", "disabled"))
    healerd.start()
    wait_for("2 plain replicas", lambda: cluster.converged("plain", 2), timeout=30)
    wait_for("1 flat replica", lambda: cluster.converged("flat", 1), timeout=30)
    (flat,) = cluster.running("flat")
    (mount,) = cluster.api.inspect_container(flat["Id"])["HostConfig"]["Mounts"]
    assert mount["BindOptions"]["NonRecursive"] is True and mount["ReadOnly"] is True

    def reason() -> str:
        data = json.loads(healerd.ctl("status", "newer", "-o", "json")[1])
        text = str(data["services"][0]["reason"] or "")
        return text if "needs" in text else ""

    text = wait_for("the refusal in the service's reason", reason, timeout=30)
    assert "bind.recursive: readonly needs Docker 25.0 (API 1.44)" in text, text
    assert "healerd speaks API 1.41 with this engine" in text, text
    assert cluster.containers("newer") == []  # nothing half-made
    assert cluster.converged("plain", 2) and healerd.alive()

    data = json.loads(healerd.ctl("status", "-o", "json")[1])
    assert data["engine"]["api_version"] == "1.41"
    assert data["engine"]["version"].startswith("20.10")
    engine_line = [ln for ln in healerd.ctl("status")[1].splitlines() if ln.startswith("engine:")]
    assert engine_line and "(API 1.41)" in engine_line[0], engine_line
    log = healerd.log()
    assert "healerd speaks API 1.41" in log


@pytest.mark.every_engine
def test_api_1_45_or_the_sdks_newest_is_spoken_with_dockerd_26_and_a_1_44_field_works(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    only_on(cluster, "26.1")
    config.service("newer.yaml", "newer", 1, volumes=NEWER)
    healerd.start()
    wait_for("1 newer replica", lambda: cluster.converged("newer", 1), timeout=30)
    (newer,) = cluster.running("newer")
    info = cluster.api.inspect_container(newer["Id"])
    (mount,) = info["HostConfig"]["Mounts"]
    assert mount["ReadOnly"] is True, mount
    assert mount["BindOptions"].get("ReadOnlyForceRecursive") is True, mount

    spoken = min("1.45", apiversion.sdk_newest(), key=apiversion.parsed)
    data = json.loads(healerd.ctl("status", "-o", "json")[1])
    assert data["engine"]["api_version"] == spoken, data["engine"]
    assert data["engine"]["version"].startswith("26.1"), data["engine"]
    engine_line = [ln for ln in healerd.ctl("status")[1].splitlines() if ln.startswith("engine:")]
    assert engine_line and f"(API {spoken})" in engine_line[0], engine_line
    assert f"healerd speaks API {spoken}" in healerd.log()
    assert not data["services"][0]["reason"] or "needs" not in data["services"][0]["reason"]


def test_an_engine_below_api_1_41_is_refused_and_healerd_keeps_running(
    config: ConfigDir, tmp_path: Path
) -> None:
    """A fake engine that speaks API 1.40 (Docker 19.03): healerd says why in its log and
    on `healerctl status`, acts on nothing, and keeps running."""
    fake = FakeDockerd(tmp_path / "old-engine.sock", "1.40")
    fake.start()
    config.service("old.yaml", "old", 1)
    h = Healerd(config.root, f"unix://{fake.path}", tmp_path / "healerd.log")
    try:
        h.start()
        refusal = (
            "the engine speaks Docker API 1.40 (Docker 19.03); healerd needs 1.41 "
            "(Docker 20.10) or newer"
        )
        wait_for("the refusal in the log", lambda: refusal in h.log(), timeout=15)
        data = json.loads(h.ctl("status", "-o", "json")[1])
        assert refusal in str(data["services"][0]["reason"]), data
        assert h.alive()
        assert not [p for p in fake.asked if p.startswith("/v1.")], set(fake.asked)
    finally:
        if h.alive():
            h.stop()
        fake.stop()
