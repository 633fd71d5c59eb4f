"""Image garbage collection against the private dockerd and a real registry (issue 17,
point 4).

Shown: after 5 updates of one repository to distinct digests, with the thresholds set
low (high 1%, low 0%: any disk is "full"), only the current and the previous image of
that repository remain; an image a container that healerd does not own uses, even a
stopped one, is never removed; nor is an image of a repository no service names. The
first two tests drive the collector with the real engine adapter; the last one runs
healerd and rolls a service through 5 tags.

Distinct digests: busybox rootfs imports that differ in one file, pushed to the test
registry and removed locally, so that the engine has them only from pulls.
"""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import shutil
import tarfile
from collections.abc import Iterator

import docker
import pytest

from healerd.config.imagegc import ImageGcSettings
from healerd.core.clock import SystemClock
from healerd.core.events import EventLog
from healerd.core.imagegc import ImageCollector
from healerd.engine.docker import DockerEngine
from tests.support.busybox_image import COMMAND, rootfs_tar
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for
from tests.support.registry import Registry

LOW = ImageGcSettings(high_threshold_percent=1, low_threshold_percent=0, min_age=0.0)


def variant_tar(n: int, salt: str) -> bytes:
    """The busybox rootfs with one file of its own: a distinct image (and digest)."""
    buf = io.BytesIO(rootfs_tar())
    with tarfile.open(fileobj=buf, mode="a") as tar:
        data = f"variant {n} {salt}\n".encode()
        info = tarfile.TarInfo("etc/variant")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Images:
    """Makes distinct images, pushes them to a registry and pulls them back; removes
    whatever it made at the end."""

    def __init__(self, api: docker.APIClient, registry: Registry) -> None:
        self.api = api
        self.registry = registry
        self.salt = secrets.token_hex(4)
        self.made: set[str] = set()  # image IDs to remove at the end
        self.refs: set[str] = set()  # local references to remove at the end

    def publish(self, n: int, repo: str, tag: str) -> str:
        """Variant `n` in the registry as REPO:TAG (not on the engine); returns its ref."""
        src = f"healerd-gc-src-{self.salt}/v"
        self.api.import_image_from_data(
            variant_tar(n, self.salt), repository=src, tag=str(n), changes=['CMD ["/bin/sh"]']
        )
        local = f"{src}:{n}"
        self.made.add(self.api.inspect_image(local)["Id"])
        ref = self.registry.push(self.api, local, repo, tag)
        self.api.remove_image(local)  # the variant is gone from the engine
        return ref

    def pull(self, ref: str) -> str:
        """Pull as anyone would (not healerd); returns the image ID."""
        repo, _, tag = ref.rpartition(":")
        self.api.pull(repo, tag=tag)
        self.refs.add(ref)
        image_id = str(self.api.inspect_image(ref)["Id"])
        self.made.add(image_id)
        return image_id

    def of(self, repo: str) -> set[str]:
        """The IDs of the local images of `repo` of this registry."""
        name = f"{self.registry.host}/{repo}"
        return {str(i["Id"]) for i in self.api.images(name=name)} | {
            str(i["Id"])
            for i in self.api.images()
            if any(d.startswith(f"{name}@") for d in i.get("RepoDigests") or ())
        }

    def present(self, image_id: str) -> bool:
        try:
            self.api.inspect_image(image_id)
        except docker.errors.NotFound:
            return False
        return True

    def cleanup(self) -> None:
        for ref in self.refs:
            with contextlib.suppress(docker.errors.NotFound):
                self.api.remove_image(ref, force=True)
        for image_id in self.made:
            with contextlib.suppress(docker.errors.NotFound):
                self.api.remove_image(image_id, force=True)


@pytest.fixture
def images(api: docker.APIClient, registry: Registry, image: str) -> Iterator[Images]:
    made = Images(api, registry)
    yield made
    made.cleanup()


@pytest.fixture
def engine(dockerd: PrivateDockerd) -> DockerEngine:
    return DockerEngine(dockerd.url)


def data_root_disk(api: docker.APIClient) -> tuple[int, int]:
    usage = shutil.disk_usage(api.info()["DockerRootDir"])
    return usage.total, usage.free


def collector(
    engine: DockerEngine, api: docker.APIClient, events: EventLog, declared: dict[str, str]
) -> ImageCollector:
    return ImageCollector(
        engine,
        SystemClock(),
        events,
        settings=lambda: LOW,
        declared=lambda: declared,
        disk=lambda: data_root_disk(api),
    )


def test_after_five_updates_only_current_and_previous_remain(
    api: docker.APIClient, engine: DockerEngine, images: Images, registry: Registry, image: str
) -> None:
    repo = f"gc-five-{secrets.token_hex(2)}"
    stable = registry.ref(repo, "stable")
    events = EventLog(SystemClock())
    gc = collector(engine, api, events, {"app": stable})
    # An image of a repository no service names, pulled by someone else: never a
    # candidate, unused or not.
    other_id = images.pull(images.publish(100, f"{repo}-other", "1"))
    pulled = []
    for n in range(1, 6):
        images.publish(n, repo, "stable")  # the tag moves to a new digest
        pulled.append(images.pull(stable))  # the update: the old digest is now dangling
        gc.note_pull(stable)  # as healerd's own pull
        gc.collect()
    assert len(set(pulled)) == 5
    # The current (tagged) and the previous digest, nothing older.
    assert images.of(repo) == {pulled[4], pulled[3]}
    removed = [e for e in events.since() if e.kind == "image-removed"]
    assert len(removed) == 3
    assert all(e.service == "app" and "high_threshold_percent 1%" in e.message for e in removed)
    assert all(f"{registry.host}/{repo}@sha256:" in e.message for e in removed)
    assert images.present(other_id)
    assert images.present(image)  # the test image, of no declared repository

    # After an update, trim keeps only what it is told (and the declared image), and
    # removes only images healerd pulled: not an operator's of the same repository.
    operators = images.pull(images.publish(50, repo, "debug"))
    assert [i.id for i in gc.trim(f"{registry.host}/{repo}", keep=())] == [pulled[3]]
    assert images.of(repo) == {pulled[4], operators}


def test_images_in_use_or_of_other_repositories_are_never_removed(
    api: docker.APIClient, engine: DockerEngine, images: Images, registry: Registry
) -> None:
    repo = f"gc-keep-{secrets.token_hex(2)}"
    refs = [images.publish(n, repo, f"v{n}") for n in (1, 2, 3, 4)]
    ids = [images.pull(ref) for ref in refs]  # as healerd's pulls (note_pull below)
    # A repository no service names, pulled by someone else.
    foreign_ref = images.publish(5, f"{repo}-foreign", "1")
    foreign_id = images.pull(foreign_ref)
    # An unowned container (no healerd labels) on the oldest image, stopped.
    user = api.create_container(ids[0], ["true"], name=f"gc-user-{secrets.token_hex(3)}")["Id"]
    try:
        api.start(user)
        wait_for("the unowned container to exit", lambda: api.wait(user, timeout=10))
        assert api.inspect_container(user)["State"]["Status"] == "exited"
        events = EventLog(SystemClock())
        gc = collector(engine, api, events, {"app": refs[3]})
        for ref in refs:
            gc.note_pull(ref)
        previous = f"{registry.host}/{repo}:v3"
        gc.protect(lambda: {previous})  # the auto-updater's previous reference
        removed = gc.collect()
        assert [i.id for i in removed] == [ids[1]]
        assert images.present(ids[0]), "removed an image an unowned (stopped) container uses"
        assert images.present(ids[2]) and images.present(ids[3])
        assert images.present(foreign_id)
        # trim of the repository: the image in use stays, whatever it is told to keep.
        assert gc.trim(f"{registry.host}/{repo}", keep=()) == []
        assert images.present(ids[0])
        # Once its container is gone, the image may go.
        api.remove_container(user)
        assert [i.id for i in gc.trim(f"{registry.host}/{repo}", keep=(refs[3],))] == [ids[0]]
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            api.remove_container(user, force=True)


def rolled_to(cluster: Cluster, images: Images, service: str, ref: str) -> str:
    """The ID of `ref` once the service's one replica runs it, else ""."""
    if not images.present(ref) or not cluster.converged(service, 1):
        return ""
    target = str(images.api.inspect_image(ref)["Id"])
    running = cluster.running(service)
    return target if [c["ImageID"] for c in running] == [target] else ""


def test_healerd_keeps_current_and_previous_through_five_rollouts(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    images: Images,
    registry: Registry,
) -> None:
    repo = f"gc-roll-{secrets.token_hex(2)}"
    refs = [images.publish(n, repo, f"v{n}") for n in range(1, 6)]
    config.settings(
        "image_gc:\n  high_threshold_percent: 1\n  low_threshold_percent: 0\n"
        "  min_age: 0s\n  interval: 1s\n"
    )

    def declare(ref: str) -> None:
        config.write(
            "web.yaml",
            "services:\n  web:\n"
            f"    image: {ref}\n    command: {json.dumps(COMMAND)}\n    stop_grace_period: 2s\n",
        )

    declare(refs[0])
    healerd.start()
    ids = []
    user = ""
    try:
        for n, ref in enumerate(refs):
            if n:
                declare(ref)
                assert healerd.ctl("reload")[0] == 0
            image_id = wait_for(
                f"web to run {ref}",
                lambda r=ref: rolled_to(cluster, images, "web", r),
                timeout=60,
            )
            assert image_id not in ids
            ids.append(image_id)
            images.made.add(image_id)
            if n == 1:
                # An unowned container on v1 (made, never started) once healerd left it.
                user = api.create_container(ids[0], ["true"], name=f"gc-user-{n}")["Id"]
        wait_for(
            "only v5, v4 (and v1, used by a container) left",
            lambda: images.of(repo) == {ids[4], ids[3], ids[0]},
            timeout=30,
        )
        code, out, _ = healerd.ctl("events", "--service", "web")
        assert code == 0 and out.count("removed image") == 2, out
    finally:
        if user:
            api.remove_container(user, force=True)
        # Before the images fixture removes the images the service's containers use.
        healerd.stop()
        cluster.remove_labelled()
