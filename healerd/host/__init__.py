"""What healerd sees of the host it runs on: memory, the engine's disk, load, itself.

Plain samples and the probe protocol live here; `healerd.host.psutil_probe` reads the
real host. The core only ever sees samples, so pressure rules test without a host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class HostSample:
    """One look at the host. A figure that could not be read is None (a remote engine's
    data root, say): it never counts as pressure."""

    memory_total: int | None = None
    memory_available: int | None = None
    disk_path: str = ""
    disk_total: int | None = None
    disk_free: int | None = None
    inodes_total: int | None = None
    inodes_free: int | None = None
    load: tuple[float, float, float] | None = None
    cpus: int | None = None


@dataclass(frozen=True)
class SelfSample:
    """healerd's own footprint."""

    rss: int | None = None
    cpu_percent: float | None = None  # since the previous sample, of one core
    cpu_seconds: float | None = None  # user + system since start
    open_fds: int | None = None
    threads: int | None = None


class HostProbe(Protocol):
    def sample(self, disk_path: str) -> HostSample:
        """Memory and load, and space and inodes of the filesystem holding `disk_path`."""
        ...

    def self_sample(self) -> SelfSample: ...


__all__ = ["HostProbe", "HostSample", "SelfSample"]
