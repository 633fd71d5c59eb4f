"""The Docker API version negotiated with the real engine (issue 31): Debian 12's dockerd
20.10 speaks API 1.41, so healerd speaks 1.41 with it (the venv's SDK knows newer), says
so once in its log and on `healerctl status`; a field that needs API 1.44 is the
service's error, naming the Docker release, while the other services converge."""

from __future__ import annotations

import json

from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

# bind.recursive: readonly is ReadOnlyForceRecursive, added in API 1.44 (Docker 25).
NEWER = (
    "[{type: bind, source: /usr/share, target: /share, read_only: true, "
    "bind: {recursive: readonly}}]"
)


def test_api_1_41_is_spoken_with_dockerd_20_10_and_a_1_44_field_is_refused(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    config.service("plain.yaml", "plain", 2)
    config.service("newer.yaml", "newer", 2, volumes=NEWER)
    healerd.start()
    wait_for("2 plain replicas", lambda: cluster.converged("plain", 2), timeout=30)

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
