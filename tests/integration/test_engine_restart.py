"""dockerd stopped, away for a while, and back: healerd survives and heals."""

from __future__ import annotations

import signal
import threading
import time

import docker
import pytest

from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for


@pytest.mark.every_engine
@pytest.mark.engine_restart
@pytest.mark.every_engine
def test_engine_restart_is_survived_and_healed(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    dockerd: PrivateDockerd,
    api: docker.APIClient,
) -> None:
    config.service("eng.yaml", "eng", 1)
    healerd.start()
    wait_for("1 replica", lambda: cluster.converged("eng", 1), timeout=20)

    dockerd.stop()
    # While the engine is away the operator scales up; healerd must apply it on return.
    config.service("eng.yaml", "eng", 2)
    healerd.signal(signal.SIGHUP)
    holds_for("healerd alive while the engine is away", healerd.alive, 4, interval=0.1)
    log = healerd.log()
    complaints = log.count("cannot list containers") + log.count("event stream lost")
    print(f"log lines about the missing engine in 4 s: {complaints}")
    assert 1 <= complaints <= 6, "the engine's absence is logged, but not every loop"

    dockerd.start()
    wait_for(
        "2 replicas after the engine came back", lambda: cluster.converged("eng", 2), timeout=30
    )
    assert healerd.alive()

    victim = cluster.running("eng")[0]["Id"]
    started = api.inspect_container(victim)["State"]["StartedAt"]
    # Settled first: Podman delivers events in batches about 250 ms apart, and a container
    # killed in the batch that tells of its start is replaced, not restarted in place.
    holds_for(
        "the victim running as it is",
        lambda: api.inspect_container(victim)["State"]["StartedAt"] == started,
        1.0,
        interval=0.1,
    )
    # From a thread: Podman 4.3's kill call waits until it sees the container exited
    # (a look every 250 ms), and one healed before that waits about 20 s.
    kill = threading.Thread(target=api.kill, args=(victim,), daemon=True)
    t0 = time.monotonic()
    kill.start()
    wait_for(
        "the same container started again",
        lambda: (
            cluster.converged("eng", 2)
            and api.inspect_container(victim)["State"]["StartedAt"] != started
        ),
        timeout=10,
        interval=0.01,
    )
    latency = time.monotonic() - t0
    kill.join(60)
    print(f"heal latency after engine restart: {latency * 1000:.0f} ms")
    assert latency < 2.0
