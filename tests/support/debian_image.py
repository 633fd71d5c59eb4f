"""Build a local image of real software from Debian 12 packages: there is no registry to
pull from, but deb.debian.org answers.

`debootstrap --variant=minbase --include=PACKAGES bookworm` makes a root filesystem, the
docs, man pages and locales are trimmed, and the rootfs is kept as a tarball under
CACHE_DIR, named by a hash of the suite, the packages and the trimming, so that only the
first run on a machine pays for debootstrap (about a minute); every later run (each
pytest run has a private dockerd of its own) imports the tarball in seconds, as
`docker import` would, through the SDK (like tests/support/busybox_image.py).

One rootfs holds every package a test stack needs (STACK_PACKAGES): a single debootstrap,
a single cache entry, and the services differ only by their commands.

Usage: python3 tests/support/debian_image.py [--docker-host URL] [--package P ...]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import docker

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
CACHE_DIR = Path(os.environ.get("HEALERD_TEST_CACHE", "/var/cache/healerd-test"))
# A broker and its clients, a reverse proxy, busybox (httpd for a tiny HTTP service,
# wget/nc for probes) and procps (ps, for a post-mortem in a failing test).
STACK_PACKAGES = ("mosquitto", "mosquitto-clients", "nginx-light", "busybox", "procps")
# What a test image never needs; a change here makes a new cache entry (the key covers it).
TRIM = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/linda",
    "var/cache/apt",
    "var/cache/debconf/templates.dat-old",
    "var/lib/apt/lists",
)
CHANGES = (
    'CMD ["/bin/sh"]',
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
)
DEBOOTSTRAP_TIMEOUT = 900.0


def cache_key(packages: Sequence[str], suite: str = SUITE) -> str:
    """12 hex digits naming the rootfs: the suite, the sorted packages and the trim list."""
    text = f"{suite} {','.join(sorted(set(packages)))} trim={','.join(TRIM)}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def image_ref(packages: Sequence[str] = STACK_PACKAGES, suite: str = SUITE) -> str:
    return f"healerd-test/debian:{suite}-{cache_key(packages, suite)}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (two test runs must not debootstrap one entry)."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def rootfs_tarball(
    packages: Sequence[str] = STACK_PACKAGES, suite: str = SUITE, cache: Path = CACHE_DIR
) -> Path:
    """The cached rootfs tarball for these packages, made with debootstrap if missing."""
    key = cache_key(packages, suite)
    tarball = cache / f"{suite}-{key}.tar"
    if tarball.is_file() and tarball.stat().st_size > 0:
        return tarball
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / f"{suite}-{key}.lock"):
        if not (tarball.is_file() and tarball.stat().st_size > 0):  # another run made it
            _debootstrap(sorted(set(packages)), suite, tarball)
    return tarball


def _debootstrap(packages: list[str], suite: str, tarball: Path) -> None:
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"  # PATH may lack sbin
    if not os.path.exists(debootstrap):
        raise RuntimeError("debootstrap missing: run tests/support/engine.sh (installs it)")
    rootfs = Path(tempfile.mkdtemp(prefix="rootfs.", dir=tarball.parent))
    log = tarball.with_suffix(".debootstrap.log")
    try:
        with open(log, "wb") as out:
            done = subprocess.run(
                [
                    debootstrap,
                    "--variant=minbase",
                    f"--include={','.join(packages)}",
                    suite,
                    str(rootfs),
                    MIRROR,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=DEBOOTSTRAP_TIMEOUT,
                check=False,
            )
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"debootstrap failed ({done.returncode}), {log}:\n{tail}")
        _trim(rootfs)
        partial = tarball.with_suffix(".tar.tmp")
        subprocess.run(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."],
            check=True,
        )
        partial.replace(tarball)
    finally:
        _remove_rootfs(rootfs)


def _trim(rootfs: Path) -> None:
    """Empty TRIM's directories (kept, empty: packages expect some of them) and /dev
    (the engine mounts its own). Never while anything is mounted in the rootfs: with the
    host's /dev bind-mounted there (debootstrap does that in some containers), emptying
    it would empty the host's."""
    prefix = f"{rootfs}/"
    with open("/proc/self/mounts") as f:
        mounted = [line.split()[1] for line in f if line.split()[1].startswith(prefix)]
    if mounted:
        raise RuntimeError(f"still mounted in the rootfs after debootstrap: {mounted}")
    for rel in (*TRIM, "dev"):
        path = rootfs / rel
        if path.is_dir():
            for child in path.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        elif path.exists():
            path.unlink()


def _remove_rootfs(rootfs: Path) -> None:
    """Remove a rootfs, never crossing into a file system debootstrap left mounted in it
    (its proc or sys after a failure)."""
    for mount in ("proc", "sys", "dev/pts", "dev"):
        subprocess.run(["umount", "-l", str(rootfs / mount)], capture_output=True, check=False)
    subprocess.run(["rm", "-rf", "--one-file-system", str(rootfs)], check=False)


def build(
    api: docker.APIClient,
    packages: Sequence[str] = STACK_PACKAGES,
    *,
    suite: str = SUITE,
    cache: Path = CACHE_DIR,
) -> str:
    """Import the image for `packages` into the engine unless it is there already (from
    the cached tarball, made first if missing); returns its reference."""
    ref = image_ref(packages, suite)
    repo, _, tag = ref.rpartition(":")
    if any(ref in (img.get("RepoTags") or []) for img in api.images(name=repo)):
        return ref
    tarball = rootfs_tarball(packages, suite, cache)
    api.import_image_from_file(str(tarball), repository=repo, tag=tag, changes=list(CHANGES))
    return ref


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "--docker-host", default=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    )
    p.add_argument("--package", action="append", help=f"default: {' '.join(STACK_PACKAGES)}")
    args = p.parse_args()
    packages = tuple(args.package or STACK_PACKAGES)
    t0 = time.monotonic()
    tarball = rootfs_tarball(packages)
    t1 = time.monotonic()
    api = docker.APIClient(base_url=args.docker_host, version="1.41", timeout=300)
    ref = build(api, packages)
    t2 = time.monotonic()
    size = tarball.stat().st_size / 2**20
    print(f"{ref}: rootfs {tarball} ({size:.0f} MiB) in {t1 - t0:.1f}s, import {t2 - t1:.1f}s")


if __name__ == "__main__":
    main()
