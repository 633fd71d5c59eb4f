"""Integration harness: a private dockerd we may restart, and healerd as a real process."""

from __future__ import annotations

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

from healerd.model import LABEL_SERVICE, LABEL_SPEC_HASH

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_for(
    what: str, predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02
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
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def holds_for(what: str, predicate: Callable[[], bool], duration: float) -> None:
    """Assert that `predicate` stays true for `duration` seconds (a bounded watch, not a sleep)."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        assert predicate(), f"{what} stopped holding"
        time.sleep(0.05)


class PrivateDockerd:
    """A dockerd of our own (own socket, data and exec roots, own bridge, no iptables),
    so tests can stop and restart it without disturbing the host's engine.

    Not `--bridge=none`: with it dockerd deletes the host's docker0, breaking the
    system engine. Its own bridge interface is made here and deleted at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        run_id = root.name.removeprefix("run-")
        self.bridge = f"hdt{run_id[-8:]}"
        # A /20 per run (room for 4000 containers) in 172.31.128.0/17, only ever used
        # between the host and its containers on this bridge.
        n = int(run_id) if run_id.isdigit() else 0
        self.subnet = f"172.31.{128 + 16 * (n % 8)}.1/20"
        self.sock = root / "docker.sock"
        self.url = f"unix://{self.sock}"
        self.log_path = root / "dockerd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise RuntimeError("dockerd not installed: run tests/support/engine.sh (or .ci/run)")
        self.root.mkdir(parents=True, exist_ok=True)
        self._kill_stale()
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
                str(self.root / "docker.pid"),
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
        client = docker.APIClient(base_url=self.url, version="1.41", timeout=5)
        try:
            wait_for(
                "private dockerd to answer", lambda: self._ping(client), timeout=60, interval=0.1
            )
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

    def _kill_stale(self) -> None:
        pidfile = self.root / "docker.pid"
        if pidfile.exists():
            try:
                pid = int(pidfile.read_text().strip())
                os.kill(pid, signal.SIGTERM)
                wait_for("stale dockerd to exit", lambda: not _alive(pid), timeout=30)
            except (ValueError, ProcessLookupError):
                pass

    def _make_bridge(self) -> None:
        if subprocess.run(["ip", "link", "show", self.bridge], capture_output=True).returncode:
            for cmd in (
                ["ip", "link", "add", "name", self.bridge, "type", "bridge"],
                ["ip", "addr", "add", self.subnet, "dev", self.bridge],
                ["ip", "link", "set", self.bridge, "up"],
            ):
                subprocess.run(cmd, check=True, capture_output=True)

    def remove_networks(self) -> None:
        """User-defined networks leave bridge interfaces in the host: remove them first."""
        client = docker.APIClient(base_url=self.url, version="1.41", timeout=10)
        try:
            for net in client.networks():
                if net["Name"] not in ("bridge", "host", "none"):
                    for cid in net.get("Containers") or {}:
                        client.remove_container(cid, force=True)
                    client.remove_network(net["Id"])
        except Exception:  # best effort at teardown
            pass
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=40)
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
    def reap_stale(cls, parent: Path) -> None:
        """Stop and delete the engines of earlier runs whose pytest process is gone."""
        if not parent.is_dir():
            return
        for root in parent.glob("run-*"):
            try:
                owner = int(root.name.removeprefix("run-"))
            except ValueError:
                continue
            if owner != os.getpid() and _alive(owner):
                continue
            stale = cls(root)
            stale._kill_stale()
            stale.remove()

    def restart(self) -> None:
        self.stop()
        self.start()


def _timestamp(t: float) -> str:
    """The engine reads `S.N` with N as nanoseconds, so write all nine digits."""
    return f"{int(t)}.{int((t % 1) * 1e9):09d}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Healerd:
    """healerd as the operator runs it: a separate process with its own config dir."""

    def __init__(self, config_dir: Path, docker_host: str, log_path: Path) -> None:
        self.config_dir = config_dir
        self.docker_host = docker_host
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def start(self, *extra: str) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self._log_offset = self.log_path.stat().st_size
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
                str(self.config_dir / "healerd.sock"),
                "--log-level",
                "debug",
                *extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        # Signals sent before healerd installed its handlers would kill it.
        wait_for("healerd ready", lambda: " ready: " in self.log() or not self.alive(), timeout=15)
        assert self.alive(), f"healerd exited at start:\n{self.log()}"

    def log(self, since_start: bool = True) -> str:
        text = self.log_path.read_text(errors="replace")
        return text[self._log_offset :] if since_start else text

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


class Cluster:
    """What a test sees of the engine: healerd's containers by service, and event counts."""

    def __init__(self, api: docker.APIClient) -> None:
        self.api = api

    def containers(self, service: str, *, all: bool = True) -> list[dict[str, Any]]:
        return list(self.api.containers(all=all, filters={"label": f"{LABEL_SERVICE}={service}"}))

    def running(self, service: str) -> list[dict[str, Any]]:
        return [c for c in self.containers(service) if c["State"] == "running"]

    def converged(self, service: str, replicas: int, spec_hash: str | None = None) -> bool:
        """Exactly `replicas` containers exist for the service, all running (and current)."""
        cs = self.containers(service)
        if len(cs) != replicas or any(c["State"] != "running" for c in cs):
            return False
        return spec_hash is None or all(c["Labels"][LABEL_SPEC_HASH] == spec_hash for c in cs)

    def count_events(self, service: str, action: str, since: float) -> int:
        stream = self.api.events(
            since=_timestamp(since),
            until=_timestamp(time.time() + 0.001),
            filters={"type": "container", "event": action, "label": f"{LABEL_SERVICE}={service}"},
            decode=True,
        )
        return sum(1 for _ in stream)
