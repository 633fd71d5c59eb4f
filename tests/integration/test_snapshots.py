"""Volume snapshots against a real engine (issue 33): a named volume's data, taken and
restored through the host directory the engine reports (volume_path), is what a
container of the volume sees again; a volume off this host is refused by the engine."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from healerd.daemon.snapshots import SnapshotStore
from healerd.daemon.volumecopy import REMOVALS
from healerd.engine import EngineError
from healerd.engine.docker import DockerEngine
from tests.support.dockerd import PrivateDockerd

LISTING = "ls -lnR /data && cat /data/a /data/d/b"


@pytest.fixture
def volume(api: docker.APIClient, image: str) -> Iterator[str]:
    name = f"healerd-test-snap-{secrets.token_hex(3)}"
    api.create_volume(name, labels={"healerd-test": "snapshot"})
    yield name
    for c in api.containers(all=True, filters={"volume": name}):
        api.remove_container(c["Id"], force=True)
    api.remove_volume(name, force=True)


def run(api: docker.APIClient, image: str, volume: str, script: str) -> str:
    """What `script` prints in a container with `volume` at /data."""
    host = api.create_host_config(binds={volume: {"bind": "/data", "mode": "rw"}})
    cid = api.create_container(image, ["sh", "-c", script], host_config=host)["Id"]
    try:
        api.start(cid)
        assert api.wait(cid, timeout=30)["StatusCode"] == 0, api.logs(cid)
        return bytes(api.logs(cid)).decode()
    finally:
        api.remove_container(cid, force=True)


def test_a_volume_restored_through_the_engines_mount_point(
    dockerd: PrivateDockerd, api: docker.APIClient, image: str, volume: str, tmp_path: Path
) -> None:
    engine = DockerEngine(dockerd.url)
    run(api, image, volume, "echo v1 > /data/a && mkdir /data/d && echo one > /data/d/b")
    mountpoint = engine.volume_path(volume)
    assert Path(mountpoint, "a").read_text() == "v1\n"  # the engine's directory, on this host
    os.chown(Path(mountpoint, "d", "b"), 999, 998)
    os.chmod(Path(mountpoint, "d"), 0o700)
    before = run(api, image, volume, LISTING)
    assert " 999 " in before and "drwx------" in before

    store = SnapshotStore(tmp_path / "state" / "snapshots")
    snap = store.take("db", {volume: mountpoint}, from_digest="sha256:1", to_digest="sha256:2")
    assert store.list("db") == [snap] and snap.size > 0
    # The new image's run: a file gone, one changed, one new.
    run(api, image, volume, "rm /data/a && echo two > /data/d/b && echo new > /data/c")
    assert run(api, image, volume, "ls /data") == "c\nd\n"

    store.restore(snap, {volume: engine.volume_path(volume)})
    assert run(api, image, volume, LISTING) == before
    REMOVALS.wait()  # what the restore replaced is deleted in the background
    assert sorted(os.listdir(Path(mountpoint).parent)) == ["_data"]  # nothing left aside


def test_a_volume_whose_files_are_not_on_this_host_is_refused(
    dockerd: PrivateDockerd, api: docker.APIClient
) -> None:
    engine = DockerEngine(dockerd.url)
    name = f"healerd-test-snap-tmpfs-{secrets.token_hex(3)}"
    api.create_volume(name, driver_opts={"type": "tmpfs", "device": "tmpfs"})
    try:
        with pytest.raises(EngineError, match="not in a directory of this host"):
            engine.volume_path(name)
        with pytest.raises(EngineError, match="no such volume"):
            engine.volume_path(name + "-gone")
    finally:
        api.remove_volume(name, force=True)
