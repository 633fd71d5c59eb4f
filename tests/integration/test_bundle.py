"""Bundles for air-gapped sites (issue 35 point 2), end to end on two real engines: a
bundle made on the test engine (a retagged image and a built one, which no registry
has) is loaded on a second private engine with healerd running against it and no
registry anywhere: the stack comes up. A bundle with one byte changed is refused and
changes nothing; a bundle whose image is missing is refused whole, the previous
version running on; the next good version replaces the first whole."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from healerd.cli import healerctl
from tests.integration.harness import IMAGE
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import DISK_POOL, PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

APP = "bundle.local/site/app:1"  # the test image retagged: no registry has it
EXTRA = "bundle.local/site/extra:1"
BUILT = "bundle.local/site/built:1"


@pytest.fixture
def site_engine() -> Iterator[PrivateDockerd]:
    """A second private dockerd: the air-gapped site (no image, no registry)."""
    parent = Path("/var/lib/healerd-test-site")
    PrivateDockerd.reap_stale(parent)
    d = PrivateDockerd(parent / f"run-{os.getpid()}", bridge_prefix="hds", pool=DISK_POOL)
    d.start()
    try:
        yield d
    finally:
        d.teardown()


def ctl(engine: PrivateDockerd, *args: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setenv("DOCKER_HOST", engine.url)
    out, err = io.StringIO(), io.StringIO()
    code = healerctl.main(["bundle", *args], out, err)
    return code, out.getvalue() + err.getvalue()


def source_tree(root: Path, *, extra: bool) -> Path:
    """conf.d with a service file (and its env file) and a project that builds."""
    conf_d = root / "conf.d"
    stack = conf_d / "stack"
    (stack / "built").mkdir(parents=True, exist_ok=True)
    command = json.dumps(COMMAND)
    web = (
        ""
        if extra
        else f"  web:\n    image: {APP}\n    command: {command}\n    env_file: web.env\n"
    )
    more = f"  extra:\n    image: {EXTRA}\n    command: {command}\n" if extra else ""
    (conf_d / "web.yaml").write_text(f"services:\n{web}{more}")
    (conf_d / "web.env").write_text("GREETING=hello\n")
    (stack / "built" / "Dockerfile").write_text(f"FROM {IMAGE}\nLABEL site=edge\n")
    (stack / "compose.yaml").write_text(
        f"services:\n  app:\n    image: {APP}\n    command: {command}\n"
        "    volumes: ['./data:/data']\n"
        f"  built:\n    build: ./built\n    image: {BUILT}\n"
        f"    command: {command}\n"
    )
    return conf_d


def run(api: docker.APIClient, container: str, script: str) -> str:
    exec_id = api.exec_create(container, ["sh", "-c", script])["Id"]
    out: bytes = api.exec_start(exec_id)
    assert api.exec_inspect(exec_id)["ExitCode"] == 0, out
    return out.decode()


def conf_state(conf_d: Path) -> list[tuple[str, str]]:
    return sorted(
        (str(p.relative_to(conf_d)), os.readlink(p) if p.is_symlink() else "")
        for p in conf_d.rglob("*")
    )


def flipped(bundle: Path, member: str, into: Path) -> Path:
    with tarfile.open(bundle) as tar:
        offset = tar.getmember(member).offset_data + 100
    data = bytearray(bundle.read_bytes())
    data[offset] ^= 0x01
    into.write_bytes(bytes(data))
    return into


def with_images_of(bundle: Path, donor: Path, into: Path) -> Path:
    """`bundle` with `donor`'s images.tar, its manifest's checksum made to match: a
    consistent archive that lacks an image its services name."""
    with tarfile.open(donor) as tar:
        stream = tar.extractfile("images.tar")
        assert stream is not None
        images = stream.read()
    with tarfile.open(bundle) as src, tarfile.open(into, "w") as dst:
        for info in src.getmembers():
            stream = src.extractfile(info)
            assert stream is not None
            data = stream.read()
            if info.name == "manifest.json":
                raw = json.loads(data)
                raw["images_sha256"] = hashlib.sha256(images).hexdigest()
                raw["images_size"] = len(images)
                data = json.dumps(raw).encode()
            elif info.name == "images.tar":
                data = images
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    return into


def test_a_bundle_brings_its_stack_up_on_a_host_with_no_registry(
    dockerd: PrivateDockerd,
    image: str,
    site_engine: PrivateDockerd,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src: docker.APIClient = dockerd.client(timeout=120)
    src.tag(image, *APP.rsplit(":", 1))
    src.tag(image, *EXTRA.rsplit(":", 1))
    conf_d_src = source_tree(tmp_path / "src", extra=False)
    list(src.build(path=str(conf_d_src / "stack" / "built"), tag=BUILT, rm=True, decode=True))
    nowhere = str(tmp_path / "no-config")
    v1 = tmp_path / "site.tar"
    code, said = ctl(dockerd, "create", "--config-dir", nowhere, "-o", str(v1),
                     str(conf_d_src), monkeypatch=monkeypatch)  # fmt: skip
    assert code == 0, said
    assert "4 file(s), 2 image(s)" in said and oct(v1.stat().st_mode & 0o777) == "0o600"
    source_tree(tmp_path / "src", extra=True)  # v2: web gone, extra new
    v2 = tmp_path / "site-v2.tar"
    code, said = ctl(dockerd, "create", "--config-dir", nowhere, "--name", "site", "-o", str(v2),
                     str(conf_d_src), monkeypatch=monkeypatch)  # fmt: skip
    assert code == 0, said

    site = site_engine.client(timeout=120)
    for ref in (APP, BUILT, EXTRA, IMAGE):
        with pytest.raises(docker.errors.ImageNotFound):
            site.inspect_image(ref)
    config = ConfigDir(tmp_path / "etc-healerd", IMAGE)
    h = Healerd(config.root, site_engine.url, tmp_path / "healerd.log")
    cluster = Cluster(site)
    h.start()
    try:
        # One byte changed: refused before anything is used.
        bad = flipped(v1, "images.tar", tmp_path / "tampered.tar")
        before = conf_state(config.conf_d)
        code, said = ctl(site_engine, "load", "--config-dir", str(config.root), str(bad),
                         monkeypatch=monkeypatch)  # fmt: skip
        assert code == 1 and "images.tar: sha256" in said and "nothing changed" in said, said
        assert conf_state(config.conf_d) == before
        with pytest.raises(docker.errors.ImageNotFound):
            site.inspect_image(APP)

        code, said = ctl(site_engine, "load", "--config-dir", str(config.root), str(v1),
                         monkeypatch=monkeypatch)  # fmt: skip
        assert code == 0 and "bundle site installed" in said, said
        for service in ("web", "app", "built"):
            wait_for(f"{service} running", lambda s=service: cluster.converged(s, 1), 30)
        env = site.inspect_container(cluster.running("web")[0]["Id"])["Config"]["Env"]
        assert "GREETING=hello" in env
        run(site, cluster.running("app")[0]["Id"], "echo rows > /data/db")

        # v2 lacking its new image: refused whole, v1 runs on.
        lacking = with_images_of(v2, v1, tmp_path / "lacking.tar")
        before = conf_state(config.conf_d)
        code, said = ctl(site_engine, "load", "--config-dir", str(config.root), str(lacking),
                         monkeypatch=monkeypatch)  # fmt: skip
        assert code == 1 and f"image {EXTRA} (service extra) is not in the engine" in said, said
        assert conf_state(config.conf_d) == before
        assert cluster.converged("web", 1) and not cluster.running("extra")

        code, said = ctl(site_engine, "load", "--config-dir", str(config.root), str(v2),
                         monkeypatch=monkeypatch)  # fmt: skip
        assert code == 0 and "bundle site replaced" in said, said
        wait_for("extra running", lambda: cluster.converged("extra", 1), 30)
        wait_for("web gone", lambda: not cluster.running("web"), 30)
        assert cluster.converged("app", 1) and cluster.converged("built", 1)
        # The data of ./data outlives v1's tree: a new container of app finds it.
        site.remove_container(cluster.running("app")[0]["Id"], force=True)
        wait_for("app replaced", lambda: cluster.converged("app", 1), 30)
        assert run(site, cluster.running("app")[0]["Id"], "cat /data/db") == "rows\n"
        # Labelled for the site at load: healerd never built it (no base image here).
        assert f"built {BUILT}" not in h.log() and "build" not in str(h.api("/v1/events"))
    finally:
        h.stop()
        cluster.remove_labelled()
        site.close()
        src.close()


def test_a_bundle_dropped_into_the_images_directory_brings_its_stack_up(
    dockerd: PrivateDockerd,
    image: str,
    site_engine: PrivateDockerd,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 35 point 2: no one runs healerctl at the site; the stick's bundle is copied
    into images_dir and healerd installs it (into state_dir/bundles: its unit may not
    write /etc) once the copy is complete."""
    src: docker.APIClient = dockerd.client(timeout=120)
    src.tag(image, *APP.rsplit(":", 1))
    conf_d_src = source_tree(tmp_path / "src", extra=False)
    list(src.build(path=str(conf_d_src / "stack" / "built"), tag=BUILT, rm=True, decode=True))
    bundle = tmp_path / "site.tar"
    code, said = ctl(dockerd, "create", "--config-dir", str(tmp_path / "no-config"),
                     "-o", str(bundle), str(conf_d_src), monkeypatch=monkeypatch)  # fmt: skip
    assert code == 0, said
    site = site_engine.client(timeout=120)
    config = ConfigDir(tmp_path / "etc-healerd", IMAGE)
    images = tmp_path / "images"
    images.mkdir(mode=0o700)
    config.settings(f"images_dir: {images}\n")
    h = Healerd(config.root, site_engine.url, tmp_path / "healerd.log")
    cluster = Cluster(site)
    h.start()
    try:
        with open(bundle, "rb") as f, open(images / "site.tar", "wb") as out:
            while chunk := f.read(1 << 20):
                out.write(chunk)
        for service in ("web", "app", "built"):
            wait_for(f"{service} running", lambda s=service: cluster.converged(s, 1), 60)
        assert (h.state_dir / "bundles" / "site.bundle").is_symlink()
        assert "installed bundle site.tar" in str(h.api("/v1/events"))
    finally:
        h.stop()
        cluster.remove_labelled()
        site.close()
        src.close()
