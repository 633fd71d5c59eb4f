"""Updates the operator controls (issue 33), against a real registry and dockerd with
healerd as a process: auto_update: notify tells and rolls nothing; the application's
update_lock (a real file in the container, read through the engine) holds even
`healerctl update`; rollback, pin and unpin; a window and a delay hold an update; and
`healerctl status` says on a converged service's line what the updater did; a trial goes on
across a restart of healerd."""

from __future__ import annotations

import json
import time

import docker

from healerd.cli.client import Client
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for
from tests.support.registry import Registry
from tests.support.variants import REPOSITORY, push_digest, variant

INTERVAL = 2.0
LOCK = "/tmp/app.update"


def push(api: docker.APIClient, registry: Registry, image: str) -> str:
    return push_digest(api, registry, image, "app", "stable")


def digests(cluster: Cluster) -> list[str]:
    return sorted(c["Image"].rpartition("@")[2] for c in cluster.running("app"))


def short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12]


def line(healerd: Healerd) -> str:
    """The app's line of `healerctl status -o wide`."""
    out = healerd.ctl("status", "-o", "wide")[1]
    return next((row for row in out.splitlines() if row.startswith("app ")), "")


def service(healerd: Healerd) -> dict[str, object]:
    out = healerd.ctl("status", "app", "-o", "json")[1]
    rows: list[dict[str, object]] = json.loads(out)["services"]
    return next(r for r in rows if r["name"] == "app")


def app_file(config: ConfigDir, registry: Registry, extension: str) -> None:
    config.write(
        "app.yaml",
        f"""\
        services:
          app:
            image: {registry.ref("app", "stable")}
            x-healerd: {extension}
            stop_grace_period: 1s
            update_config: {{order: stop-first}}
        """,
    )


def test_notify_a_lock_rollback_pin_and_unpin(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    image: str,
    registry: Registry,
) -> None:
    v1 = push(api, registry, variant(api, image, "v1"))
    config.settings(f"auto_update_interval: {INTERVAL:g}s\n")
    app_file(config, registry, f"{{auto_update: notify, update_lock: {LOCK}}}")
    healerd.start()
    wait_for("app on v1", lambda: digests(cluster) == [v1], timeout=60)

    # notify: told (status, event, metric), nothing pulled or rolled.
    v2 = push(api, registry, variant(api, image, "v2"))
    wait_for("v2 told", lambda: f"moved to {short(v2)}" in line(healerd), timeout=INTERVAL + 20)
    assert "Converged" in line(healerd) and "auto_update: notify" in line(healerd)
    holds_for("still v1", lambda: digests(cluster) == [v1], 2 * INTERVAL)
    events = healerd.ctl("events", "--service", "app")[1]
    assert events.count("image-update-available") == 1, events
    metrics = Client(str(healerd.socket)).request("GET", "/metrics", raw=True).decode()
    assert 'healerd_image_update_waiting{service="app",why="available"} 1.0' in metrics

    # The application holds the update: even `healerctl update` waits for its lock.
    holder = cluster.running("app")[0]
    ex = api.exec_create(holder["Id"], ["touch", LOCK])
    api.exec_start(ex)
    code, out, err = healerd.ctl("update", "app")
    assert code == 0, (out, err)
    name = holder["Names"][0].lstrip("/")
    wait_for("held by the lock", lambda: f"held by {name}: {LOCK}" in line(healerd), timeout=20)
    holds_for("still v1 while locked", lambda: digests(cluster) == [v1], 2 * INTERVAL)
    api.exec_start(api.exec_create(holder["Id"], ["rm", LOCK]))
    assert healerd.ctl("update", "app")[0] == 0
    wait_for("app on v2", lambda: digests(cluster) == [v2], timeout=INTERVAL + 30)
    assert "update-requested" in healerd.ctl("events", "--service", "app")[1]
    wait_for("v2 proven", lambda: f"updated to {short(v2)}" in line(healerd), timeout=20)

    # rollback: v1 again, said on the converged line with its age, and in describe; v1's
    # image removed by hand before, pulled again by the rollback (v2 runs till then).
    api.remove_image(f"{registry.host}/app@{v1}")
    code, out, err = healerd.ctl("rollback", "app")
    assert code == 0 and f"rolled back to {short(v1)}" in out, (out, err)
    assert "for the rollback" in healerd.ctl("events", "--service", "app")[1]
    wait_for("app back on v1", lambda: digests(cluster) == [v1], timeout=30)
    wait_for("converged", lambda: service(healerd)["state"] == "Converged", timeout=20)
    row = line(healerd)
    assert f"rolled back to {short(v1)} by healerctl rollback" in row and " ago)" in row, row
    described = healerd.ctl("describe", "app")[1]
    assert "Digest history" in described and "rolled back" in described, described
    assert "updated" in described

    # pin: the operator's digest (even the one rolled back from), kept; unpin follows again.
    code, out, err = healerd.ctl("pin", "app", v2)
    assert code == 0, (out, err)
    wait_for("app pinned on v2", lambda: digests(cluster) == [v2], timeout=INTERVAL + 30)
    wait_for("pin shown", lambda: f"pinned to {short(v2)}" in line(healerd), timeout=20)
    v3 = push(api, registry, variant(api, image, "v3"))
    holds_for("pinned: v3 not even told", lambda: "v3" not in line(healerd), 2 * INTERVAL)
    assert f"moved to {short(v3)}" not in line(healerd)
    assert healerd.ctl("unpin", "app")[0] == 0
    wait_for("v3 told", lambda: f"moved to {short(v3)}" in line(healerd), timeout=INTERVAL + 20)
    assert digests(cluster) == [v2]
    events = healerd.ctl("events", "--service", "app")[1]
    assert "image-pinned" in events and "image-unpinned" in events

    # Refused with a reason: a digest that is no digest; a service that follows no tag.
    code, _, err = healerd.ctl("pin", "app", "latest")
    assert code != 0 and "is not a digest" in err


def test_a_window_and_a_delay_hold_an_update(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    image: str,
    registry: Registry,
) -> None:
    v1 = push(api, registry, variant(api, image, "v1"))
    config.settings(f"auto_update_interval: {INTERVAL:g}s\n")
    # A window on another day than today (local time): closed now.
    other = time.strftime("%a", time.localtime(time.time() + 3 * 86400))
    app_file(config, registry, f"{{auto_update: registry, update_window: '{other} 01:00-02:00'}}")
    healerd.start()
    wait_for("app on v1", lambda: digests(cluster) == [v1], timeout=60)
    v2 = push(api, registry, variant(api, image, "v2"))
    wait_for(
        "held by the window",
        lambda: f"{short(v2)} waits for its update window ({other} 01:00-02:00)" in line(healerd),
        timeout=INTERVAL + 20,
    )
    holds_for("still v1", lambda: digests(cluster) == [v1], 2 * INTERVAL)
    assert healerd.ctl("update", "app")[0] == 0  # the operator: now, whatever the window
    wait_for("app on v2", lambda: digests(cluster) == [v2], timeout=INTERVAL + 30)

    # A delay instead: a digest is taken once the tag has named it that long.
    app_file(config, registry, "{auto_update: registry, update_delay: 8s}")
    assert healerd.ctl("reload")[0] == 0
    v3 = push(api, registry, variant(api, image, "v3"))
    seen = time.monotonic()
    wait_for(
        "held by the delay",
        lambda: f"{short(v3)} waits for update_delay" in line(healerd),
        timeout=INTERVAL + 20,
    )
    wait_for("app on v3", lambda: digests(cluster) == [v3], timeout=30)
    assert time.monotonic() - seen >= 6, "taken before its delay"


def late_crash(api: docker.APIClient, base: str, version: str, after: int) -> str:
    """A variant that runs `after` seconds, then exits 1: it fails after its rollout."""
    c = api.create_container(base, ["sh", "-c", f"echo {version} > /version"])
    try:
        api.start(c)
        api.wait(c, timeout=30)
        cmd = json.dumps(["sh", "-c", f"sleep {after}; exit 1"])
        api.commit(c, repository=REPOSITORY, tag=version, changes=[f"CMD {cmd}"])
    finally:
        api.remove_container(c, force=True)
    return f"{REPOSITORY}:{version}"


def test_a_trial_goes_on_across_a_restart_of_healerd(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    image: str,
    registry: Registry,
) -> None:
    """healerd restarted while a new digest is on trial (rolled out, not proven yet):
    the restarted healerd goes on judging it and rolls it back when it fails, where
    it used to take the digest it found running as proven and heal it in a loop."""
    v1 = push(api, registry, variant(api, image, "v1"))
    config.settings(f"auto_update_interval: {INTERVAL:g}s\n")
    config.write(
        "app.yaml",
        f"""\
        services:
          app:
            image: {registry.ref("app", "stable")}
            x-healerd: {{auto_update: registry}}
            stop_grace_period: 1s
            update_config: {{order: stop-first, min_ready_seconds: 60s}}
        """,
    )
    healerd.start()
    wait_for("app on v1", lambda: digests(cluster) == [v1], timeout=60)
    v2 = push(api, registry, late_crash(api, image, "v2", after=12))
    wait_for("app on v2", lambda: digests(cluster) == [v2], timeout=INTERVAL + 30)
    assert "rolled back" not in line(healerd)
    healerd.stop()
    healerd.start()
    # (the line shows the rollout's progress until v1 is available: min_ready_seconds)
    wait_for(
        "the rollback",
        lambda: "image-rollback" in healerd.ctl("events", "--service", "app")[1],
        timeout=60,
    )
    wait_for("app on v1", lambda: digests(cluster) == [v1], timeout=30)
    events = healerd.ctl("events", "--service", "app")[1]
    said = next(r for r in events.splitlines() if "image-rollback" in r)
    assert f"rolled back to {short(v1)}" in said and "exited with code 1" in said, said
