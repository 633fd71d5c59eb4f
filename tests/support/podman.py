"""A private Podman 4.3 (Debian 12's `podman`) serving its Docker-compatible socket, with
PrivateDockerd's interface, so that the integration tests run on it unchanged
(HEALERD_TEST_ENGINE=podman, tests/support/engines.py).

Everything of its own under `root`: storage (`--root`, `--runroot`), containers.conf
(CONTAINERS_CONF), registries.conf, network configs, file locks (not the host's shared
memory locks), its event log; it never touches the host's podman or docker.

What Podman needs here (../shared/notes/machine-facts.md): root cannot raise resource
limits and Podman asks 1,048,576 open files and processes per container, so the
containers.conf gives `default_ulimits` below this process's own hard limits. Its default
network is one of ours (its bridge named like PrivateDockerd's, a /20 of the pool), and
the networks Compose projects make take /24s of that /20.

Unlike dockerd, stopping `podman system service` stops no container: containers live
under their conmon. `stop()` stops them first (as dockerd's shutdown does) so that the
tests' engine restarts mean the same on both; `kill()` leaves them, as dockerd's SIGKILL.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

import docker
import psutil

from tests.support.dockerd import PrivateDockerd, pick_subnet
from tests.support.polling import wait_for
from tests.support.processes import stop_pid, terminate

# Netavark 1.4 keeps its IPAM database and aardvark-dns's configs here for every rootful
# Podman of the host (no setting moves it in 4.3): one aardvark-dns serves them all.
NETWORK_RUN_DIR = Path("/run/containers/networks")

# Registries on this host over plain HTTP (tests/support/registry.py): Docker allows
# 127.0.0.0/8 by itself, Podman only where registries.conf says so.
INSECURE = ("127.0.0.1", "localhost")


def _limits() -> list[str]:
    """default_ulimits: this process's own hard limits, capped (root may lower, never
    raise them; dockerd's containers inherit dockerd's)."""
    out = []
    for name, which, cap in (
        ("nofile", resource.RLIMIT_NOFILE, 1 << 20),
        ("nproc", resource.RLIMIT_NPROC, 1 << 15),
    ):
        hard = resource.getrlimit(which)[1]
        value = cap if hard == resource.RLIM_INFINITY else min(hard, cap)
        out.append(f'"{name}={value}:{value}"')
    return out


def _stop_idle_aardvark() -> None:
    """Stop an aardvark-dns that serves no network (every config gone with the engine that
    made it): netavark 1.4 then starts a fresh one. One left from an engine that was killed
    or deleted answered nothing for the next engine's networks (CI: no service name
    resolved for 60 s)."""
    configs = NETWORK_RUN_DIR / "aardvark-dns"
    if any(p.name != "aardvark.pid" for p in configs.glob("*")):
        return  # it serves some Podman's network: not ours to stop
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "aardvark-dns":
            with contextlib.suppress(psutil.Error):
                proc.terminate()
                proc.wait(5)


class PrivatePodman(PrivateDockerd):
    """`podman system service` of our own under `root`, answering Docker's API."""

    def __init__(self, root: Path, *, bridge_prefix: str = "hdp", **options: object) -> None:
        super().__init__(root, bridge_prefix=bridge_prefix, **options)  # type: ignore[arg-type]
        self.sock = root / "podman.sock"
        self.url = f"unix://{self.sock}"
        self.log_path = root / "podman.log"
        self.pidfile = root / "podman.pid"
        self.netconf = root / "networks"

    @classmethod
    def owns(cls, root: Path) -> bool:
        return (root / "containers.conf").exists()

    # -- configuration ------------------------------------------------------------------

    def _subnet(self) -> ipaddress.IPv4Network:
        saved = self.root / "subnet"
        if saved.exists():
            return ipaddress.IPv4Network(saved.read_text().strip(), strict=False)
        # Another slot than the host's private dockerd of the same run would take.
        net = ipaddress.IPv4Network(pick_subnet(self.pool, os.getpid() + 3), strict=False)
        saved.write_text(f"{net}\n")
        return net

    def _configure(self) -> dict[str, str]:
        """containers.conf, registries.conf and the default network; the environment."""
        net = self._subnet()
        default = next(net.subnets(new_prefix=24))
        self.subnet = f"{default.network_address + 1}/24"
        self.netconf.mkdir(parents=True, exist_ok=True)
        (self.root / "bridge").write_text(self.bridge + "\n")
        network = {
            "name": "podman",
            "id": "2f259bab93aaaaa2542ba43ef33eb990d0999ee1b9924b557b7be53c0b7a1bb9",
            "driver": "bridge",
            "network_interface": self.bridge,
            "created": "2026-01-01T00:00:00Z",
            "subnets": [{"subnet": str(default), "gateway": str(default.network_address + 1)}],
            "ipv6_enabled": False,
            "internal": False,
            "dns_enabled": False,
            "ipam_options": {"driver": "host-local"},
        }
        (self.netconf / "podman.json").write_text(json.dumps(network))
        conf = self.root / "containers.conf"
        conf.write_text(
            "[containers]\n"
            f"default_ulimits = [{', '.join(_limits())}]\n"
            "[network]\n"
            f'network_config_dir = "{self.netconf}"\n'
            f'default_subnet = "{default}"\n'
            f'default_subnet_pools = [{{"base" = "{net}", "size" = 24}}]\n'
            "[engine]\n"
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'events_logfile_path = "{self.root / "events.log"}"\n'
            'lock_type = "file"\n'
            f'tmp_dir = "{self.root / "tmp"}"\n'
            f'static_dir = "{self.root / "data" / "libpod"}"\n'
            f'volume_path = "{self.root / "data" / "volumes"}"\n'
        )
        registries = self.root / "registries.conf"
        registries.write_text(
            'unqualified-search-registries = ["docker.io"]\n'
            + "".join(f'[[registry]]\nlocation = "{h}"\ninsecure = true\n' for h in INSECURE)
        )
        env = dict(os.environ)
        env["CONTAINERS_CONF"] = str(conf)
        env["CONTAINERS_REGISTRIES_CONF"] = str(registries)
        return env

    # -- the engine ---------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> None:
        podman = shutil.which("podman")
        if podman is None:
            raise RuntimeError(
                "podman not installed: HEALERD_TEST_ENGINE=podman bash tests/support/engine.sh"
                " (apt-get install podman)"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        stop_pid(self._pid(), self._marker, timeout=30)
        _stop_idle_aardvark()
        env = self._configure()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    podman,
                    "--root",
                    str(self.root / "data" / "storage"),
                    "--runroot",
                    str(self.root / "exec"),
                    "--network-config-dir",
                    str(self.netconf),
                    "system",
                    "service",
                    "--time=0",
                    self.url,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        self.pidfile.write_text(f"{self.proc.pid}\n")
        client = self.client(timeout=5)
        try:
            wait_for("private podman to answer", lambda: self._ping(client), timeout, 0.1)
        finally:
            client.close()

    def teardown(self, save_log: Path | None = None) -> None:
        super().teardown(save_log)
        _stop_idle_aardvark()

    def _pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int(self.pidfile.read_text().strip())
        return None

    def stop(self, timeout: float = 40.0) -> None:
        """Its containers stopped first (what a dockerd's shutdown does), then the
        service: SIGTERM, SIGKILL at the timeout."""
        if self.proc is None:
            return
        client = self.client(timeout=timeout)
        try:
            for c in client.containers(filters={"status": "running"}):
                with contextlib.suppress(docker.errors.APIError):
                    client.stop(c["Id"], timeout=10)
        except Exception:  # the service may be gone already
            pass
        finally:
            client.close()
        terminate(self.proc, timeout)
        self.proc = None

    def remove_all(self) -> None:
        """Every container and network but the default one, best effort."""
        client = self.client(timeout=15)
        try:
            for c in client.containers(all=True):
                with contextlib.suppress(docker.errors.NotFound):
                    client.remove_container(c["Id"], force=True, v=True)
            for net in client.networks():
                if net["Name"] not in ("podman", "bridge", "host", "none"):
                    client.remove_network(net["Id"])
        except Exception:  # best effort at teardown
            pass
        finally:
            client.close()

    def _kill_containers(self) -> None:
        """The containers a killed service left (their conmon outlives it): each
        conmon's children, then the conmon."""
        lines = ((p, " ".join(p.info["cmdline"] or ())) for p in psutil.process_iter(["cmdline"]))
        shims = [p for p, line in lines if "conmon" in line and self._marker in line]
        for shim in shims:
            with contextlib.suppress(psutil.Error):
                for child in shim.children(recursive=True):
                    child.kill()
                shim.kill()
        psutil.wait_procs(shims, timeout=10)

    def _network_bridges(self) -> list[str]:
        """The bridges of the networks this engine made (its config dir names them)."""
        names = []
        for path in self.netconf.glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                iface = json.loads(path.read_text()).get("network_interface")
                if iface and iface != self.bridge:
                    names.append(str(iface))
        return names


__all__ = ["PrivatePodman"]
