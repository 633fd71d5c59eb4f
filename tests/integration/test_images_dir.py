"""The images directory against the private dockerd (issue 35, point 1).

Shown: an image that no registry has (made here, saved with the engine's save API, then
removed from the engine) written into `images_dir` by a slow copy (in pieces, with a
pause longer than the settle time, the file open for seconds) is never loaded while the
copy runs and is loaded once it is closed; a service with `pull_policy: missing` naming
it then runs without any registry; image GC, with thresholds every disk passes, keeps it
while the service declares it; a restart of healerd does not load it again. A corrupt
archive (a cut gzip) is refused with its reason, left in place, listed by `healerctl
images`, and not tried again after a restart.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import platform
import secrets
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.support.busybox_image import COMMAND, import_tagged, rootfs_tar
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

SETTLE = 2.0  # healerd.daemon.imagesdir.SETTLE


def distinct_rootfs(salt: str) -> bytes:
    """The busybox rootfs with one file of its own: an image (an ID) of its own."""
    buf = io.BytesIO(rootfs_tar())
    with tarfile.open(fileobj=buf, mode="a") as tar:
        data = f"images_dir {salt}\n".encode()
        info = tarfile.TarInfo("etc/images-dir")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def archive(api: docker.APIClient) -> Iterator[tuple[str, bytes]]:
    """(reference, a `docker save` tar of it): made, saved, then removed from the engine,
    so that only the archive has it (no registry has `healerd-images-*` either)."""
    salt = secrets.token_hex(3)
    ref = f"healerd-images-{salt}/app:1"
    import_tagged(api, distinct_rootfs(salt), ref, [])
    image_id = api.inspect_image(ref)["Id"]
    data = b"".join(api.get_image(ref))  # the engine's save API, streamed
    api.remove_image(image_id, force=True)
    with pytest.raises(docker.errors.ImageNotFound):
        api.inspect_image(ref)
    yield ref, data
    with contextlib.suppress(docker.errors.APIError):
        api.remove_image(ref, force=True)


def images_dir(config: ConfigDir, tmp_path: Path, extra: str = "") -> Path:
    directory = tmp_path / "images"
    directory.mkdir(mode=0o755)
    config.settings(f"images_dir: {directory}\n{extra}")
    return directory


def present(api: docker.APIClient, ref: str) -> bool:
    try:
        api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def kinds(healerd: Healerd, kind: str) -> list[dict[str, object]]:
    return [e for e in healerd.api("/v1/events")["events"] if e["kind"] == kind]


def slow_copy(data: bytes, dest: Path, api: docker.APIClient, ref: str) -> None:
    """Write `data` to `dest` as a slow `cp` would: in pieces, one pause longer than the
    settle time halfway, the file open throughout; the image must not appear meanwhile."""
    pieces = [data[i : i + (1 << 18)] for i in range(0, len(data), 1 << 18)]
    half = len(pieces) // 2
    began = time.monotonic()
    with dest.open("wb") as f:
        for n, piece in enumerate(pieces):
            f.write(piece)
            f.flush()
            time.sleep(SETTLE + 1.5 if n == half else 0.3)
            assert not present(api, ref), "loaded while the copy was still writing it"
    assert time.monotonic() - began > SETTLE * 2


def test_an_archive_copied_slowly_is_loaded_once_whole_and_runs_with_no_registry(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient, tmp_path: Path,
    archive: tuple[str, bytes],
) -> None:  # fmt: skip
    ref, data = archive
    directory = images_dir(
        config,
        tmp_path,
        "image_gc:\n  high_threshold_percent: 1\n  low_threshold_percent: 0\n"
        "  min_age: 0s\n  interval: 1s\n",
    )
    service = (
        "services:\n  app:\n"
        f"    image: {ref}\n    command: {json.dumps(COMMAND)}\n"
        "    stop_grace_period: 2s\n    pull_policy: missing\n    replicas: {n}\n"
    )
    config.write("app.yaml", service.format(n=1))
    healerd.start()
    wait_for("the pull to fail (no registry)", lambda: kinds(healerd, "pull-failed"), timeout=30)
    slow_copy(data, directory / "app.tar", api, ref)
    wait_for("the archive loaded", lambda: present(api, ref), timeout=30)
    wait_for("app running from the loaded image", lambda: cluster.converged("app", 1), timeout=60)
    # Never read half-written: a read would have refused the cut file (and said so).
    assert not kinds(healerd, "image-load-refused") and "images_dir: refused" not in healerd.log()
    (loaded,) = kinds(healerd, "image-loaded")
    assert ref in str(loaded["message"]) and "app.tar" in str(loaded["message"])
    assert healerd.log().count("images_dir: loading app.tar") == 1

    code, out, _ = healerd.ctl("images")
    assert code == 0
    row = next(line for line in out.splitlines() if ref in line)  # Podman: docker.io/...
    assert "app" in row and "loaded from app.tar" in row
    listed = healerd.api("/v1/images")["images"]
    (shown,) = [i for i in listed if any(t.endswith(ref) for t in i["tags"])]
    assert shown["services"] == ["app"] and shown["loaded"]["file"] == "app.tar"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        oci = "index.json" in tar.getnames()  # docker save of Docker 25 and later
    # An OCI layout carries its manifest's bytes: the digest it proves is recorded.
    assert bool(shown["loaded"]["manifests"]) is oci

    # Declared, unused (no replica), every disk over the threshold: image GC keeps it.
    config.write("app.yaml", service.format(n=0))
    assert healerd.ctl("reload")[0] == 0
    wait_for("app scaled to 0", lambda: not cluster.running("app"), timeout=30)
    wait_for("image GC to run", lambda: "image_gc high threshold 1%" in healerd.log(), timeout=30)
    time.sleep(3.0)  # a few more rounds (interval 1s)
    assert present(api, ref), "image GC removed a loaded image a declared service names"

    # A restart does not load it again.
    healerd.stop()
    healerd.start()
    time.sleep(SETTLE * 2 + 2)
    assert "images_dir: loading" not in healerd.log()
    assert not kinds(healerd, "image-loaded")
    state = json.loads((healerd.state_dir / "images-dir.json").read_text())
    assert [a["file"] for a in state["archives"]] == ["app.tar"]


def test_a_corrupt_archive_is_refused_with_its_reason_and_left_in_place(
    healerd: Healerd, config: ConfigDir, tmp_path: Path, api: docker.APIClient,
    archive: tuple[str, bytes],
) -> None:  # fmt: skip
    ref, data = archive
    directory = images_dir(config, tmp_path)
    cut = gzip.compress(data)[: len(data) // 4]
    broken = directory / "broken.tar.gz"
    broken.write_bytes(cut)
    os.chmod(broken, 0o644)
    healerd.start()
    wait_for("the refusal", lambda: kinds(healerd, "image-load-refused"), timeout=30)
    (refused,) = kinds(healerd, "image-load-refused")
    assert "broken.tar.gz" in str(refused["message"])
    assert "not a whole image archive" in str(refused["message"])
    assert broken.read_bytes() == cut and not present(api, ref)
    code, out, _ = healerd.ctl("images")
    assert code == 0 and f"refused: {directory}/broken.tar.gz: not a whole image archive" in out
    time.sleep(SETTLE * 2)
    assert len(kinds(healerd, "image-load-refused")) == 1  # not tried again
    healerd.stop()
    healerd.start()
    time.sleep(SETTLE * 2 + 2)
    assert not kinds(healerd, "image-load-refused")  # nor after a restart
    assert "refused: " in healerd.ctl("images")[1]  # still listed, still there
    assert broken.exists()


def registry_shaped(rootfs: bytes) -> tuple[bytes, str, str]:
    """(archive, manifest digest, image ID): an image as a registry serves it (a gzip
    layer, its config, a schema 2 manifest), saved as `skopeo copy ... oci-archive:` or
    Docker's containerd store writes it: an OCI layout whose blobs carry the manifest's
    own bytes, beside the `manifest.json` that Docker 20.10's load reads."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    layer = gzip.compress(rootfs, mtime=0)
    config = json.dumps(
        {
            "architecture": arch,
            "os": "linux",
            "config": {"Cmd": COMMAND},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{sha256(rootfs)}"]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": f"sha256:{sha256(config)}",
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer),
                    "digest": f"sha256:{sha256(layer)}",
                }
            ],
        }
    ).encode()
    blob = {sha256(b): b for b in (layer, config, manifest)}
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "digest": f"sha256:{sha256(manifest)}",
                "size": len(manifest),
            }
        ],
    }
    docker_manifest = [
        {
            "Config": f"blobs/sha256/{sha256(config)}",
            "RepoTags": None,
            "Layers": [f"blobs/sha256/{sha256(layer)}"],
        }
    ]
    files = {
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
        "index.json": json.dumps(index).encode(),
        "manifest.json": json.dumps(docker_manifest).encode(),
        **{f"blobs/sha256/{h}": b for h, b in blob.items()},
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue(), f"sha256:{sha256(manifest)}", f"sha256:{sha256(config)}"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_pinned_digest_runs_from_an_archive_that_carries_its_manifest(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient, tmp_path: Path,
) -> None:  # fmt: skip
    """Docker's own store keeps no digest for a loaded image: the digest healerd hashed
    in the archive stands for it, with no registry (the one named refuses connections)."""
    data, digest, image_id = registry_shaped(distinct_rootfs(secrets.token_hex(3)))
    ref = f"127.0.0.1:1/site/app@{digest}"
    directory = images_dir(config, tmp_path)
    config.write(
        "app.yaml",
        f"services:\n  app:\n    image: {ref}\n    stop_grace_period: 2s\n    replicas: 2\n",
    )
    healerd.start()
    try:
        wait_for("the pull to fail (no registry)", lambda: kinds(healerd, "pull-failed"), 30)
        (directory / ".app.tar.part").write_bytes(data)
        (directory / ".app.tar.part").rename(directory / "app.tar")
        wait_for("app running from the archive", lambda: cluster.converged("app", 2), 60)
        for c in cluster.containers("app"):
            assert api.inspect_container(c["Id"])["Image"] == image_id
        assert not present(api, ref), "the engine itself knows no digest of a loaded image"
        (shown,) = [i for i in healerd.api("/v1/images")["images"] if i["id"] == image_id]
        assert shown["services"] == ["app"] and shown["loaded"]["manifests"] == [digest]
        failed = len(kinds(healerd, "pull-failed"))
        victim = cluster.containers("app")[0]["Id"]
        api.remove_container(victim, force=True)  # healed by a create: from the archive
        wait_for(
            "app healed",
            lambda: (
                cluster.converged("app", 2)
                and victim not in {c["Id"] for c in cluster.containers("app")}
            ),
            30,
        )
        assert len(kinds(healerd, "pull-failed")) == failed and not kinds(healerd, "pulled")
    finally:
        healerd.stop()
        cluster.remove_labelled()
        with contextlib.suppress(docker.errors.APIError):
            api.remove_image(image_id, force=True)
