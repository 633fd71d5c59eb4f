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
from pathlib import Path

from tests.support.dockerd import CHAOS_POOL, PrivateDockerd


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
