"""Pulls under faults (issue 17, point 5): a slow link, a link cut mid-pull, an engine
restart mid-pull, a registry that is away.

The engine pulls through a TCP proxy in front of a real registry (tests/support/
throttle.py), throttled to 1 MiB/s, with an image of 8 MiB of random bytes (about 9 s
to pull; tests/support/big_image.py). Each big image is pushed to the registry and every
local copy removed, so that its layer has to come over the proxy. healerd runs as a
process against the private dockerd, with a short `engine_timeout` where a test shows
that a pull longer than it is not cut off.
"""

from __future__ import annotations

import json
import re
import secrets
import statistics
import time
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from tests.support.big_image import MIB, build_big
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir, service_file
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for
from tests.support.registry import Registry
from tests.support.throttle import ThrottleProxy

RATE = MIB  # bytes per second: 1 s per MiB
BIG_MIB = 8
SERVICES = ("missing", "always")  # pull_policy, in the registry test
HOWS = ("kill", "rm")  # healed in place, replaced by a new container


@pytest.fixture
def proxy(registry: Registry) -> Iterator[ThrottleProxy]:
    p = ThrottleProxy(registry.port)
    p.start()
    yield p
    p.stop()


def push_big(api: docker.APIClient, registry: Registry, proxy: ThrottleProxy, tag: str) -> str:
    """A big image of its own in the registry, and no local copy of its layer: returns
    its reference through the proxy."""
    local = build_big(api, f"healerd-test/big:{tag}-{secrets.token_hex(3)}", BIG_MIB)
    registry.push(api, local, "big", tag)
    api.remove_image(local)
    return proxy.ref("big", tag)


def status_of(healerd: Healerd, service: str) -> dict[str, Any]:
    code, out, err = healerd.ctl("status", service, "-o", "json")
    assert code in (0, 1), err
    rows: list[dict[str, Any]] = json.loads(out)["services"]
    return next(r for r in rows if r["name"] == service)


def ids(cluster: Cluster, service: str) -> list[str]:
    return sorted(c["Id"] for c in cluster.containers(service))


def heal_time(
    cluster: Cluster, api: docker.APIClient, service: str, how: str = "kill", timeout: float = 30
) -> float:
    """Fail the service's one container and return the seconds until it runs again:
    `kill` (`docker kill`: the same container started again in place, no image needed)
    or `rm` (`docker rm -f`: a new container, made from the image)."""
    wait_for(f"{service} converged", lambda: cluster.converged(service, 1), timeout=30)
    victim = api.inspect_container(cluster.running(service)[0]["Id"])
    vid, started = victim["Id"], victim["State"]["StartedAt"]
    t0 = time.monotonic()
    if how == "kill":
        api.kill(vid)
    else:
        api.remove_container(vid, force=True)

    def healed() -> bool:
        if how == "kill":
            state = api.inspect_container(vid)["State"]
            return bool(state["Running"]) and state["StartedAt"] != started
        return cluster.converged(service, 1) and vid not in ids(cluster, service)

    wait_for(f"a heal of {service} ({how})", healed, timeout=timeout, interval=0.01)
    return time.monotonic() - t0


def pulls(healerd: Healerd, ref: str) -> int:
    """How many pulls of `ref` healerd began (its "SERVICE: pulling REF" lines)."""
    return len(re.findall(rf"controller: [\w-]+: pulling {re.escape(ref)}$", healerd.log(), re.M))


def test_a_slow_pull_does_not_block_heals_of_other_services(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    image: str,
    registry: Registry,
    proxy: ThrottleProxy,
) -> None:
    slow_ref = push_big(api, registry, proxy, "slow")
    # A pull three times longer than any one engine call may take: it must not be cut.
    config.settings("engine_timeout: 3s\n")
    config.write("fast.yaml", service_file(fast=image))
    healerd.start()
    wait_for("fast to run", lambda: cluster.converged("fast", 1), timeout=30)
    baseline = [heal_time(cluster, api, "fast") for _ in range(3)]

    proxy.throttle(RATE)
    config.write("slow.yaml", service_file(slow=slow_ref))
    t_pull = time.monotonic()
    wait_for("the pull under way", lambda: proxy.bytes_down > MIB, timeout=30)
    during = status_of(healerd, "slow")
    print(f"slow's status 1 MiB into its pull: {during['state']}: {during['reason']}")
    concurrent = [heal_time(cluster, api, "fast") for _ in range(3)]
    still_pulling = proxy.bytes_down < BIG_MIB * MIB and not cluster.containers("slow")
    wait_for("slow to run", lambda: cluster.converged("slow", 1), timeout=90)
    pull_seconds = time.monotonic() - t_pull

    base = statistics.median(baseline)
    print(
        f"heal of fast: alone {', '.join(f'{t:.2f}' for t in baseline)} s; during slow's "
        f"pull {', '.join(f'{t:.2f}' for t in concurrent)} s; the pull took {pull_seconds:.1f} s"
        f" at 1 MiB/s ({proxy.bytes_down / MIB:.1f} MiB over the proxy)"
    )
    assert still_pulling, "the heals were not measured during the pull"
    assert pull_seconds > 6.0, "the pull was not slow: was the layer already on disk?"
    assert max(concurrent) < 3 * base + 2.0
    assert during["state"] == "Progressing", during
    assert "pulling" in during["reason"] and slow_ref in during["reason"], during
    # engine_timeout (3 s) bounds the wait for the engine's next word, not the whole pull.
    assert pulls(healerd, slow_ref) == 1, healerd.log()


def test_a_pull_cut_mid_transfer_is_retried(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    image: str,
    registry: Registry,
    proxy: ThrottleProxy,
) -> None:
    once_ref = push_big(api, registry, proxy, "once")
    cut_ref = push_big(api, registry, proxy, "cut")
    config.write("fast.yaml", service_file(fast=image))
    healerd.start()
    wait_for("fast to run", lambda: cluster.converged("fast", 1), timeout=30)
    fast_before = ids(cluster, "fast")
    proxy.throttle(RATE)

    # 1. The link drops once and is back at once: the engine itself retries the layer
    # (resuming where it stopped), and healerd's one pull succeeds.
    config.write("once.yaml", service_file(once=once_ref))
    wait_for("the pull under way", lambda: proxy.bytes_down > 2 * MIB, timeout=30)
    assert proxy.drop() >= 1
    t_drop = time.monotonic()
    wait_for("once to run", lambda: cluster.converged("once", 1), timeout=90)
    print(f"one drop mid-pull: once ran {time.monotonic() - t_drop:.1f} s after it")
    assert pulls(healerd, once_ref) == 1

    # 2. The link drops and stays away: once the engine's own retries run out, the
    # service is ImagePullBackOff with the reason; when the link is back it runs within
    # the backoff.
    mark = proxy.bytes_down
    config.write("cut.yaml", service_file(cut=cut_ref))
    wait_for("the pull under way", lambda: proxy.bytes_down > mark + 2 * MIB, timeout=30)
    proxy.refuse()
    t_cut = time.monotonic()
    row = wait_for(
        "ImagePullBackOff after the cut",
        lambda: (r := status_of(healerd, "cut"))["state"] == "ImagePullBackOff" and r,
        timeout=180,
        interval=0.2,
    )
    print(f"dropped for good: ImagePullBackOff {time.monotonic() - t_cut:.1f} s after the cut")
    print(f"reason: {row['reason']}")
    assert cut_ref in row["reason"], row
    proxy.throttle(None)
    proxy.accept()
    t_back = time.monotonic()
    # When the next try is due: read from a status between tries. One read while a retry
    # that began before the link came back is under way shows no next_retry (it runs,
    # "pulling ..."); if that try fails, the next is a whole backoff step later.
    row = wait_for(
        "a status between tries",
        lambda: (
            (
                (r := status_of(healerd, "cut"))["next_retry"] is not None
                or r["state"] != "ImagePullBackOff"
            )
            and r
        ),
        timeout=30,
        interval=0.2,
    )
    retry_in = max(0.0, float(row["next_retry"] or time.time()) - time.time())
    wait_for("cut to run", lambda: cluster.converged("cut", 1), timeout=retry_in + 30)
    took = time.monotonic() - t_back
    print(f"link back: cut ran {took:.1f} s later (the backoff had {retry_in:.1f} s left)")
    assert took < retry_in + 15
    assert ids(cluster, "fast") == fast_before, "another service's container was touched"
    assert ids(cluster, "once") and len(cluster.containers("once")) == 1


@pytest.mark.engine_restart
def test_an_engine_restart_mid_pull_is_retried(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    image: str,
    dockerd: PrivateDockerd,
    registry: Registry,
    proxy: ThrottleProxy,
) -> None:
    ref = push_big(api, registry, proxy, "restart")
    config.write("fast.yaml", service_file(fast=image))
    healerd.start()
    wait_for("fast to run", lambda: cluster.converged("fast", 1), timeout=30)
    proxy.throttle(RATE)
    config.write("slow.yaml", service_file(slow=ref))
    wait_for("the pull under way", lambda: proxy.bytes_down > 2 * MIB, timeout=30)
    engine_log = dockerd.log_path.stat().st_size
    # No byte more while the engine stops: dockerd's stop waits up to its shutdown
    # timeout (15 s) for a container healerd started again meanwhile (its containers'
    # deaths look like any other), and the pull could finish within it.
    proxy.throttle(0)
    dockerd.stop()
    t_stop = time.monotonic()
    proxy.throttle(None)
    dockerd.start()
    wait_for(
        "both services after the engine restart",
        lambda: cluster.converged("slow", 1) and cluster.converged("fast", 1),
        timeout=120,
        ignore=(Exception,),
    )
    print(f"slow ran {time.monotonic() - t_stop:.1f} s after the engine was stopped")
    with open(dockerd.log_path, "rb") as f:
        f.seek(engine_log)
        retries = [
            line for line in f.read().decode(errors="replace").splitlines() if "etry" in line
        ]
    print("the engine's own retries:\n" + "\n".join(retries))
    log = healerd.log()
    assert pulls(healerd, ref) >= 2, log
    assert "failed unexpectedly" not in log, log
    assert healerd.alive()


def test_a_registry_away_never_stops_heals_from_local_images(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    image: str,
    registry: Registry,
    proxy: ThrottleProxy,
) -> None:
    registry.push(api, image, "app", "away")
    ref = proxy.ref("app", "away")
    config.settings("engine_timeout: 3s\n")
    config.write("missing.yaml", service_file(missing=ref))
    config.write("always.yaml", service_file("always", always=ref))
    healerd.start()
    wait_for(
        "both pulled and running",
        lambda: cluster.converged("missing", 1) and cluster.converged("always", 1),
        timeout=60,
    )
    assert pulls(healerd, ref) == 2

    # 1. A registry that answers nothing (it accepts, then silence). After a restart of
    # healerd `always` pulls again for its spec when it next makes a container (a start
    # in place needs no image). Its container removed while healerd was down: the pull
    # cannot finish, and the new container is made from the image on disk once
    # engine_timeout (3 s) passed without a word.
    proxy.throttle(0)
    healerd.stop()
    api.remove_container(cluster.running("always")[0]["Id"], force=True)
    t0 = time.monotonic()
    healerd.start()
    wait_for("always made again", lambda: cluster.converged("always", 1), timeout=30)
    made_again = time.monotonic() - t0
    assert "using the local image" in healerd.log()
    silent = {(s, how): heal_time(cluster, api, s, how) for s in SERVICES for how in HOWS}
    print(f"silent registry: always made again in {made_again:.2f} s; heals: {silent}")
    assert made_again < 3.0 + 10.0
    assert max(silent.values()) < 3.0 + 10.0
    assert max(silent[(s, "kill")] for s in SERVICES) < 5.0

    # 2. The registry and its proxy gone (connections refused): the same, with a pull
    # that fails at once.
    proxy.stop()
    registry.stop()
    away = {(s, how): heal_time(cluster, api, s, how) for s in SERVICES for how in HOWS}
    healerd.stop()
    api.remove_container(cluster.running("always")[0]["Id"], force=True)
    t0 = time.monotonic()
    healerd.start()
    wait_for("always made again", lambda: cluster.converged("always", 1), timeout=30)
    made_again = time.monotonic() - t0
    assert "using the local image" in healerd.log()
    after_restart = {(s, how): heal_time(cluster, api, s, how) for s in SERVICES for how in HOWS}
    print(
        f"registry away: heals {away}; always made again after a restart of healerd in "
        f"{made_again:.2f} s; heals after it {after_restart}"
    )
    assert made_again < 10.0
    assert max(away.values()) < 5.0
    assert max(after_restart.values()) < 5.0
