"""Data that rolls back with the image (x-healerd: {snapshot: [VOLUME]}): before a new
digest starts, the service is held (the loop leaves it alone: no heal restarts what is
stopped for the copy), its containers are stopped, and the volumes are copied; at a
rollback, the service is held, stopped, its volumes copied back from the snapshot taken
before that update, and the previous digest starts. The copies themselves are the
daemon's (healerd.daemon.snapshots: files on this host), behind VolumeSnapshots.

A restore runs in a thread of its own: a rollback is decided in a reconcile pass, and a
copy of a GiB takes seconds that no worker may spend. The hold is what keeps the
previous digest from starting before its data is back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from healerd.engine import EngineError
from healerd.engine.api import ContainerRuntime
from healerd.model import ServiceSpec

log = logging.getLogger("healerd.updates")

STOP_TRIES = 3  # a pass in flight when the hold began may start what was stopped


class SnapshotFailed(Exception):
    """A snapshot or a restore could not be made (the reason is the message)."""


class VolumeSnapshots(Protocol):
    def take(self, spec: ServiceSpec, from_digest: str, to_digest: str) -> str:
        """Copy the service's snapshot volumes (it is stopped); returns what was taken
        (for the log). Raises SnapshotFailed (no room, an engine not on this host)."""
        ...

    def restore(self, service: str, to_digest: str) -> str | None:
        """Copy back the snapshot taken before the update to `to_digest` (the service
        is stopped); returns what was restored, None when there is no such snapshot.
        Raises SnapshotFailed (then every volume holds what it held before)."""
        ...


class NoSnapshots:
    """Until the daemon sets its store: an update that needs a snapshot is refused."""

    def take(self, spec: ServiceSpec, from_digest: str, to_digest: str) -> str:
        raise SnapshotFailed("volume snapshots are not set up here")

    def restore(self, service: str, to_digest: str) -> str | None:
        return None


class UpdateData:
    """The holds and the copies; thread-safe."""

    def __init__(self, engine: ContainerRuntime, on_change: Callable[[str], None]) -> None:
        self._engine = engine
        self._on_change = on_change
        self._lock = threading.Lock()
        self._held: dict[str, str] = {}  # service -> why the loop leaves it alone
        self.snapshots: VolumeSnapshots = NoSnapshots()

    def held(self, key: str) -> str:
        """Why the loop must leave `key` alone now ("" : it need not)."""
        with self._lock:
            return self._held.get(key, "")

    def hold(self, key: str, why: str) -> None:
        with self._lock:
            self._held[key] = why
        self._on_change(key)  # the status says why

    def release(self, key: str) -> None:
        with self._lock:
            self._held.pop(key, None)
        self._on_change(key)

    def snapshot(self, spec: ServiceSpec, from_digest: str, to_digest: str) -> str:
        """Hold and stop the service, then copy its volumes: "" when taken (the hold
        stands: the caller moves the pin, then releases), else why not (released: the
        loop starts the stopped containers again in place)."""
        vols = ", ".join(spec.snapshot)
        self.hold(spec.name, f"stopped for a snapshot of {vols} before {to_digest[7:19]}")
        try:
            self._stop_all(spec.name, spec.stop_grace_period)
            said = self.snapshots.take(spec, from_digest, to_digest)
        except (SnapshotFailed, EngineError) as exc:
            self.release(spec.name)
            return f"no snapshot of {vols}: {exc}"
        log.info("%s: %s", spec.name, said)
        return ""

    def restore_later(
        self, key: str, to_digest: str, grace: float | None, then: Callable[[str], None]
    ) -> None:
        """Hold `key` now; in a thread, stop it, restore the snapshot taken before the
        update to `to_digest`, release it, and tell `then` what happened."""
        self.hold(key, f"stopped to restore its volumes as they were before {to_digest[7:19]}")
        threading.Thread(
            target=self._restore,
            args=(key, to_digest, grace, then),
            name=f"healerd-restore-{key}",
            daemon=True,
        ).start()

    def _restore(
        self, key: str, to_digest: str, grace: float | None, then: Callable[[str], None]
    ) -> None:
        try:
            self._stop_all(key, grace)
            said = self.snapshots.restore(key, to_digest)
            told = said or f"no snapshot was taken before {to_digest[7:19]}: volumes as they are"
        except (SnapshotFailed, EngineError) as exc:
            told = f"volumes NOT restored ({exc}): they hold what the failed digest left"
            log.error("%s: %s", key, told)
        except Exception as exc:  # the hold must end whatever happens
            log.exception("%s: restoring the volumes failed unexpectedly", key)
            told = f"volumes NOT restored ({exc})"
        finally:
            self.release(key)
        then(told)

    def _stop_all(self, key: str, grace: float | None) -> None:
        """Stop every running container of the service (healerd's own, by its labels)."""
        for _ in range(STOP_TRIES):
            running = [c for c in self._engine.list_managed(key) if c.running]
            if not running:
                return
            for c in running:
                self._engine.stop(c, grace)
        raise SnapshotFailed(f"{key}'s containers kept being started again")


__all__ = ["NoSnapshots", "SnapshotFailed", "UpdateData", "VolumeSnapshots"]
