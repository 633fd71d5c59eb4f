"""Rollouts, health, images and crash loops against a real dockerd (issue 3)."""

from __future__ import annotations

import re
import signal
import threading
import time

import docker
import pytest

from healerd.model import LABEL_SPEC_HASH
from tests.integration.harness import IMAGE
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for

HTTPD = '["httpd", "-f", "-p", "8080", "-h", "/www"]'


class Sampler:
    """Counts running containers of a service every 20 ms while a rollout goes on."""

    def __init__(self, cluster: Cluster, service: str) -> None:
        self.cluster, self.service = cluster, service
        self.lowest: int | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            n = len(self.cluster.running(self.service))
            self.lowest = n if self.lowest is None else min(self.lowest, n)
            self._stop.wait(0.02)

    def __enter__(self) -> Sampler:
        self._t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._t.join()


def hashes(cluster: Cluster, service: str) -> set[str]:
    return {c["Labels"][LABEL_SPEC_HASH] for c in cluster.containers(service)}


@pytest.mark.every_engine
def test_rolling_update_of_four_never_drops_below_four(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    config.service("roll.yaml", "roll", 4, environment="{VERSION: '1'}")
    healerd.start()
    wait_for("4 replicas", lambda: cluster.converged("roll", 4), timeout=30)
    (old_hash,) = hashes(cluster, "roll")
    config.service("roll.yaml", "roll", 4, environment="{VERSION: '2'}")
    with Sampler(cluster, "roll") as sampler:
        healerd.signal(signal.SIGHUP)
        wait_for(
            "all 4 on the new spec",
            lambda: cluster.converged("roll", 4) and old_hash not in hashes(cluster, "roll"),
            timeout=60,
        )
    print(f"rolling update: lowest number of running containers sampled: {sampler.lowest}")
    assert sampler.lowest is not None and sampler.lowest >= 4
    assert len(hashes(cluster, "roll")) == 1


def test_a_rollout_to_a_crashing_spec_halts_and_the_old_ones_keep_serving(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    config.service("halt.yaml", "halt", 3)
    healerd.start()
    wait_for("3 replicas", lambda: cluster.converged("halt", 3), timeout=30)
    olds = {c["Id"] for c in cluster.running("halt")}
    config.write(
        "halt.yaml",
        f"""\
        services:
          halt:
            image: {IMAGE}
            command: ["sh", "-c", "exit 3"]
            replicas: 3
            update_config: {{progress_deadline: 6s}}
        """,
    )
    with Sampler(cluster, "halt") as sampler:
        healerd.signal(signal.SIGHUP)
        wait_for(
            "the rollout to halt",
            lambda: (
                "halt: RolloutHalted" in healerd.log()
                or (
                    "halt: CrashLoopBackOff" in healerd.log()
                    and "progress deadline" in healerd.log()
                )
            ),
            timeout=30,
        )
        holds_for(
            "the old containers keep running",
            lambda: olds <= {c["Id"] for c in cluster.running("halt")},
            3.0,
        )
    assert sampler.lowest is not None and sampler.lowest >= 3
    line = next(
        ln
        for ln in healerd.log().splitlines()
        if "halt: RolloutHalted" in ln or "progress deadline" in ln
    )
    print(f"status: {line.split('healerd.controller: ')[-1]}")


@pytest.fixture
def bridge(api: docker.APIClient) -> str:
    """A user-defined bridge in the private engine, so that ports can be published."""
    name = "healerd-test-net"
    if not api.networks(names=[name]):
        api.create_network(name, driver="bridge")
    return name


def test_a_fixed_host_port_updates_stop_first_without_deadlock(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, bridge: str
) -> None:
    fields = {"command": HTTPD, "networks": f"[{bridge}]", "ports": '["127.0.0.1:18080:8080"]'}
    config.service("port.yaml", "port", 1, environment="{V: '1'}", **fields)
    healerd.start()
    wait_for("1 replica", lambda: cluster.converged("port", 1), timeout=30)
    (old_hash,) = hashes(cluster, "port")
    config.service("port.yaml", "port", 1, environment="{V: '2'}", **fields)
    healerd.signal(signal.SIGHUP)
    wait_for(
        "the new spec on the port",
        lambda: cluster.converged("port", 1) and old_hash not in hashes(cluster, "port"),
        timeout=30,
    )
    (c,) = cluster.running("port")
    assert any(p.get("PublicPort") == 18080 for p in c["Ports"])


def test_two_replicas_on_a_fixed_host_port_is_a_config_error(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    config.service("two.yaml", "two", 2, ports='["127.0.0.1:18081:8080"]')
    healerd.start()
    log = wait_for(
        "the config error",
        lambda: healerd.log() if "config error" in healerd.log() else "",
        timeout=10,
    )
    assert re.search(r"two\.yaml:\d+(:\d+)?: services\.two\.ports: .*fixed host port", log)
    assert cluster.containers("two") == []


def test_pull_policy_never_with_a_missing_image_blocks_only_that_service(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient
) -> None:
    config.write(
        "never.yaml",
        """\
        services:
          never:
            image: healerd-test/absent:1
            pull_policy: never
        """,
    )
    config.service("fine.yaml", "fine", 1)
    healerd.start()
    wait_for("fine runs", lambda: cluster.converged("fine", 1), timeout=30)
    wait_for("the reason", lambda: "never: ErrImageNeverPull" in healerd.log(), timeout=10)
    assert "image healerd-test/absent:1 is not present and pull_policy is never" in healerd.log()
    (victim,) = cluster.running("fine")
    started = health_of(api, victim["Id"])[0]
    t0 = time.monotonic()
    api.kill(victim["Id"])
    wait_for(
        "fine healed in place",
        lambda: cluster.converged("fine", 1) and health_of(api, victim["Id"])[0] != started,
        timeout=5,
        interval=0.01,
    )
    assert time.monotonic() - t0 < 2.0
    assert [c["Id"] for c in cluster.running("fine")] == [victim["Id"]]
    assert cluster.containers("never") == []


def health_of(api: docker.APIClient, cid: str) -> tuple[str, str]:
    """(when the container last started, its health status)."""
    state = api.inspect_container(cid)["State"]
    return state["StartedAt"], (state.get("Health") or {}).get("Status", "")


def test_unhealthy_is_restarted_in_place_after_the_grace_then_replaced_and_starting_is_left_alone(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient
) -> None:
    config.service(
        "sick.yaml",
        "sick",
        1,
        unhealthy_grace="2s",
        healthcheck=('{test: ["CMD", "test", "!", "-e", "/tmp/sick"], interval: 1s, retries: 1}'),
    )
    config.service(
        "slow.yaml",
        "slow",
        1,
        healthcheck=('{test: ["CMD", "false"], interval: 1s, retries: 1, start_period: 60s}'),
    )
    healerd.start()
    wait_for(
        "sick healthy",
        lambda: (
            cluster.converged("sick", 1) and "(healthy)" in cluster.running("sick")[0]["Status"]
        ),
        timeout=30,
    )
    wait_for("slow starting", lambda: cluster.running("slow"), timeout=30)
    (victim,) = cluster.running("sick")
    vid = victim["Id"]
    first_start = health_of(api, vid)[0]
    # The file that makes it sick is in its writable layer: a start in place keeps it.
    exec_id = api.exec_create(vid, ["touch", "/tmp/sick"])
    api.exec_start(exec_id)
    wait_for(
        "docker to call it unhealthy",
        lambda: health_of(api, vid) == (first_start, "unhealthy"),
        timeout=15,
        interval=0.1,
    )
    unhealthy_at = time.monotonic()
    second_start = wait_for(
        "a restart in place (the same container started again)",
        lambda: (t := health_of(api, vid)[0]) != first_start and t,
        timeout=20,
        interval=0.05,
    )
    in_place_after = time.monotonic() - unhealthy_at
    assert [c["Id"] for c in cluster.containers("sick", history=True)] == [vid], "nothing made"
    # Still sick, with no healthy check in between: past the grace again (and past its
    # crash-loop backoff: a second failure within `window` waits `delay`, 10 s), replaced
    # by a new container (a fresh writable layer, without the file), which is healthy.
    wait_for(
        "docker to call it unhealthy again",
        lambda: health_of(api, vid) == (second_start, "unhealthy"),
        timeout=15,
        interval=0.1,
    )
    unhealthy_again_at = time.monotonic()
    (new,) = wait_for(
        "a replacement",
        lambda: [c for c in cluster.running("sick") if c["Id"] != vid],
        timeout=40,
    )
    replaced_after = time.monotonic() - unhealthy_again_at
    print(
        f"unhealthy -> restarted in place after {in_place_after:.1f}s, unhealthy again -> "
        f"replaced after {replaced_after:.1f}s (grace 2s)"
    )
    assert in_place_after >= 1.5
    assert replaced_after >= 1.5
    assert [c["Id"] for c in cluster.history("sick")] == [vid]  # kept, stopped, as history
    wait_for(
        "the replacement healthy",
        lambda: health_of(api, new["Id"])[1] == "healthy",
        timeout=15,
        interval=0.1,
    )
    (slow,) = cluster.running("slow")
    assert "health: starting" in slow["Status"]
    holds_for(
        "the container in its start period is left alone",
        lambda: [c["Id"] for c in cluster.containers("slow")] == [slow["Id"]],
        3.0,
    )


def test_a_crash_loop_backs_off_and_a_neighbour_still_heals_in_two_seconds(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient
) -> None:
    config.write(
        "crash.yaml",
        f"""\
        services:
          crash:
            image: {IMAGE}
            command: ["sh", "-c", "exit 1"]
        """,
    )
    config.service("steady.yaml", "steady", 2)
    t0 = time.time()
    healerd.start()
    wait_for("steady", lambda: cluster.converged("steady", 2), timeout=30)
    latencies = []
    deadline = time.monotonic() + 35
    while time.monotonic() < deadline:
        victim = cluster.running("steady")[0]["Id"]
        started = health_of(api, victim)[0]
        k0 = time.monotonic()
        api.kill(victim)
        wait_for(
            "steady healed in place",
            lambda v=victim, t=started: (
                cluster.converged("steady", 2) and health_of(api, v)[0] != t
            ),
            timeout=10,
            interval=0.01,
        )
        latencies.append(time.monotonic() - k0)
        time.sleep(5)  # pacing between disruptions, not a wait for an outcome

    # The crash loop is restarted in place: one create, then starts of that container,
    # each counted in its restart count (state_dir/runs.json, not a label), as `healerctl
    # get` shows it (read until the two agree: a start may fall between the two reads).
    def restarts_and_starts() -> tuple[int, int] | None:
        (row,) = healerd.api("/v1/containers", service="crash")["containers"]
        n = int(row["restarts"]), cluster.count_events("crash", "start", t0)
        return n if n[0] == n[1] - 1 else None

    counted = wait_for("the restart count to match the starts", restarts_and_starts)
    assert counted is not None
    restarts, starts = counted
    creates = cluster.count_events("crash", "create", t0)
    print(
        f"crash loop over 35 s: {creates} create, {starts} starts, {restarts} restarts; "
        f"neighbour heal latencies: {', '.join(f'{s * 1000:.0f}ms' for s in latencies)}"
    )
    assert creates == 1
    assert [c["Id"] for c in cluster.containers("crash", history=True)] == [
        c["Id"] for c in cluster.containers("crash")
    ], "no history: the same container each time"
    # Started at 0, then again at once, 10 s and 30 s later (70 s is past the 35 s): three
    # or four starts, not a hundred (a start every 0.3 s without the backoff).
    assert 3 <= starts <= 5
    # The steady ones are healed in place too: never a create after the first two.
    assert cluster.count_events("steady", "create", t0) == 2
    assert max(latencies) < 2.0
    log = healerd.log()
    assert re.search(
        r"crash: CrashLoopBackOff .*back-off \d+s restarting failed container "
        r"crash-\w+-\w+, exit code 1, \d+ restart\(s\) so far; next try in \d+s",
        log,
    )


def test_env_file_values_reach_the_container_roll_on_change_and_are_never_logged(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient
) -> None:
    secrets = config.root / "secrets.env"
    secrets.write_text("# db credentials\nDB_PASSWORD=hunter2-first\n")
    secrets.chmod(0o600)
    config.service("envf.yaml", "envf", 1, env_file=str(secrets))
    t0 = time.time()
    healerd.start()
    wait_for("1 replica", lambda: cluster.converged("envf", 1), timeout=30)
    (c,) = cluster.running("envf")
    assert "DB_PASSWORD=hunter2-first" in api.inspect_container(c["Id"])["Config"]["Env"]
    secrets.write_text("DB_PASSWORD=hunter2-second\n")
    healerd.signal(signal.SIGHUP)
    wait_for(
        "a container with the new value",
        lambda: (
            [
                x
                for x in cluster.running("envf")
                if "DB_PASSWORD=hunter2-second" in api.inspect_container(x["Id"])["Config"]["Env"]
            ]
            and cluster.converged("envf", 1)
        ),
        timeout=30,
    )
    (new_hash,) = hashes(cluster, "envf")
    holds_for(
        "no churn: one container with the current hash",
        lambda: cluster.converged("envf", 1, new_hash),
        1.5,
    )
    assert "hunter2" not in healerd.log(since_start=False)
    assert cluster.count_events("envf", "create", t0) == 2
