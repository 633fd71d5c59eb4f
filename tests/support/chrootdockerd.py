"""A private Debian 13 dockerd (docker.io 26.1, API 1.45): the second Docker engine the
integration tests run against (HEALERD_TEST_ENGINE=docker26, tests/support/engines.py).

Debian 12 has no newer docker.io than 20.10, so the engine comes from a Debian 13 (trixie)
root made with debootstrap: once per machine, cached as a tarball under
/var/cache/healerd-test by tests/support/debian_image.py (keyed by a hash of the suite,
the packages and the trim list, under a lock, so that two runs never debootstrap one
entry; about a minute), then unpacked into each run's own root (a few seconds).

The run's root directory *is* the engine's root, and is bound inside itself at its host
path, so that dockerd's socket, pidfile, data and exec roots have one path inside and on
the host, where PrivateDockerd keeps them (ROOT/docker.sock, ROOT/data, ...): the engine's
DockerRootDir, which healerd measures for disk pressure and image GC, is a real host
path, and PrivateDockerd's teardown and `reap_stale` (of a run that died) find what it
left (its dockerd by the root in the command line, containerd and the shims also by
their root directory).

Not a bare chroot, which ../shared/notes/machine-facts.md measured: under one, `docker
exec` (and so a health check) ran in the container's namespaces but in the *host's* root
directory (see LAUNCH). dockerd gets a mount namespace of its own, private (nothing
mounted there reaches the host, and its mounts go with its last process: no teardown
unmounts on the host), with the root bound on itself (`docker load` needs a mount point
there), proc, the host's /sys and /dev and the tests' temp dir (host_dirs: a service's
bind mount of a test's file), then pivot_root. It shares the host's network namespace:
the bridge is PrivateDockerd's, `--iptables=false`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from tests.support import debian_image
from tests.support.dockerd import PrivateDockerd

SUITE = "trixie"
PACKAGES = ("docker.io", "ca-certificates")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# Run by the host's sh in a mount namespace of dockerd's own (all private: nothing here
# propagates to the host's): the root bound on itself, proc, the host's /sys and /dev,
# then pivot_root into it and the host's tree unmounted. Not a bare chroot: a container's
# mount namespace is a copy of dockerd's, and setns into one (`docker exec`, health
# checks) lands at that namespace's root, which under a chroot is the host's `/`.
# The host directories after the root, up to "--", are bound at their own paths inside.
LAUNCH = """set -e
root=$1; shift
mount --bind "$root" "$root"
mkdir -p "$root$root"
mount --bind "$root" "$root$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
while [ "$1" != -- ]; do mkdir -p "$root$1"; mount --rbind "$1" "$root$1"; shift; done
shift
mkdir -p "$root/.host"
cd "$root"
pivot_root . .host
cd /
/usr/bin/umount -l /.host
exec "$@"
"""


def host_dirs() -> list[str]:
    """Where the tests keep the files their services bind (tmp_path: tests/conftest.py's
    PYTEST_DEBUG_TEMPROOT, else the temp dir): the engine must see them where a host's
    engine would, at the same path."""
    found = {os.environ.get("PYTEST_DEBUG_TEMPROOT", ""), tempfile.gettempdir()}
    return sorted(d for d in found if d.startswith("/") and os.path.isdir(d) and d != "/")


class ChrootDockerd(PrivateDockerd):
    """Debian 13's dockerd 26.1, run in a Debian 13 root unpacked at `root`."""

    def _command(self) -> list[str]:
        unshare = shutil.which("unshare") or "/usr/bin/unshare"
        return [
            unshare,
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            LAUNCH,
            "launch-dockerd",
            str(self.root),
            *host_dirs(),
            "--",
            "/usr/bin/env",
            f"PATH={PATH}",
            "/usr/sbin/dockerd",
            *self._common_args(),
        ]

    def start(self, timeout: float = 90.0) -> None:
        self._unpack()
        super().start(timeout)

    def _unpack(self) -> None:
        """The cached Debian 13 root, unpacked into the run's root (once per run)."""
        if (self.root / "usr/sbin/dockerd").exists():
            return
        tarball = debian_image.rootfs_tarball(PACKAGES, SUITE)
        self.root.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["tar", "-C", str(self.root), "--numeric-owner", "-xf", str(tarball)], check=True
        )
