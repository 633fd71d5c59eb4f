"""What a volume snapshot is on disk (healerd.daemon.snapshots): its manifest, written
last into `<service>/<id>/manifest.json`, read back into a Snapshot, and the boot it
was taken in while it is not synced yet (one a power cut caught before it was on disk
is never used, and goes at the service's next prune)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healerd.daemon.volumecopy import VOLUME_RE, SnapshotError, real_dir

MANIFEST = "manifest.json"
MAX_MANIFEST = 1 << 16


class Unsynced(SnapshotError):
    """A snapshot not on disk yet when the host went down (another boot's): never used."""


@dataclass(frozen=True)
class Snapshot:
    service: str
    id: str
    created: float  # wall clock
    from_digest: str  # the image the service ran when it was taken
    to_digest: str  # the image the update it was taken before went to
    volumes: tuple[tuple[str, int], ...]  # (engine volume name, bytes on disk)
    path: Path
    # The boot it was taken in, while it is not synced to disk yet ("" once it is): on
    # another boot such a snapshot may hold empty files, and is never used.
    unsynced_boot: str = field(default="", compare=False)

    @property
    def size(self) -> int:
        return sum(b for _, b in self.volumes)

    def view(self) -> dict[str, Any]:
        """The API's document of it (no path: where it sits is root's business)."""
        return {
            "service": self.service,
            "id": self.id,
            "created": self.created,
            "from_digest": self.from_digest,
            "to_digest": self.to_digest,
            "volumes": [{"name": n, "bytes": b} for n, b in self.volumes],
            "bytes": self.size,
        }


def current_boot() -> str:
    """The kernel's id of this boot: a snapshot not synced in it is not trusted after."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def manifest(s: Snapshot) -> bytes:
    doc = {"version": 1, **s.view()}
    if s.unsynced_boot:
        doc["unsynced_boot"] = s.unsynced_boot
    return json.dumps(doc, indent=1).encode() + b"\n"


def read(path: Path, service: str, boot: str) -> Snapshot:
    real_dir(path, "snapshot")
    fd = os.open(path / MANIFEST, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        data = json.loads(f.read(MAX_MANIFEST))
    vols = tuple((str(v["name"]), int(v["bytes"])) for v in data["volumes"])
    if data["service"] != service or data["id"] != path.name:
        raise SnapshotError(f"manifest names {data['service']}/{data['id']}")
    if not all(VOLUME_RE.fullmatch(n) for n, _ in vols):
        raise SnapshotError("manifest names a volume that is no volume name")
    unsynced = str(data.get("unsynced_boot") or "")
    if unsynced and (unsynced != boot or boot == "unknown"):
        raise Unsynced("it was not on disk yet when the host went down: not used")
    return Snapshot(
        service,
        path.name,
        float(data["created"]),
        str(data["from_digest"]),
        str(data["to_digest"]),
        vols,
        path,
        unsynced,
    )


__all__ = ["MANIFEST", "Snapshot", "Unsynced", "current_boot", "manifest", "read"]
