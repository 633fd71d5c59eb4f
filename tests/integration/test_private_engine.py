"""The test engines themselves: a private dockerd that dies leaves no bridge on the
host, and never takes the host engine's docker0 with it.

CI once failed before the chaos soak began: a bridge that a dead private dockerd had
left behind covered the soak's whole address pool. And with `--default-address-pool`, a
private dockerd started a second time deleted docker0, so the systemd test's container
(on the host engine's default bridge) could not start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import engines
from tests.support.dockerd import CHAOS_POOL, PrivateDockerd
from tests.support.polling import wait_for
from tests.support.processes import alive


def _bridges() -> set[str]:
    out = subprocess.run(
        ["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[1].rstrip(":") for line in out.splitlines()}


def test_a_killed_engine_leaves_no_network_bridge_and_docker0_stays() -> None:
    root = Path("/var/lib/healerd-test-engine") / f"run-{os.getpid()}"
    d = PrivateDockerd(root, bridge_prefix="hde", pool=CHAOS_POOL)
    before = _bridges() & {"docker0"}  # other suites' bridges may come and go meanwhile
    d.start()
    try:
        client = d.client()
        ids = [client.create_network(f"leak{i}", driver="bridge")["Id"] for i in range(3)]
        client.close()
        made = {f"br-{i[:12]}" for i in ids}
        assert made <= _bridges()
        d.stop()
        d.start()  # a second start on the same data root (the soak restarts its engine)
        assert before <= _bridges(), f"the engine's restart deleted {before - _bridges()}"
        d.kill()  # no teardown: the networks stay in the engine's store
    finally:
        d.stop()
        d.remove()
    left = {b for b in _bridges() if b in made or b == d.bridge}
    assert not left and before <= _bridges(), (left, before)
    assert not root.exists()


CHILD = """
import os, sys
from pathlib import Path
from tests.support.busybox_image import COMMAND, build
from tests.support.chrootdockerd import ChrootDockerd

d = ChrootDockerd(Path(sys.argv[1]) / f"run-{os.getpid()}")
d.start()
api = d.client(timeout=60)
cid = api.create_container(build(api), COMMAND, name="left-running")["Id"]
api.start(cid)
net = api.create_network("left-behind", driver="bridge")["Id"]
print(d.root, d.bridge, f"br-{net[:12]}", api.inspect_container(cid)["State"]["Pid"])
d.proc.kill()  # the engine dies with the run: no teardown
os._exit(0)
"""


@pytest.mark.every_engine
@pytest.mark.skipif(engines.kind() != "docker26", reason="HEALERD_TEST_ENGINE=docker26 only")
def test_a_docker26_engine_of_a_run_that_died_is_reaped_with_all_it_left() -> None:
    """What ChrootDockerd leaves when its run dies (dockerd SIGKILLed, a container and a
    network bridge left): PrivateDockerd.reap_stale, as the next run's conftest calls it,
    stops every process rooted there, deletes the bridges and the root, and leaves no
    mount on the host (dockerd's are in a mount namespace of its own)."""
    parent = Path("/var/lib/healerd-test-engine")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(parent)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    root_s, bridge, net_bridge, pid_s = done.stdout.split()
    root, pid = Path(root_s), int(pid_s)
    assert alive(pid) and {bridge, net_bridge} <= _bridges()
    assert root in PrivateDockerd.reap_stale(parent)
    wait_for("the container's process gone", lambda: not alive(pid), timeout=10)
    assert not root.exists()
    assert not {bridge, net_bridge} & _bridges()
    with open("/proc/self/mounts") as f:
        assert not [line for line in f if root_s in line]
