"""Build a tiny local image from Debian's busybox-static: there is no registry to pull from.

Usage: python3 tests/support/busybox_image.py [IMAGE_REF] [--docker-host URL]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tarfile

import docker

BUSYBOX = "/bin/busybox"
APPLETS = [
    "sh",
    "sleep",
    "true",
    "false",
    "test",
    "touch",
    "kill",
    "wget",
    "nc",
    "httpd",
    "cat",
    "echo",
    "ls",
    "ps",
    "date",
    "env",
    "mkdir",
    "rm",
]
DEFAULT_REF = "healerd-test/busybox:1"
# A container's command that runs until stopped: sh as PID 1 with a TERM trap exits at
# once on `docker stop` (busybox sleep as PID 1 would ignore SIGTERM).
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 86400 & wait"]


def rootfs_tar(busybox: str = BUSYBOX) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "tmp", "etc", "www"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        with open(busybox, "rb") as f:
            data = f.read()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        page = b"hello from healerd\n"
        info = tarfile.TarInfo("www/index.html")
        info.size = len(page)
        tar.addfile(info, io.BytesIO(page))
    return buf.getvalue()


def has_image(api: docker.APIClient, ref: str) -> bool:
    """Whether the engine has `ref` (Podman names it docker.io/REF)."""
    repo = ref.rpartition(":")[0]
    names = {ref, f"docker.io/{ref}", f"docker.io/library/{ref}"}
    return any(names & set(img.get("RepoTags") or ()) for img in api.images(name=repo))


def import_tagged(api: docker.APIClient, data: bytes, ref: str, changes: list[str]) -> None:
    """`docker import` as REF. Podman 4.3's compat import ignores the tag (it names the
    image REPO:latest): the tag is then set on its own."""
    repo, _, tag = ref.rpartition(":")
    answer = api.import_image_from_data(data, repository=repo, tag=tag, changes=changes)
    if not has_image(api, ref):
        image_id = json.loads(str(answer).splitlines()[-1]).get("status") or f"{repo}:latest"
        api.tag(image_id, repo, tag)


def build(api: docker.APIClient, ref: str = DEFAULT_REF, *, volume: str | None = None) -> str:
    """Import the image unless it is there already; returns the reference. `volume`: a
    mount point the image declares as a VOLUME (as postgres or mosquitto images do)."""
    if has_image(api, ref):
        return ref
    if not os.path.exists(BUSYBOX):
        raise SystemExit("no /bin/busybox: apt-get install busybox-static")
    changes = ['CMD ["/bin/sh"]', "ENV PATH=/bin"]
    if volume:
        changes.append(f'VOLUME ["{volume}"]')
    import_tagged(api, rootfs_tar(), ref, changes)
    return ref


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("ref", nargs="?", default=DEFAULT_REF)
    p.add_argument(
        "--docker-host", default=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    )
    args = p.parse_args()
    api = docker.APIClient(base_url=args.docker_host, version="1.41")
    print(build(api, args.ref))


if __name__ == "__main__":
    main()
