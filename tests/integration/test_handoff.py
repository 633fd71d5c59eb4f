"""A reboot, in the order systemd does it (healerd stopped, then dockerd; dockerd started,
then healerd), on a real dockerd: the engine brings healerd's containers back by itself
during its own start, and healerd, started again, takes its policy back before it heals
(core/handoff.py)."""

from __future__ import annotations

import json

import docker
import pytest

from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

# Exits 3 once /tmp/crash appears (a crash of its own, not a signal); a TERM ends it.
CRASHABLE = [
    "sh",
    "-c",
    "trap 'exit 0' TERM; while :; do [ -f /tmp/crash ] && exit 3; sleep 0.1; done",
]


def policy(api: docker.APIClient, cid: str) -> str:
    return str(api.inspect_container(cid)["HostConfig"]["RestartPolicy"]["Name"])


def running_ids(cluster: Cluster, service: str) -> list[str]:
    return sorted(str(c["Id"]) for c in cluster.running(service))


@pytest.mark.engine_restart
def test_a_reboot_brings_them_back_inside_the_engines_start_then_healerd_heals_again(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    dockerd: PrivateDockerd,
    api: docker.APIClient,
    image: str,
) -> None:
    config.service("hand.yaml", "hand", 2, command=json.dumps(CRASHABLE))
    config.service("once.yaml", "once", 1, restart='"no"')
    healerd.start()
    wait_for("converged", lambda: cluster.converged("hand", 2), timeout=30)
    wait_for("the job runs", lambda: len(cluster.running("once")) == 1, timeout=30)
    ids = running_ids(cluster, "hand")
    (job,) = running_ids(cluster, "once")
    # healerd's labels without its signature: not its own, so its policy is not its to set.
    forged = api.create_container(
        image,
        ["sh", "-c", "trap 'exit 0' TERM; sleep 86400 & wait"],
        labels={"io.healerd.service": "forged"},
        host_config=api.create_host_config(restart_policy={"Name": "always"}),
    )["Id"]
    api.start(forged)

    healerd.stop()
    assert "handed 2 container(s) to the engine's restart policy" in healerd.log()
    assert [policy(api, c) for c in ids] == ["unless-stopped"] * 2
    assert policy(api, job) in ("", "no"), "a run-once job must not be run again by the engine"

    dockerd.stop()
    dockerd.start()
    # healerd is not running: the engine itself started the very same containers.
    wait_for("restored by the engine", lambda: running_ids(cluster, "hand") == ids, timeout=30)
    assert not cluster.running("once")

    healerd.start()
    wait_for("taken back", lambda: [policy(api, c) for c in ids] == ["no"] * 2, timeout=20)
    wait_for(
        "healerd says so",
        lambda: "took back the engine's restart policy from 2 container(s)" in healerd.log(),
        timeout=10,
    )
    wait_for("converged again", lambda: cluster.converged("hand", 2), timeout=30)
    assert running_ids(cluster, "hand") == ids, "nothing to heal: the engine restored them"

    # healerd is the healer again: a crash (exit 3) is restarted in place by healerd,
    # not by the engine's policy (it is "no" again; the engine's RestartCount stays 0).
    victim = ids[0]
    before = api.inspect_container(victim)["State"]["StartedAt"]
    api.exec_start(api.exec_create(victim, ["touch", "/tmp/crash"])["Id"])
    wait_for(
        "healerd restarts it in place",
        lambda: "restarted in place: exited with code 3" in healerd.log(),
        timeout=30,
    )
    state = api.inspect_container(victim)
    assert state["State"]["StartedAt"] != before, "the same container ran again"
    assert state["RestartCount"] == 0, "the engine's policy restarted it, not healerd"
    assert policy(api, victim) == "no"
    mine = sorted(str(c["Id"]) for c in cluster.containers("hand", history=True))
    assert mine == ids, "restarted in place, never replaced"
    assert policy(api, forged) == "always", "a container healerd does not own was changed"
