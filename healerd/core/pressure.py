"""Host pressure, kubelet-style: a resource below its threshold is under pressure.

Pure functions of a host sample and the limits from healerd.yaml, so the rules are
unit-tested without a host. The admission module applies them to creates and pulls.
"""

from __future__ import annotations

from dataclasses import dataclass

from healerd.host import HostSample
from healerd.model import NodeLimits, Threshold


def fmt_bytes(n: float) -> str:
    """Binary units, as the thresholds are written (100Mi)."""
    sign, n = ("-" if n < 0 else ""), abs(n)
    unit = ""
    for bigger in ("Ki", "Mi", "Gi", "Ti"):
        if n < 1024:
            break
        n, unit = n / 1024, bigger
    digits = f"{n:.0f}" if not unit or n >= 100 else f"{n:.1f}".removesuffix(".0")
    return f"{sign}{digits}{unit}"


def fmt_threshold(t: Threshold, *, count: bool = False) -> str:
    if t.percent:
        return f"{t.amount:g}%"
    return f"{t.amount:.0f}" if count else fmt_bytes(t.amount)


@dataclass(frozen=True)
class Pressure:
    """What one host sample means under the configured limits."""

    memory: bool = False
    disk: bool = False
    inodes: bool = False
    # available memory above its threshold (negative under pressure); None: unknown.
    memory_headroom: float | None = None
    # free disk space above its threshold; None: unknown (a remote engine's data root).
    disk_headroom: float | None = None
    reasons: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return self.memory or self.disk or self.inodes

    @property
    def flags(self) -> dict[str, bool]:
        return {"memory": self.memory, "disk": self.disk, "inodes": self.inodes}

    def describe(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "none"


def assess(sample: HostSample, limits: NodeLimits) -> Pressure:
    """Compare a sample with the thresholds. A figure that could not be read never
    counts as pressure: healerd must not stop healing because it cannot see the disk."""
    reasons: list[str] = []
    memory = disk = inodes = False
    mem_headroom = disk_headroom = None
    if sample.memory_available is not None and sample.memory_total is not None:
        floor = limits.memory_available.floor(sample.memory_total)
        mem_headroom = sample.memory_available - floor
        if mem_headroom < 0:
            memory = True
            reasons.append(
                f"memory pressure: {fmt_bytes(sample.memory_available)} available, "
                f"below the threshold of {fmt_threshold(limits.memory_available)}"
            )
    if sample.disk_free is not None and sample.disk_total is not None:
        floor = limits.disk_free.floor(sample.disk_total)
        disk_headroom = sample.disk_free - floor
        if disk_headroom < 0:
            disk = True
            reasons.append(
                f"disk pressure: {fmt_bytes(sample.disk_free)} free on {sample.disk_path}, "
                f"below the threshold of {fmt_threshold(limits.disk_free)}"
            )
    if sample.inodes_free is not None and sample.inodes_total is not None:
        floor = limits.inodes_free.floor(sample.inodes_total)
        if sample.inodes_free < floor:
            inodes = True
            reasons.append(
                f"inode pressure: {sample.inodes_free} inodes free on {sample.disk_path}, "
                f"below the threshold of {fmt_threshold(limits.inodes_free, count=True)}"
            )
    return Pressure(memory, disk, inodes, mem_headroom, disk_headroom, tuple(reasons))


def pull_refusal(
    image: str, size_hint: int | None, sample: HostSample, limits: NodeLimits
) -> str | None:
    """Why a pull of `image` must not start, or None. The size is that of an earlier
    version on disk when there is one (layers shared with it make this an overestimate),
    else pull_disk_margin. Space and inodes that cannot be read do not block a pull."""
    p = assess(sample, limits)
    if p.disk or p.inodes:
        return f"not pulling {image}: {p.describe()}"
    if p.disk_headroom is None or sample.disk_free is None:
        return None
    need = size_hint if size_hint is not None else limits.pull_disk_margin
    if need > p.disk_headroom:
        what = "its earlier version's size" if size_hint is not None else "pull_disk_margin"
        return (
            f"not pulling {image}: it needs about {fmt_bytes(need)} ({what}) and "
            f"{sample.disk_path} has {fmt_bytes(sample.disk_free)} free; the pull would "
            f"leave less than the threshold of {fmt_threshold(limits.disk_free)}"
        )
    return None


__all__ = ["Pressure", "assess", "fmt_bytes", "fmt_threshold", "pull_refusal"]
