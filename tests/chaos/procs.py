"""The chaos soak's own processes: a private dockerd and healerd.

Copied (and adapted) from tests/integration/harness.py rather than imported, so that the
soak does not change when the integration harness does. Differences:
- the bridge subnet is a /20 in 172.30.0.0/16 that no route or address of the host
  overlaps (the integration tests use 172.31.128.0/17, packaging/test-systemd.sh
  172.31.126.0/24), so a soak and the test suite can run side by side;
- stale runs are reaped only after checking that the pid in a pidfile really is the
  dockerd (or healerd) of that run, and a stale healerd is stopped too;
- healerd runs in its own session and writes a pidfile, so Ctrl-C reaches the soak only
  and a soak that died can be cleaned up by the next one.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import docker

REPO = Path(__file__).resolve().parents[2]
CHAOS_NET = ipaddress.IPv4Network("172.30.0.0/16")
T = TypeVar("T")


def wait_for(
    what: str, predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05
) -> T:
    """Poll `predicate` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
        except docker.errors.APIError as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last  # type: ignore[no-any-return]
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stop_pid(pid: int, must_contain: str, timeout: float) -> None:
    """SIGTERM, then SIGKILL at the timeout - only if the process is the one we think."""
    if not alive(pid) or must_contain not in cmdline(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid) and must_contain in cmdline(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


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


def pick_subnet(seed: int) -> str:
    """A /20 of 172.30.0.0/16 that overlaps nothing the host routes; the gateway's CIDR."""
    used = used_networks()
    slots = list(CHAOS_NET.subnets(new_prefix=20))
    for i in range(len(slots)):
        net = slots[(seed + i) % len(slots)]
        if not any(net.overlaps(u) for u in used):
            return f"{net.network_address + 1}/{net.prefixlen}"
    raise RuntimeError(f"no free /20 left in {CHAOS_NET} for the soak's bridge")


class ChaosDockerd:
    """A dockerd of our own (own socket, data and exec roots, own bridge, no iptables).

    Never `--bridge=none`: with it dockerd deletes the host's docker0. The bridge
    interface is made here and deleted at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        run_id = root.name.removeprefix("run-")
        self.bridge = f"hdc{run_id[-8:]}"
        self.subnet_file = root / "subnet"
        self.sock = root / "docker.sock"
        self.url = f"unix://{self.sock}"
        self.log_path = root / "dockerd.log"
        self.pidfile = root / "docker.pid"
        self.proc: subprocess.Popen[bytes] | None = None
        self.subnet: str | None = None

    def start(self) -> None:
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise RuntimeError("dockerd not installed: run tests/support/engine.sh")
        self.root.mkdir(parents=True, exist_ok=True)
        self._make_bridge()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [
                dockerd,
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
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        client = docker.APIClient(base_url=self.url, version="1.41", timeout=5)
        try:
            wait_for("private dockerd to answer", lambda: self._ping(client), 90, 0.1)
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
        if subprocess.run(["ip", "link", "show", self.bridge], capture_output=True).returncode:
            self.subnet = pick_subnet(os.getpid())
            self.subnet_file.write_text(self.subnet + "\n")
            for cmd in (
                ["ip", "link", "add", "name", self.bridge, "type", "bridge"],
                ["ip", "addr", "add", self.subnet, "dev", self.bridge],
                ["ip", "link", "set", self.bridge, "up"],
            ):
                subprocess.run(cmd, check=True, capture_output=True)

    def stop(self, timeout: float = 40.0) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def remove(self) -> None:
        """Delete the data and the bridge of a stopped engine (lazily unmounting what an
        engine that died left mounted there: network namespaces, overlay layers)."""
        prefix = str(self.root) + "/"
        with open("/proc/self/mounts") as f:
            mounts = [line.split()[1] for line in f if line.split()[1].startswith(prefix)]
        for mount in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.root)], check=False)
        subprocess.run(["ip", "link", "del", self.bridge], check=False, capture_output=True)

    @classmethod
    def reap_stale(cls, parent: Path) -> list[str]:
        """Stop and delete what soaks that died left behind (their pid is gone)."""
        reaped: list[str] = []
        if not parent.is_dir():
            return reaped
        for root in sorted(parent.glob("run-*")):
            try:
                owner = int(root.name.removeprefix("run-"))
            except ValueError:
                continue
            if owner == os.getpid() or (alive(owner) and "soak" in cmdline(owner)):
                continue
            pid = _read_pid(root / "healerd.pid")
            if pid is not None:
                _stop_pid(pid, str(root), timeout=10)
            pid = _read_pid(root / "docker.pid")
            if pid is not None:
                _stop_pid(pid, str(root), timeout=40)
            cls(root).remove()
            reaped.append(str(root))
        return reaped


class HealerdProc:
    """healerd as the operator runs it: a separate process with its own config dir."""

    def __init__(
        self, config_dir: Path, docker_host: str, socket: Path, log_path: Path, pidfile: Path
    ) -> None:
        self.config_dir = config_dir
        self.docker_host = docker_host
        self.socket = socket
        self.log_path = log_path
        self.pidfile = pidfile
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = 0
        self._log_offset = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "healerd",
                "--config-dir",
                str(self.config_dir),
                "--docker-host",
                self.docker_host,
                "--socket",
                str(self.socket),
                "--log-level",
                "debug",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        log.close()
        self.pidfile.write_text(f"{self.proc.pid}\n")
        self.incarnation += 1
        # Signals sent before healerd installed its handlers would kill it.
        wait_for("healerd ready", lambda: " ready: " in self.log() or not self.alive(), 60, 0.05)
        if not self.alive():
            raise RuntimeError(f"healerd exited at start:\n{self.log()[-3000:]}")

    def log(self, since_start: bool = True) -> str:
        with open(self.log_path, "rb") as f:
            if since_start:
                f.seek(self._log_offset)
            return f.read().decode(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError):
            self.pidfile.unlink()
        return self.proc.returncode
