"""A private dockerd: its own socket, data and exec roots and bridge, no iptables.

The integration tests, the chaos soak and the benchmarks each run one (under
/var/lib/healerd-test, -chaos and -bench), so that they can stop, restart or kill it
without disturbing the host's engine or its containers, and two runs on one machine
cannot disturb each other.

Never `--bridge=none`: with it dockerd deletes the host's docker0. The engine's bridge
interface is made here, on a /20 that no address or route of the host overlaps, and
deleted at the end. The pools, so that the suites can run side by side:
- TEST_POOL 10.231.128.0/17: the integration tests' engine and the benchmarks';
- DISK_POOL 10.231.0.0/17: the integration tests' small-disk engine (test_faults.py);
- CHAOS_POOL 10.230.0.0/16: the chaos soak;
- 10.232.126.0/24 (packaging/test-systemd.sh) and 10.232.125.0/24
  (packaging/test-readme-commands.sh) are never taken.
None of them lies in an engine's default pools (Docker: the /16s of 172.17-31 and the
/20s of 192.168.0.0/16; Podman: 10.88.0.0/16 and 10.89.0.0/16): every Compose network
any engine on the host makes takes one of those, and once one took 172.30.0.0/16, the
chaos pool of then, whole (CI: "no free /20 left in 172.30.0.0/16").

The bridges of an engine's user-defined networks (Compose projects) are deleted with
it too (`remove()`, from the network ids in its store), so that an engine that died
leaks none: one such bridge left on the host, a /16 of 172.17-31, is a route that some
other engine's network may need. No `--default-address-pool` to keep them apart: with
it, dockerd 20.10 deletes the host's docker0 when it starts a second time on the same
data root.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import docker
import psutil

from tests.support.polling import wait_for
from tests.support.processes import alive, cmdline, read_pid, stop_pid, terminate

TEST_POOL = ipaddress.IPv4Network("10.231.128.0/17")
DISK_POOL = ipaddress.IPv4Network("10.231.0.0/17")
CHAOS_POOL = ipaddress.IPv4Network("10.230.0.0/16")
RESERVED = (  # packaging/test-systemd.sh, packaging/test-readme-commands.sh
    ipaddress.IPv4Network("10.232.126.0/24"),
    ipaddress.IPv4Network("10.232.125.0/24"),
)
API_VERSION = "1.41"


# -- networks -----------------------------------------------------------------------------


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the host has an address in or a route to."""
    nets: list[ipaddress.IPv4Network] = []
    for cmd in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        for word in out.split():
            if "/" in word or word.count(".") == 3:
                with contextlib.suppress(ValueError):
                    net = ipaddress.ip_network(word, strict=False)
                    if isinstance(net, ipaddress.IPv4Network) and net.prefixlen > 0:
                        nets.append(net)
    return nets


def pick_subnet(pool: ipaddress.IPv4Network, seed: int) -> str:
    """A /20 of `pool` that overlaps no address or route of the host and nothing
    RESERVED, tried from slot `seed`; returned as the gateway's CIDR."""
    taken = [*used_networks(), *RESERVED]
    slots = list(pool.subnets(new_prefix=20))
    for i in range(len(slots)):
        net = slots[(seed + i) % len(slots)]
        if not any(net.overlaps(t) for t in taken):
            return f"{net.network_address + 1}/{net.prefixlen}"
    holders = sorted({str(t) for t in taken if t.overlaps(pool)})
    raise RuntimeError(
        f"no free /20 left in {pool} for a private dockerd's bridge (taken by {holders}:"
        " bridges left by an engine that died? `ip -4 addr show type bridge`)"
    )


# -- the engine -----------------------------------------------------------------------------


class PrivateDockerd:
    """A dockerd of our own under `root` (named run-<owner pid>): socket, pidfile, data
    and exec roots, log and bridge all its own."""

    def __init__(
        self,
        root: Path,
        *,
        bridge_prefix: str = "hdt",
        pool: ipaddress.IPv4Network = TEST_POOL,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.root = root
        run_id = root.name.removeprefix("run-")
        self.bridge = f"{bridge_prefix}{run_id[-8:]}"
        bridge_file = root / "bridge"  # what reap_stale finds in an earlier run's root
        if bridge_file.exists():
            self.bridge = bridge_file.read_text().strip() or self.bridge
        self.pool = pool
        self.extra_args = list(extra_args)
        self.subnet: str | None = None  # the bridge's gateway CIDR, once it is made
        self.sock = root / "docker.sock"
        self.url = f"unix://{self.sock}"
        self.log_path = root / "dockerd.log"
        self.pidfile = root / "docker.pid"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def _marker(self) -> str:
        """In the command line of this root's dockerd and healerd, and no other's."""
        return f"{self.root}/"

    def client(self, timeout: float = 30) -> docker.APIClient:
        return docker.APIClient(base_url=self.url, version=API_VERSION, timeout=timeout)

    def _command(self) -> list[str]:
        """dockerd's command line (ChrootDockerd runs another dockerd in a chroot)."""
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise RuntimeError("dockerd not installed: run tests/support/engine.sh (or .ci/run)")
        return [dockerd, *self._common_args()]

    def _common_args(self) -> list[str]:
        """Every dockerd's own paths (the same inside ChrootDockerd's root) and network."""
        return [
            "--host",
            self.url,
            "--data-root",
            str(self.root / "data"),
            "--exec-root",
            str(self.root / "exec"),
            "--pidfile",
            str(self.pidfile),
            f"--bridge={self.bridge}",
            "--iptables=false",
            "--ip6tables=false",
            "--ip-masq=false",
            *self.extra_args,
        ]

    def start(self, timeout: float = 90.0) -> None:
        command = self._command()
        self.root.mkdir(parents=True, exist_ok=True)
        # One left running for this root (a run whose pid was reused) would hold the socket.
        stop_pid(read_pid(self.pidfile), self._marker, timeout=30)
        self._make_bridge()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        client = self.client(timeout=5)
        try:
            wait_for("private dockerd to answer", lambda: self._ping(client), timeout, 0.1)
        finally:
            client.close()

    def _ping(self, client: docker.APIClient) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"dockerd exited: {self.log_path.read_text()[-2000:]}")
        try:
            return bool(client.ping())
        except Exception:
            return False

    def _make_bridge(self) -> None:
        (self.root / "bridge").write_text(self.bridge + "\n")
        if subprocess.run(["ip", "link", "show", self.bridge], capture_output=True).returncode:
            self.subnet = pick_subnet(self.pool, os.getpid())
            for cmd in (
                ["ip", "link", "add", "name", self.bridge, "type", "bridge"],
                ["ip", "addr", "add", self.subnet, "dev", self.bridge],
                ["ip", "link", "set", self.bridge, "up"],
            ):
                subprocess.run(cmd, check=True, capture_output=True)
        elif self.subnet is None:
            out = subprocess.run(
                ["ip", "-4", "-o", "addr", "show", "dev", self.bridge],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.split()
            self.subnet = out[out.index("inet") + 1] if "inet" in out else None

    def stop(self, timeout: float = 40.0) -> None:
        """SIGTERM (the engine stops its containers), SIGKILL at the timeout."""
        if self.proc is not None:
            terminate(self.proc, timeout)
            self.proc = None

    def kill(self) -> None:
        """SIGKILL: the engine dies at once (its containers' shims live on)."""
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove_all(self) -> None:
        """Remove every container and user-defined network, best effort (user networks
        leave bridge interfaces in the host). Gives up at the first failure."""
        client = self.client(timeout=15)
        try:
            for c in client.containers(all=True):
                with contextlib.suppress(docker.errors.NotFound):
                    client.remove_container(c["Id"], force=True)
            for net in client.networks():
                if net["Name"] not in ("bridge", "host", "none"):
                    client.remove_network(net["Id"])
        except Exception:  # best effort at teardown
            pass
        finally:
            client.close()

    def remove(self) -> None:
        """Delete the data and the bridge of a stopped engine (lazily unmounting what an
        engine that died left mounted there: network namespaces, overlay layers)."""
        self._kill_containers()
        for mount in sorted(self._mounts(), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        leaked = self._network_bridges()
        if left := self._mounts():
            # Never rm -rf across a mount (a chroot's bind of the host's /dev or /sys):
            # --one-file-system does not see a bind of the same file system.
            print(f"{self.root} kept: still mounted there: {left}", file=sys.stderr)
        else:
            subprocess.run(["rm", "-rf", "--one-file-system", str(self.root)], check=False)
        for bridge in (self.bridge, *leaked):
            subprocess.run(["ip", "link", "del", bridge], check=False, capture_output=True)

    def _mounts(self) -> list[str]:
        """What is mounted at or under the root (the root itself, for a chroot's)."""
        with open("/proc/self/mounts") as f:
            points = [line.split()[1] for line in f]
        return [m for m in points if m == str(self.root) or m.startswith(self._marker)]

    def _kill_containers(self) -> None:
        """The containers of an engine killed at its stop's deadline: their shims outlive
        it, and so do they (a bench run stopped at 900 left 900 sleeping, which slowed
        the next run's engine by a third). Each shim's children, then the shim; and any
        process whose root is this root (a ChrootDockerd's containerd and shims, whose
        command lines name paths inside its root only)."""
        shims = []
        for p in psutil.process_iter(["cmdline"]):
            line = " ".join(p.info["cmdline"] or ())
            if ("containerd-shim" in line and self._marker in line) or self._chrooted(p.pid):
                shims.append(p)
        for shim in shims:
            with contextlib.suppress(psutil.Error):
                for child in shim.children():
                    child.kill()
                shim.kill()
        psutil.wait_procs(shims, timeout=10)

    def _chrooted(self, pid: int) -> bool:
        """Whether the process's root directory is this root (by inode, so that a root
        pivoted into in another mount namespace counts too)."""
        try:
            theirs, ours = os.stat(f"/proc/{pid}/root"), os.stat(self.root)
        except OSError:
            return False
        return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)

    def _network_bridges(self) -> list[str]:
        """The host bridges of this engine's user-defined networks: br-<id[:12]> for the
        network ids in its store (random ids: another engine's are not there). Not
        docker_gwbridge: one name for the whole host, it may be another engine's."""
        store = self.root / "data" / "network" / "files" / "local-kv.db"
        try:
            data = store.read_bytes()
        except OSError:
            return []
        names = {f"br-{i[:12].decode()}" for i in re.findall(rb"[0-9a-f]{64}", data)}
        out = subprocess.run(
            ["ip", "-o", "link", "show", "type", "bridge"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        found = (line.split()[1].rstrip(":") for line in out.splitlines() if " " in line)
        return [name for name in found if name in names]

    def teardown(self, save_log: Path | None = None) -> None:
        """The end of a run: containers and networks removed if the engine runs, the
        engine stopped, its log copied to `save_log`, its data and bridge deleted."""
        if self.proc is not None:
            self.remove_all()
        self.stop()
        if save_log is not None:
            with contextlib.suppress(OSError):
                shutil.copy(self.log_path, save_log)
        self.remove()

    @classmethod
    def owns(cls, root: Path) -> bool:
        """Whether `root` is an engine of this class's kind (a Podman's has its own
        containers.conf: tests/support/podman.py)."""
        return not (root / "containers.conf").exists()

    @classmethod
    def reap_stale(cls, parent: Path, owner_marker: str | None = None) -> list[Path]:
        """Stop and delete what runs that died left in `parent` (their dockerd and healerd,
        if pidfiles name them, mounts, data, bridge). A run-<pid> directory is kept while
        that pid lives (and, with `owner_marker`, has it in its command line)."""
        reaped: list[Path] = []
        if not parent.is_dir():
            return reaped
        for root in sorted(parent.glob("run-*")):
            try:
                owner = int(root.name.removeprefix("run-"))
            except ValueError:
                continue
            if (
                not cls.owns(root)
                or owner == os.getpid()
                or (alive(owner) and (owner_marker is None or owner_marker in cmdline(owner)))
            ):
                continue
            stale = cls(root)
            stop_pid(read_pid(root / "healerd.pid"), stale._marker, timeout=10)
            stop_pid(read_pid(stale.pidfile), stale._marker, timeout=40)
            stale.remove()
            reaped.append(root)
        return reaped
