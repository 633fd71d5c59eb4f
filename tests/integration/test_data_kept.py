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
    """`cmd`'s output in the container; one that fails is the test's error, so that a
    marker never written is not reported as a marker lost (as under a bare chroot's
    engine, whose `docker exec` lands in the host's root: issue 31)."""
    exec_id = api.exec_create(cid, ["sh", "-c", cmd])["Id"]
    out = bytes(api.exec_start(exec_id)).decode().strip()
    code = api.exec_inspect(exec_id)["ExitCode"]
    assert code == 0, f"{cmd!r} in {cid[:12]} exited {code}: {out}"
    return out


def the_one(cluster: Cluster, svc: str) -> dict[str, Any]:
    wait_for(f"{svc} healthy", lambda: healthy(cluster, svc), timeout=30, interval=0.1)
    (c,) = cluster.running(svc)
    return c


def healthy(cluster: Cluster, svc: str) -> bool:
    cs = cluster.containers(svc)
    return len(cs) == 1 and cs[0]["State"] == "running" and "(healthy)" in cs[0]["Status"]


Run = tuple[str, str]  # a container's id and when it last started


def current_run(api: docker.APIClient, cluster: Cluster, svc: str) -> Run:
    c = the_one(cluster, svc)
    return str(c["Id"]), str(api.inspect_container(c["Id"])["State"]["StartedAt"])


def check_data(
    api: docker.APIClient,
    cluster: Cluster,
    svc: str,
    before: Run | None,
    *,
    in_place: bool | None = True,
) -> Run:
    """The service is back, healthy, with its data: started again as the same container
    (`in_place`), replaced by another (False), or either (None; `before` None: any run)."""

    def back() -> Run | None:
        cs = cluster.containers(svc)
        if len(cs) != 1 or cs[0]["State"] != "running" or "(healthy)" not in cs[0]["Status"]:
            return None
        now = (str(cs[0]["Id"]), str(api.inspect_container(cs[0]["Id"])["State"]["StartedAt"]))
        return now if now != before else None

    now = wait_for(f"{svc} healed", back, timeout=30, interval=0.1)
    assert now is not None  # wait_for returns only what is truthy
    if before is not None and in_place is not None:
        assert (now[0] == before[0]) is in_place, (
            f"{svc}: {'replaced' if in_place else 'started again in place'}, "
            f"expected {'in place' if in_place else 'a replacement'}"
        )
    assert run(api, now[0], "cat /data/marker") == f"kept-{svc}", svc
    return now


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
    for svc in SERVICES:
        c = the_one(cluster, svc)
        assert c["Mounts"] and c["Mounts"][0]["Destination"] == "/data"
        run(api, c["Id"], f"echo kept-{svc} > /data/marker")
    before = volumes(api)
    assert len(before) == 2
    runs = {svc: current_run(api, cluster, svc) for svc in SERVICES}

    # Killed, stopped or crashed: the same container started again (issue 28). Unhealthy:
    # restarted in place first; its /tmp/sick is in the writable layer the restart keeps,
    # so it is unhealthy again past its grace and replaced, onto the same volume.
    disruptions: dict[str, tuple[Callable[[str], object], bool]] = {
        "docker kill": (lambda cid: api.kill(cid), True),
        "docker stop": (lambda cid: api.stop(cid, timeout=1), True),
        "a crash (exit 3)": (lambda cid: run(api, cid, "touch /data/crash"), True),
        "unhealthy": (lambda cid: run(api, cid, "touch /tmp/sick"), False),
    }
    for what, (disrupt, in_place) in disruptions.items():
        for svc in SERVICES:
            disrupt(runs[svc][0])
        for svc in SERVICES:
            runs[svc] = check_data(api, cluster, svc, runs[svc], in_place=in_place)
        print(f"{what}: data kept")

    # healerd killed, a container killed while it is away, healerd back. What it finds
    # stopped at start may have been stopped by a reboot: started again in place.
    healerd.kill9()
    for svc in SERVICES:
        api.kill(runs[svc][0])
    healerd.start()
    for svc in SERVICES:
        runs[svc] = check_data(api, cluster, svc, runs[svc])

    # An engine restart (a reboot): what it stopped is started again in place (what
    # healerd replaced while the engine was shutting down, it replaced: either way on the
    # same volume).
    dockerd.restart()
    for svc in SERVICES:
        runs[svc] = check_data(api, cluster, svc, None)

    # 20 more heals, each in place: no volume more than before.
    for _ in range(10):
        for svc in SERVICES:
            api.kill(runs[svc][0])
        for svc in SERVICES:
            runs[svc] = check_data(api, cluster, svc, runs[svc])
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


def test_logs_previous_describe_and_a_bounded_history_through_replacements(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient
) -> None:
    # A service that is never healthy: each container is restarted in place once, then,
    # unhealthy again past its grace, replaced (issue 28): a steady line of replacements,
    # each leaving the failed container as history. Each says who it is, and on the TERM
    # of its stop its last words, with exit 3. ($$: a literal $ for the container's shell,
    # as in Compose; $HOSTNAME alone would be healerd's to interpolate, and an unset one
    # an error.)
    sick = [
        "sh",
        "-c",
        "trap 'echo last words; exit 3' TERM; echo hello from $$HOSTNAME; "
        "while :; do sleep 0.2; done",
    ]
    config.service(
        "sick.yaml",
        "sick",
        1,
        command=json.dumps(sick),
        unhealthy_grace="0s",
        healthcheck='{test: ["CMD", "sh", "-c", "exit 1"], interval: 1s, retries: 1}',
        restart_policy="{delay: 1s, max_delay: 2s}",
    )
    config.service("calm.yaml", "calm", 1)
    healerd.start()
    wait_for("a first replacement kept", lambda: len(cluster.history("sick")) >= 1, timeout=60)
    most, replacements = 0, set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # sampled through half a minute of replacements
        most = max(most, len(cluster.history("sick")))
        replacements |= {c["Id"] for c in cluster.containers("sick")}
        time.sleep(0.2)
    assert 1 <= most <= 1, f"history went up to {most} (history_limit 1 per replica)"
    assert len(replacements) >= 2, "no replacement beyond the first within 30 s"

    code, out, err = healerd.ctl("logs", "sick", "--previous")
    assert code == 0, err
    assert out.strip().splitlines()[0].startswith("hello from ")
    assert out.strip().splitlines()[-1] == "last words"
    assert "exit code 3" in err
    code, out, _ = healerd.ctl("describe", "sick", "-o", "json")
    data = json.loads(out)
    assert code == 0 and data["history"] and data["history"][0]["exit_code"] == 3
    assert data["spec"]["image"] and data["events"]

    # docker kill: the same container started again (issue 28), no history made; the
    # death (137) is in its events, `logs --previous` prints the killed run's output (the
    # same container's log up to its latest start) and `describe` its last termination.
    (calm,) = cluster.running("calm")
    started = api.inspect_container(calm["Id"])["State"]["StartedAt"]
    api.kill(calm["Id"])
    wait_for(
        "calm started again in place",
        lambda: (
            [c["Id"] for c in cluster.running("calm")] == [calm["Id"]]
            and api.inspect_container(calm["Id"])["State"]["StartedAt"] != started
        ),
        timeout=20,
    )
    assert cluster.history("calm") == []
    code, out, _ = healerd.ctl("describe", "calm", "-o", "json")
    data = json.loads(out)
    events = [e["message"] for e in data["events"]]
    assert code == 0 and any("exited with code 137" in m for m in events), events
    (row,) = data["containers"]
    assert row["restarts"] == 1 and row["last_termination"]["exit_code"] == 137, row
    code, out, err = healerd.ctl("logs", "calm", "--previous")
    assert code == 0, err
    assert "stopped from outside (exited with code 137 (killed)), died" in err, err

    # Bad input: an unknown service is a clear error (exit 5), nothing changes.
    code, _, err = healerd.ctl("logs", "nope")
    assert code == 5 and "no such service: nope" in err
    code, _, err = healerd.ctl("describe", "nope")
    assert code == 5 and "no such service: nope" in err
