"""The test engines themselves: an engine that dies leaves no bridge on the host.

CI once failed before the chaos soak began: a bridge that a dead private dockerd had
left behind covered the soak's whole address pool. These hold the support code to the
rule that every network a private engine makes comes from its own pool and goes with it.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path

from tests.support.dockerd import CHAOS_POOL, NETWORK_POOLS, PrivateDockerd


def _bridges() -> dict[str, ipaddress.IPv4Network]:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "type", "bridge"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {
        line.split()[1]: ipaddress.IPv4Network(line.split()[3], strict=False)
        for line in out.splitlines()
    }


def test_a_killed_engine_leaves_no_network_bridge(tmp_path: Path) -> None:
    root = Path("/var/lib/healerd-test-engine") / f"run-{os.getpid()}"
    d = PrivateDockerd(root, bridge_prefix="hde", pool=CHAOS_POOL)
    before = set(_bridges())
    d.start()
    try:
        client = d.client()
        ids = [client.create_network(f"leak{i}", driver="bridge")["Id"] for i in range(3)]
        client.close()
        made = {f"br-{i[:12]}" for i in ids}
        bridges = _bridges()
        pool, size = NETWORK_POOLS[CHAOS_POOL]
        assert made <= set(bridges), bridges
        for name in made:  # from the engine's own pool, a /24 each, never a /16 of 172.x
            assert bridges[name].subnet_of(pool) and bridges[name].prefixlen == size
        d.kill()  # no teardown: the networks stay in the engine's store
    finally:
        d.stop()
        d.remove()
    assert set(_bridges()) <= before, set(_bridges()) - before
    assert not root.exists()
