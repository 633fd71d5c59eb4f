"""A test image large enough for a pull to take a while: the busybox test image
(tests/support/busybox_image.py) plus a file of random, incompressible bytes.

Every call makes a layer of its own (fresh random bytes), so two images built here never
share a blob: a pull of one cannot be served from another already on disk.
"""

from __future__ import annotations

import io
import os
import tarfile

import docker

from tests.support.busybox_image import rootfs_tar

MIB = 1024 * 1024


def big_rootfs_tar(mib: int) -> bytes:
    buf = io.BytesIO(rootfs_tar())
    with tarfile.open(fileobj=buf, mode="a") as tar:
        data = os.urandom(mib * MIB)
        info = tarfile.TarInfo("big/random.bin")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_big(api: docker.APIClient, ref: str, mib: int = 8) -> str:
    """Import `ref` (busybox plus `mib` MiB of random bytes); returns the reference."""
    repo, _, tag = ref.rpartition(":")
    changes = ['CMD ["/bin/sh"]', "ENV PATH=/bin"]
    api.import_image_from_data(big_rootfs_tar(mib), repository=repo, tag=tag, changes=changes)
    return ref
