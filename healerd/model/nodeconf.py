"""What healerd.yaml says about the node and its engine: resource floors, the engine's
request budget, TLS to a tcp:// engine, registry credentials.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Threshold:
    """A floor for a host resource: an amount (bytes, inodes) or a percentage of the total."""

    amount: float
    percent: bool = False

    def floor(self, total: int) -> float:
        return total * self.amount / 100.0 if self.percent else self.amount

    def __str__(self) -> str:
        return f"{self.amount:g}%" if self.percent else f"{self.amount:.0f}"


@dataclass(frozen=True)
class NodeLimits:
    """How healerd guards a small host (healerd.yaml); kubelet's eviction defaults."""

    memory_available: Threshold = Threshold(100 * 2**20)
    disk_free: Threshold = Threshold(10.0, percent=True)
    inodes_free: Threshold = Threshold(5.0, percent=True)
    # What a container without mem_limit is assumed to take when room is counted.
    container_memory: int = 32 * 2**20
    # The size assumed for an image to pull whose size is not known.
    pull_disk_margin: int = 500 * 2**20
    engine_calls_per_second: float = 50.0
    engine_call_burst: int = 200


@dataclass(frozen=True)
class DockerTLS:
    """TLS to a `tcp://` engine (healerd.yaml's `docker_tls`): the CA that signed the
    engine's certificate and healerd's client certificate and key, as file paths."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify: bool = True


@dataclass(frozen=True)
class RegistryAuth:
    """The credentials of one registry for a pull (from auth.json): a user and password
    (or an identity token), or the name of a credential helper (`docker-credential-NAME`)
    that the engine adapter asks. Secrets are left out of repr and str."""

    registry: str  # the host as written in image references ("docker.io" for Docker Hub)
    username: str = ""
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)
    helper: str = ""
    # The helper's program, found on PATH and checked when auth.json was read: the one
    # path the engine adapter runs; or why it cannot be run (healerd.config.credhelpers).
    helper_path: str = ""
    helper_error: str = ""
