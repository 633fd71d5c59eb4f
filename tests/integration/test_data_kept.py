"""Nothing lost across a heal (issue 14), on a real dockerd: a service's anonymous volume
(declared without a source) and an image's VOLUME keep their data through every kind of
heal, no volume is left behind, and failed containers stay as history for their logs."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any

import docker
import pytest

from tests.support.busybox_image import build
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for

VOL_IMAGE = "healerd-test/busybox-vol:1"
# Exits 3 (after a last line) once /data/crash appears; a TERM ends it at once.
CRASHABLE = [
    "sh",
    "-c",
    "trap 'exit 0' TERM; echo started; "
    "while :; do if [ -f /data/crash ]; then rm /data/crash; echo last words; exit 3; fi; "
    "sleep 0.2; done",
]
SERVICES = ("anon", "imgvol")


def write_stack(config: ConfigDir, image: str) -> None:
    common = [
        f"command: {json.dumps(CRASHABLE)}",
        "stop_grace_period: 2s",
        "unhealthy_grace: 0s",
        "restart_policy: {delay: 1s, max_delay: 2s}",
        'healthcheck: {test: ["CMD", "sh", "-c", "test ! -f /tmp/sick"], interval: 1s, retries: 1}',
    ]
    lines = ["services:"]
    for svc, first in (("anon", [f"image: {image}", 'volumes: ["/data"]']),
                       ("imgvol", [f"image: {VOL_IMAGE}"])):  # fmt: skip
        lines += [f"  {svc}:", *(f"    {x}" for x in first + common)]
    config.write("data.yaml", "\n".join(lines) + "\n")


def run(api: docker.APIClient, cid: str, cmd: str) -> str:
    exec_id = api.exec_create(cid, ["sh", "-c", cmd])["Id"]
    return bytes(api.exec_start(exec_id)).decode().strip()


def the_one(cluster: Cluster, svc: str) -> dict[str, Any]:
    wait_for(f"{svc} healthy", lambda: healthy(cluster, svc), timeout=30, interval=0.1)
    (c,) = cluster.running(svc)
    return c


def healthy(cluster: Cluster, svc: str) -> bool:
    cs = cluster.containers(svc)
    return len(cs) == 1 and cs[0]["State"] == "running" and "(healthy)" in cs[0]["Status"]


def check_data(api: docker.APIClient, cluster: Cluster, svc: str, before: str) -> str:
    """The service is back (another container unless started in place) with its data."""
    wait_for(
        f"{svc} healed",
        lambda: healthy(cluster, svc) and cluster.running(svc)[0]["Id"] != before,
        timeout=30,
        interval=0.1,
    )
    c = the_one(cluster, svc)
    assert run(api, c["Id"], "cat /data/marker") == f"kept-{svc}", svc
    return str(c["Id"])


def volumes(api: docker.APIClient) -> set[str]:
    return {v["Name"] for v in api.volumes().get("Volumes") or []}


@pytest.mark.engine_restart
def test_anonymous_volumes_survive_every_heal_and_none_is_left_behind(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    dockerd: PrivateDockerd,
    image: str,
) -> None:
    build(api, VOL_IMAGE, volume="/data")
    write_stack(config, image)
    healerd.start()
    ids = {}
    for svc in SERVICES:
        c = the_one(cluster, svc)
        assert c["Mounts"] and c["Mounts"][0]["Destination"] == "/data"
        run(api, c["Id"], f"echo kept-{svc} > /data/marker")
        ids[svc] = c["Id"]
    before = volumes(api)
    assert len(before) == 2

    disruptions: dict[str, Callable[[str], object]] = {
        "docker kill": lambda cid: api.kill(cid),
        "docker stop": lambda cid: api.stop(cid, timeout=1),
        "a crash (exit 3)": lambda cid: run(api, cid, "touch /data/crash"),
        "unhealthy": lambda cid: run(api, cid, "touch /tmp/sick"),
    }
    for what, disrupt in disruptions.items():
        for svc in SERVICES:
            disrupt(ids[svc])
        for svc in SERVICES:
            ids[svc] = check_data(api, cluster, svc, ids[svc])
        print(f"{what}: data kept")

    # healerd killed, a container killed while it is away, healerd back.
    # healerd killed, a container killed while it is away, healerd back. What it finds
    # stopped at start may have been stopped by a reboot: started again in place.
    healerd.kill9()
    for svc in SERVICES:
        api.kill(ids[svc])
    healerd.start()
    for svc in SERVICES:
        ids[svc] = check_data(api, cluster, svc, "")

    # An engine restart (a reboot): what it stopped is started again in place (what
    # healerd replaced while the engine was shutting down, it replaced: either way on the
    # same volume).
    dockerd.restart()
    for svc in SERVICES:
        ids[svc] = check_data(api, cluster, svc, "")

    # 20 more heals: no volume more than before.
    for _ in range(10):
        for svc in SERVICES:
            api.kill(ids[svc])
        for svc in SERVICES:
            ids[svc] = check_data(api, cluster, svc, ids[svc])
    assert volumes(api) <= before, "a heal left a volume behind"
    for svc in SERVICES:
        assert len(cluster.history(svc)) <= 1, "history beyond history_limit"


@pytest.mark.parametrize(
    "mount",
    ['["/data"]', "[{type: volume, target: /data, volume: {nocopy: true}}]"],
    ids=["short", "long-syntax"],
)
def test_a_rollout_keeps_the_volume_and_deleting_the_service_removes_it(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    image: str,
    mount: str,
) -> None:
    config.service("roll.yaml", "roll", 1, volumes=mount)
    healerd.start()
    c = the_running(cluster, "roll")
    run(api, c["Id"], "echo kept-roll > /data/marker")
    before = volumes(api)
    mine = {m["Name"] for m in c["Mounts"]}
    assert len(mine) == 1 and mine <= before
    config.service("roll.yaml", "roll", 1, volumes=mount, environment="{V: '2'}")
    healerd.signal(signal.SIGHUP)
    wait_for(
        "rolled",
        lambda: [x["Id"] for x in cluster.running("roll")] not in ([], [c["Id"]]),
        timeout=30,
    )
    wait_for("one container", lambda: len(cluster.containers("roll", history=True)) == 1, 30)
    new = the_running(cluster, "roll")
    assert run(api, new["Id"], "cat /data/marker") == "kept-roll"
    assert volumes(api) == before
    (config.conf_d / "roll.yaml").unlink()
    healerd.signal(signal.SIGHUP)
    wait_for("service gone", lambda: not cluster.containers("roll", history=True), timeout=30)
    wait_for("its volume gone", lambda: not (volumes(api) & mine), timeout=10)


def the_running(cluster: Cluster, svc: str) -> dict[str, Any]:
    wait_for(f"{svc} runs", lambda: len(cluster.running(svc)) == 1, timeout=30, interval=0.1)
    holds_for(f"{svc} stays", lambda: len(cluster.running(svc)) == 1, 0.5)
    (c,) = cluster.running(svc)
    return c


def test_logs_previous_describe_and_a_bounded_history_through_a_crash_loop(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient
) -> None:
    # Each container says who it is, then dies with exit 3 after a second: a crash loop.
    # ($$: a literal $ for the container's shell, as in Compose; $HOSTNAME alone would be
    # healerd's to interpolate, and an unset one an error.)
    crashing = ["sh", "-c", "echo hello from $$HOSTNAME; sleep 1; echo last words; exit 3"]
    config.service(
        "loop.yaml",
        "loop",
        1,
        command=json.dumps(crashing),
        restart_policy="{delay: 1s, max_delay: 2s}",
    )
    config.service("calm.yaml", "calm", 1)
    healerd.start()
    wait_for("a first failure kept", lambda: len(cluster.history("loop")) >= 1, timeout=30)
    most = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # sampled through a minute of crash loop
        most = max(most, len(cluster.history("loop")))
        time.sleep(0.2)
    assert 1 <= most <= 1, f"history went up to {most} (history_limit 1 per replica)"

    code, out, err = healerd.ctl("logs", "loop", "--previous")
    assert code == 0, err
    assert out.strip().splitlines()[-1] == "last words"
    assert "exit code 3" in err
    code, out, _ = healerd.ctl("describe", "loop", "-o", "json")
    data = json.loads(out)
    assert code == 0 and data["history"] and data["history"][0]["exit_code"] == 3
    assert data["spec"]["image"] and data["events"]

    # docker kill: 137, and the killed container's last line.
    (calm,) = cluster.running("calm")
    api.kill(calm["Id"])
    wait_for("calm replaced", lambda: cluster.history("calm") != [], timeout=20)
    code, out, err = healerd.ctl("logs", "calm", "--previous")
    assert code == 0 and "exit code 137" in err
    code, out, _ = healerd.ctl("describe", "calm", "-o", "json")
    assert json.loads(out)["history"][0]["exit_code"] == 137

    # Bad input: an unknown service is a clear error (exit 5), nothing changes.
    code, _, err = healerd.ctl("logs", "nope")
    assert code == 5 and "no such service: nope" in err
    code, _, err = healerd.ctl("describe", "nope")
    assert code == 5 and "no such service: nope" in err
