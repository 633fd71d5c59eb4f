"""The daemon's side of data that rolls back with the image (healerd.core.updatedata):
the snapshot store in state_dir (healerd.daemon.snapshots) and the engine's mount
points. Only an engine on this host has its volumes here: with one reached over TCP
an update that needs a snapshot is refused (with that reason), never run without."""

from __future__ import annotations

from healerd.core.updatedata import SnapshotFailed
from healerd.daemon.snapshots import SnapshotStore
from healerd.daemon.volumecopy import SnapshotError, gib
from healerd.engine import EngineError
from healerd.engine.api import ProjectResources
from healerd.model import ServiceSpec


class DaemonSnapshots:
    def __init__(self, store: SnapshotStore, engine: ProjectResources, engine_url: str) -> None:
        self._store = store
        self._engine = engine
        self._local = engine_url.startswith("unix://") or "://" not in engine_url
        self._url = engine_url

    def _paths(self, names: list[str]) -> dict[str, str]:
        if not self._local:
            raise SnapshotFailed(
                f"the engine ({self._url}) is not on this host: its volumes cannot be copied"
            )
        try:
            return {name: self._engine.volume_path(name) for name in names}
        except EngineError as exc:
            raise SnapshotFailed(str(exc)) from None

    def take(self, spec: ServiceSpec, from_digest: str, to_digest: str) -> str:
        paths = self._paths(list(spec.snapshot))
        try:
            snap = self._store.take(spec.name, paths, from_digest=from_digest, to_digest=to_digest)
            self._store.prune(spec.name, spec.snapshot_keep)
        except SnapshotError as exc:
            raise SnapshotFailed(str(exc)) from None
        return f"snapshot {snap.id} of {', '.join(spec.snapshot)} taken ({gib(snap.size)})"

    def restore(self, service: str, to_digest: str) -> str | None:
        try:
            snap = self._store.before(service, to_digest)
            if snap is None:
                return None
            self._store.restore(snap, self._paths([name for name, _ in snap.volumes]))
        except SnapshotError as exc:
            raise SnapshotFailed(str(exc)) from None
        return f"volumes restored from snapshot {snap.id} ({', '.join(n for n, _ in snap.volumes)})"


__all__ = ["DaemonSnapshots"]
