"""The fault matrix (FAULTS.md): healerd against an engine that misbehaves.

Most tests put tests/integration/faultproxy.py between healerd and the private dockerd,
to make the engine slow, failing, unreachable, or its event stream cut or hung. Every
test also checks that the unowned container beside it stays untouched (the `foreign`
fixture) and cleans up its containers (the `cluster` fixture).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import docker
import pytest

from healerd.cli.client import Client, DaemonUnreachable
from healerd.model import LABEL_SERVICE, LABEL_SPEC_HASH
from tests.integration.faultproxy import CREATE, EVENTS, LIST, START, FaultProxy, Request
from tests.integration.harness import IMAGE, started_again
from tests.support.busybox_image import COMMAND, build
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import DISK_POOL, PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for

# -- fixtures and helpers ---------------------------------------------------------------

# New containers count as available at once, so that "Converged" need not wait 5 s.
READY_NOW = "{min_ready_seconds: 0s}"


@pytest.fixture
def proxy(dockerd: PrivateDockerd) -> Iterator[FaultProxy]:
    """A fault proxy in front of the private dockerd, not yet listening."""
    short = Path(tempfile.mkdtemp(prefix="hfp-"))  # unix socket paths are short
    p = FaultProxy(short / "engine.sock", dockerd.sock)
    yield p
    p.stop()
    shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def healerd_proxied(
    config: ConfigDir,
    proxy: FaultProxy,
    cluster: Cluster,
    foreign: str,
    tmp_path: Path,
) -> Iterator[Healerd]:
    """healerd (not started) whose engine is the fault proxy."""
    h = Healerd(config.root, proxy.url, tmp_path / "healerd.log")
    yield h
    # No fault may slow down the teardown.
    proxy.clear()
    proxy.release_events()
    proxy.accept()
    if h.alive():
        h.stop()
    print(f"--- healerd log ({h.log_path}) tail ---\n" + h.log(since_start=False)[-4000:])


def settings(config: ConfigDir, text: str) -> None:
    (config.root / "healerd.yaml").write_text(text)


def status(h: Healerd, service: str) -> dict[str, Any] | None:
    """The service's entry of GET /v1/status, None while healerd does not answer."""
    try:
        doc = Client(str(h.config_dir / "healerd.sock"), timeout=5).get("/v1/status")
    except DaemonUnreachable:
        return None
    return next((s for s in doc["services"] if s["name"] == service), None)


def state_is(h: Healerd, service: str, state: str, reason: str = "") -> dict[str, Any]:
    """The status entry if the service is in `state` with `reason` in its reason, else {}."""
    st = status(h, service)
    if st is not None and st["state"] == state and reason in st["reason"]:
        return st
    return {}


def wait_state(
    h: Healerd, service: str, state: str, reason: str = "", timeout: float = 10.0
) -> dict[str, Any]:
    return wait_for(
        f"status {state} {reason!r} for {service}",
        lambda: state_is(h, service, state, reason),
        timeout=timeout,
        interval=0.1,
    )


def start_converged(
    proxy: FaultProxy,
    config: ConfigDir,
    h: Healerd,
    cluster: Cluster,
    name: str,
    replicas: int,
    **fields: Any,
) -> None:
    """The proxy up, one service declared, healerd started through the proxy, converged."""
    proxy.start()
    config.service(f"{name}.yaml", name, replicas, **fields)
    h.start()
    wait_for(f"{replicas} replicas", lambda: cluster.converged(name, replicas), timeout=20)


def ids(cluster: Cluster, service: str) -> set[str]:
    return {c["Id"] for c in cluster.containers(service)}


def running_ids(cluster: Cluster, service: str) -> set[str]:
    return {c["Id"] for c in cluster.running(service)}


def started_at(api: docker.APIClient, cid: str) -> str:
    return str(api.inspect_container(cid)["State"]["StartedAt"])


def stays_dead(api: docker.APIClient, cid: str) -> bool:
    """The container exists and is not running (nobody started it again)."""
    return not api.inspect_container(cid)["State"]["Running"]


def hashes(cluster: Cluster, service: str) -> set[str]:
    return {c["Labels"][LABEL_SPEC_HASH] for c in cluster.containers(service)}


class MaxRunning:
    """Samples the number of running containers of a service every 20 ms (engine errors,
    as during an engine restart, are skipped) and keeps the highest."""

    def __init__(self, url: str, service: str) -> None:
        self.api = docker.APIClient(base_url=url, version="1.41", timeout=5)
        self.service = service
        self.highest = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                cs = self.api.containers(filters={"label": f"{LABEL_SERVICE}={self.service}"})
                self.highest = max(self.highest, len(cs))
            self._stop.wait(0.02)

    def __enter__(self) -> MaxRunning:
        self._t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._t.join()
        self.api.close()


# -- the engine unreachable, restarting, slow or failing ------------------------------------


def test_engine_down_at_start_is_waited_for_logged_rarely_and_healed_when_it_comes(
    healerd_proxied: Healerd, config: ConfigDir, cluster: Cluster, proxy: FaultProxy
) -> None:
    # A long key backoff (10 s doubling): what brings healerd back must be the engine
    # answering again, not the next retry of a key.
    settings(config, "backoff_base: 10s\n")
    config.service("late.yaml", "late", 2, update_config=READY_NOW)
    healerd_proxied.start()  # "ready" without an engine: the socket does not even exist
    wait_state(healerd_proxied, "late", "EngineUnreachable", timeout=10)
    holds_for("healerd waits, alive", healerd_proxied.alive, 2.0)
    log = healerd_proxied.log()
    complaints = log.count("cannot list containers") + log.count("engine event stream lost")
    print(f"log lines about the missing engine in its first 2 s and more: {complaints}")
    assert 1 <= complaints <= 3, "the engine's absence is logged, but not on every retry"

    proxy.start()
    t0 = time.monotonic()
    wait_for("2 replicas once the engine answers", lambda: cluster.converged("late", 2), 15)
    latency = time.monotonic() - t0
    print(f"engine answering -> converged in {latency:.2f}s")
    # The event watcher reconnects within 5 s (its backoff cap) and makes healerd look
    # at once, whatever the keys' own backoff (here their next retry is 10 s after start).
    assert latency < 5.5
    wait_state(healerd_proxied, "late", "Converged", timeout=5)
    assert "engine reachable again: resyncing every service" in healerd_proxied.log()


@pytest.mark.engine_restart
def test_engine_restart_mid_rollout_ends_converged_on_the_new_spec(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, dockerd: PrivateDockerd
) -> None:
    config.service(
        "mid.yaml", "mid", 3, environment="{V: '1'}", update_config=("{min_ready_seconds: 1s}")
    )
    healerd.start()
    wait_for("3 replicas", lambda: cluster.converged("mid", 3), timeout=30)
    (old,) = hashes(cluster, "mid")
    config.service(
        "mid.yaml", "mid", 3, environment="{V: '2'}", update_config=("{min_ready_seconds: 1s}")
    )
    with MaxRunning(dockerd.url, "mid") as sampler:
        healerd.signal(signal.SIGHUP)
        wait_for("the rollout under way", lambda: hashes(cluster, "mid") - {old}, timeout=15)
        dockerd.restart()
        wait_for(
            "3 replicas of the new spec",
            lambda: cluster.converged("mid", 3) and old not in hashes(cluster, "mid"),
            timeout=40,
        )
        holds_for("exactly 3, all new", lambda: cluster.converged("mid", 3), 1.0)
    print(f"engine restart mid-rollout: at most {sampler.highest} running at once")
    assert sampler.highest <= 3 + 1, "never more than replicas + parallelism running"
    assert healerd.alive()


def test_a_slow_engine_still_converges_without_duplicate_creates(
    healerd_proxied: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    proxy: FaultProxy,
) -> None:
    proxy.delay((1.0, 2.0))  # every answer, the event stream's included
    proxy.start()
    config.service("slow.yaml", "slow", 3)
    t0 = time.time()
    healerd_proxied.start()
    wait_for("3 replicas on a slow engine", lambda: cluster.converged("slow", 3), timeout=30)
    holds_for(
        "exactly 3 creates",
        lambda: cluster.converged("slow", 3) and cluster.count_events("slow", "create", t0) == 3,
        0.5,
    )
    assert len(proxy.seen(CREATE)) == 3
    assert "failed" not in healerd_proxied.log()


def test_500s_on_create_degrade_back_off_and_recover_touching_nothing(
    healerd_proxied: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    proxy: FaultProxy,
    api: docker.APIClient,
) -> None:
    start_converged(proxy, config, healerd_proxied, cluster, "five", 2, update_config=READY_NOW)
    survivor, victim = sorted(running_ids(cluster, "five"))
    message = "faultproxy: injected failure (create)"
    rule = proxy.fail(CREATE, 500, message)
    # A kill needs no create: the same container starts again in place.
    started = started_at(api, victim)
    t0 = time.monotonic()
    api.kill(victim)
    wait_for("the kill healed in place", lambda: started_again(api, victim, started), 5)
    assert not proxy.seen(CREATE, since=t0)
    wait_state(healerd_proxied, "five", "Converged", timeout=5)
    # A removal does: its replacement's create fails.
    t0 = time.monotonic()
    api.remove_container(victim, force=True)
    st = wait_state(healerd_proxied, "five", "Degraded", message, timeout=10)
    print(f"status: {st['state']}: {st['reason']}")
    holds_for("the survivor untouched", lambda: running_ids(cluster, "five") == {survivor}, 1.5)
    tries = len(proxy.seen(CREATE, since=t0))
    print(f"create attempts in {time.monotonic() - t0:.1f}s of 500s: {tries}")
    assert 3 <= tries <= 12, "backing off exponentially, neither giving up nor hammering"
    assert re.search(
        r"five: create failed: create five-\w+-\w+: " + re.escape(message), healerd_proxied.log()
    )
    proxy.clear(rule)
    wait_for("healed once creates work", lambda: cluster.converged("five", 2), timeout=10)
    assert survivor in running_ids(cluster, "five")
    wait_state(healerd_proxied, "five", "Converged", timeout=5)


def test_500s_on_list_wait_say_so_and_recover_without_acting_blind(
    healerd_proxied: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    proxy: FaultProxy,
    api: docker.APIClient,
) -> None:
    start_converged(proxy, config, healerd_proxied, cluster, "blind", 2)
    survivor, victim = sorted(running_ids(cluster, "blind"))
    message = "faultproxy: injected failure (list)"
    proxy.fail(LIST, 500, message)
    # healerd learns the engine cannot list (a kill's pass may otherwise act on the look
    # made a moment before the kill, folded with the death: healerd.core.hints).
    healerd_proxied.ctl("reconcile", "blind")
    st = wait_state(healerd_proxied, "blind", "EngineUnreachable", timeout=10)
    print(f"status: {st['state']}: {st['reason']}")
    t0 = time.monotonic()
    api.kill(victim)
    holds_for(
        "nothing done without a list",
        lambda: not proxy.seen(CREATE, since=t0) and not proxy.seen(START, since=t0),
        1.5,
    )
    assert running_ids(cluster, "blind") == {survivor}
    assert f"cannot list containers: list containers: {message}" in healerd_proxied.log()
    proxy.clear()
    wait_for("healed once lists work", lambda: cluster.converged("blind", 2), timeout=10)
    assert running_ids(cluster, "blind") == {survivor, victim}, "healed in place"


# -- the event stream -----------------------------------------------------------------------


def test_a_cut_event_stream_is_reconnected_and_a_kill_meanwhile_is_healed(
    healerd_proxied: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    proxy: FaultProxy,
    api: docker.APIClient,
) -> None:
    start_converged(proxy, config, healerd_proxied, cluster, "cut", 2)
    wait_for("the event stream open", lambda: proxy.events_streams() == 1, timeout=5)
    rule = proxy.fail(EVENTS, 500, "faultproxy: no events for now")  # reconnects fail
    assert proxy.cut_events() == 1
    victim = next(iter(running_ids(cluster, "cut")))
    started = started_at(api, victim)
    api.kill(victim)
    # Nothing tells healerd (no event, the resync is 30 s away)...
    holds_for("not healed while the stream is down", lambda: stays_dead(api, victim), 0.5)
    assert "engine event stream lost" in healerd_proxied.log()
    proxy.clear(rule)
    # ... until the stream is back: then every service is looked at.
    wait_for(
        "healed in place after the reconnect",
        lambda: cluster.converged("cut", 2) and started_again(api, victim, started),
        timeout=10,
    )
    assert "event stream back: resyncing every service" in healerd_proxied.log()


def test_a_hung_event_stream_is_covered_by_the_periodic_resync(
    healerd_proxied: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    proxy: FaultProxy,
    api: docker.APIClient,
) -> None:
    settings(config, "resync_interval: 2s\n")
    start_converged(proxy, config, healerd_proxied, cluster, "hung", 2)
    wait_for("the event stream open", lambda: proxy.events_streams() == 1, timeout=5)
    proxy.hold_events()  # open, silent: no error for healerd to notice
    victim = next(iter(running_ids(cluster, "hung")))
    started = started_at(api, victim)
    t0 = time.monotonic()
    api.kill(victim)
    wait_for(
        "healed in place by the resync",
        lambda: cluster.converged("hung", 2) and started_again(api, victim, started),
        timeout=10,
    )
    print(f"kill under a hung event stream healed in {time.monotonic() - t0:.2f}s")
    log = healerd_proxied.log()
    assert f"event die hung {victim[:12]}" not in log, "the die event must not have arrived"


# -- the engine's disk ---------------------------------------------------------------------


@pytest.fixture
def small_dockerd(dockerd: PrivateDockerd) -> Iterator[PrivateDockerd]:
    """A second private dockerd whose data root is a 64 MiB tmpfs (overlay2 works on it)."""
    parent = Path("/var/lib/healerd-test-disk")
    PrivateDockerd.reap_stale(parent)
    root = parent / f"run-{os.getpid()}"
    d = PrivateDockerd(root, bridge_prefix="hdd", pool=DISK_POOL)  # not the main engine's
    (root / "data").mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "healerd-test-disk", str(root / "data")],
        check=True,
    )
    try:
        d.start()
        yield d
    finally:
        d.teardown()  # unmounts the tmpfs too


def test_a_full_disk_fails_heals_clearly_and_touches_no_running_container(
    small_dockerd: PrivateDockerd, config: ConfigDir, tmp_path: Path
) -> None:
    api = small_dockerd.client()
    build(api, IMAGE)
    cluster = Cluster(api)
    unowned = api.create_container(IMAGE, COMMAND, name="unowned", stop_timeout=1)["Id"]
    api.start(unowned)
    started = api.inspect_container(unowned)["State"]["StartedAt"]
    h = Healerd(config.root, small_dockerd.url, tmp_path / "healerd.log")
    config.service("disk.yaml", "disk", 3)
    data_root = Path(api.info()["DockerRootDir"])
    filler = data_root / "filler"
    try:
        h.start()
        wait_for("3 replicas", lambda: cluster.converged("disk", 3), timeout=20)
        victim, *survivors = sorted(running_ids(cluster, "disk"))
        with open(filler, "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * (1 << 20))
        api.kill(victim)
        # The start in place fails with the engine's words; then the service either
        # retries (Degraded, then CrashLoopBackOff: a refused start backs off as a crash)
        # or, seeing the disk under pressure, waits for room.
        st = wait_for(
            "a status that names the full disk",
            lambda: (
                state_is(h, "disk", "Degraded", "no space left on device")
                or state_is(h, "disk", "CrashLoopBackOff", "no space left on device")
                or state_is(h, "disk", "WaitingForResources", "disk pressure")
            ),
            timeout=10,
            interval=0.1,
        )
        print(f"status: {st['state']}: {st['reason']}")
        # With its disk full the engine cannot write the victim's new state: its list may
        # go on showing it running. Either way: no new container, the others untouched.
        holds_for(
            "the running ones untouched, no replacement",
            lambda: (
                set(survivors) <= running_ids(cluster, "disk") <= {*survivors, victim}
                and ids(cluster, "disk") == {*survivors, victim}
            ),
            2.0,
        )
        assert re.search(
            r"disk: start failed: start disk-\w+-\w+: .*no space left on device", h.log()
        )
        disk = Client(str(config.root / "healerd.sock")).get("/v1/status")["host"]["disk"]
        assert disk["path"] == str(data_root) and disk["used_percent"] > 99
        filler.unlink()
        wait_for("3 replicas once there is room", lambda: cluster.converged("disk", 3), 20)
        assert ids(cluster, "disk") == {*survivors, victim}, "the victim healed in place"
        assert api.inspect_container(unowned)["State"]["StartedAt"] == started
    finally:
        with contextlib.suppress(FileNotFoundError):
            filler.unlink()
        if h.alive():
            h.stop()
        print(f"--- healerd log tail ---\n{h.log(since_start=False)[-3000:]}")
        for c in api.containers(all=True):
            api.remove_container(c["Id"], force=True)
        api.close()


# -- names, labels and images ----------------------------------------------------------------


def test_a_foreign_container_squatting_the_chosen_name_is_left_alone(
    healerd_proxied: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    proxy: FaultProxy,
    api: docker.APIClient,
) -> None:
    squatted: list[str] = []

    def squat(request: Request) -> None:
        # Just before healerd's create reaches the engine, someone takes that very name.
        (name,) = parse_qs(urlsplit(request.target).query)["name"]
        cid = api.create_container(IMAGE, COMMAND, name=name, stop_timeout=1)["Id"]
        api.start(cid)
        squatted.append(cid)

    proxy.before(CREATE, squat, times=1)
    proxy.start()
    config.service("name.yaml", "name", 1)
    healerd_proxied.start()
    try:
        wait_for("1 replica under another name", lambda: cluster.converged("name", 1), 20)
        (squatter,) = squatted
        info = api.inspect_container(squatter)
        (mine,) = cluster.containers("name")
        assert mine["Names"] != [info["Name"]]
        assert info["State"]["Running"] and not info["Config"]["Labels"]
        assert len(proxy.seen(CREATE)) == 2, "one 409, one create under a fresh name"
        holds_for(
            "the squatter keeps running",
            lambda: api.inspect_container(squatter)["State"]["Running"],
            1.0,
        )
    finally:
        for cid in squatted:
            api.remove_container(cid, force=True)


def test_containers_with_forged_healerd_labels_made_before_healerd_are_adopted(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient
) -> None:
    """Made before the host key existed, they cannot be told from a healerd's that had no
    signatures (an upgrade): trusted once, as they are. The declared one of another spec
    is rolled, the undeclared one removed. (After the key, forged labels are left alone:
    tests/integration/test_ownership.py.)"""
    forged = {
        svc: api.create_container(
            IMAGE, COMMAND, labels={LABEL_SERVICE: svc, LABEL_SPEC_HASH: "forged"}, stop_timeout=1
        )["Id"]
        for svc in ("forge", "forge-orphan")
    }
    for cid in forged.values():
        api.start(cid)
    config.service("forge.yaml", "forge", 1, update_config=READY_NOW)
    time.sleep(1.05 - time.time() % 1)  # the key is born in a later second (clock alignment)
    healerd.start()
    wait_for(
        "the forged ones replaced (declared) and removed (undeclared)",
        lambda: (
            cluster.converged("forge", 1)
            and hashes(cluster, "forge") != {"forged"}
            and not cluster.containers("forge-orphan")
        ),
        timeout=20,
    )
    assert not set(forged.values()) & (ids(cluster, "forge") | ids(cluster, "forge-orphan"))


# -- healerd itself killed, stopped, or without its config -----------------------------------


def test_healerd_killed_mid_action_restarts_to_exactly_the_desired_containers(
    healerd_proxied: Healerd,
    cluster: Cluster,
    config: ConfigDir,
    proxy: FaultProxy,
    dockerd: PrivateDockerd,
) -> None:
    proxy.start()
    slow = proxy.delay(1.5, CREATE)  # the engine creates at once; healerd hears it late
    fast = "{parallelism: 2, min_ready_seconds: 0s}"
    config.service("kill.yaml", "kill", 4, update_config=fast)
    healerd_proxied.start()
    wait_for("creates under way", lambda: len(cluster.containers("kill")) >= 2, timeout=20)
    healerd_proxied.kill9()
    left = cluster.containers("kill")
    print(f"SIGKILL mid-create left {len(left)} containers: {sorted(c['State'] for c in left)}")
    proxy.clear(slow)
    healerd_proxied.start()
    wait_for("exactly 4 running", lambda: cluster.converged("kill", 4), timeout=30)
    holds_for("no leftover, no duplicate", lambda: cluster.converged("kill", 4), 1.0)

    # Again in the middle of a rolling update.
    (old,) = hashes(cluster, "kill")
    config.service("kill.yaml", "kill", 4, update_config=fast, environment="{V: '2'}")
    slow = proxy.delay(1.5, CREATE)
    with MaxRunning(dockerd.url, "kill") as sampler:
        healerd_proxied.signal(signal.SIGHUP)
        wait_for("a new container", lambda: hashes(cluster, "kill") - {old}, timeout=15)
        healerd_proxied.kill9()
        proxy.clear(slow)
        healerd_proxied.start()
        wait_for(
            "4 of the new spec",
            lambda: cluster.converged("kill", 4) and old not in hashes(cluster, "kill"),
            timeout=30,
        )
        holds_for("no leftover, no duplicate", lambda: cluster.converged("kill", 4), 1.0)
    print(f"SIGKILL mid-rollout: at most {sampler.highest} running at once")
    assert sampler.highest <= 4 + 2, "never more than replicas + parallelism"


def test_sigstop_then_sigcont_heals_what_happened_meanwhile(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient
) -> None:
    config.service("stop.yaml", "stop", 2)
    healerd.start()
    wait_for("2 replicas", lambda: cluster.converged("stop", 2), timeout=20)
    victim = next(iter(running_ids(cluster, "stop")))
    started = started_at(api, victim)
    healerd.signal(signal.SIGSTOP)
    try:
        api.kill(victim)
        holds_for("nobody heals while healerd is stopped", lambda: stays_dead(api, victim), 0.5)
    finally:
        healerd.signal(signal.SIGCONT)
    t0 = time.monotonic()
    wait_for(
        "healed in place after SIGCONT",
        lambda: cluster.converged("stop", 2) and started_again(api, victim, started),
        10,
    )
    print(f"SIGCONT -> healed in {time.monotonic() - t0:.2f}s")
    assert time.monotonic() - t0 < 2.0


def test_a_vanished_config_dir_removes_nothing_and_its_return_changes_nothing(
    healerd: Healerd, cluster: Cluster, config: ConfigDir
) -> None:
    config.service("gone.yaml", "gone", 2, update_config=READY_NOW)
    healerd.start()
    wait_for("2 replicas", lambda: cluster.converged("gone", 2), timeout=20)
    before = ids(cluster, "gone")
    away = config.root / "conf.d.away"
    config.conf_d.rename(away)
    healerd.signal(signal.SIGHUP)
    wait_for(
        "the warning",
        lambda: "does not exist: no services declared, none removed" in healerd.log(),
        timeout=10,
    )
    holds_for("both kept running", lambda: running_ids(cluster, "gone") == before, 1.0)
    away.rename(config.conf_d)
    healerd.signal(signal.SIGHUP)
    wait_state(healerd, "gone", "Converged", timeout=10)
    holds_for("the same two containers", lambda: ids(cluster, "gone") == before, 1.0)


def test_a_second_healerd_at_another_address_of_the_same_engine_is_refused(
    healerd: Healerd,
    config: ConfigDir,
    proxy: FaultProxy,
    tmp_path: Path,
    cluster: Cluster,
    api: docker.APIClient,
) -> None:
    config.service("one.yaml", "one", 1)
    healerd.start()
    proxy.start()
    second = Healerd(config.root, proxy.url, tmp_path / "second.log")
    try:
        with pytest.raises(AssertionError, match="exited at start"):
            second.start("--socket", str(tmp_path / "second.sock"))
    finally:
        if second.alive():
            second.kill9()
    assert second.proc is not None and second.proc.returncode == 3
    assert "already manages the engine " in second.log() and "refusing" in second.log()
    # The first one keeps healing.
    (victim,) = cluster.running("one")
    started = started_at(api, victim["Id"])
    api.kill(victim["Id"])
    wait_for(
        "one healed in place by the first healerd",
        lambda: started_again(api, victim["Id"], started),
        timeout=10,
    )
