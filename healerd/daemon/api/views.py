"""What the local API says: the daemon objects it reads, and their JSON shapes.

Nothing here does socket I/O. Environment values never appear in any view: a
ServiceSpec's environment is not rendered at all, and actions show only their target
and reason. A value that came from a `${VAR}` is shown as `${VAR}` in everything said
of its service (healerd.config.masking): the service's `subs`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from healerd import __version__
from healerd.config import ConfigError, DesiredState, Settings
from healerd.config.masking import mask, mask_free, shown
from healerd.core.events import Event, EventLog
from healerd.core.postmortem import Dead
from healerd.core.readlanes import PRIVILEGED, Reader
from healerd.core.runs import Termination
from healerd.core.signing import Unverified
from healerd.core.status import ContainerStatus, NodeReport, ServiceStatus, is_converged
from healerd.daemon.snapshots import SnapshotStore
from healerd.engine import LogStream
from healerd.model import Action, ObservedContainer, ServiceSpec, Substitution

if TYPE_CHECKING:
    from healerd.daemon.metrics import Metrics


class StatsLike(Protocol):
    @property
    def passes(self) -> int: ...
    @property
    def list_calls(self) -> int: ...
    @property
    def reused_looks(self) -> int: ...


class ControllerLike(Protocol):
    """The part of healerd.core.controller.Controller the API uses."""

    @property
    def desired(self) -> DesiredState: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def engine_ok(self) -> bool | None: ...
    @property
    def engine_version(self) -> str | None: ...
    @property
    def engine_api_version(self) -> str | None: ...
    @property
    def engine_kind(self) -> str | None: ...
    @property
    def stats(self) -> StatsLike: ...

    def statuses(self) -> list[ServiceStatus]: ...
    def container_statuses(
        self, service: str | None = None, reader: Reader = PRIVILEGED
    ) -> list[ContainerStatus]: ...
    def paused_services(self) -> set[str]: ...
    def pause(self, service: str) -> None: ...
    def resume(self, service: str) -> str: ...
    def reconcile_now(self, service: str | None) -> None: ...
    def build_mark(self) -> float: ...
    def build_now(
        self, key: str, spec: ServiceSpec, *, no_cache: bool = False, since: float | None = None
    ) -> str: ...
    def preview(self, service: str | None, reader: Reader = PRIVILEGED) -> list[Action]: ...
    def logs(
        self,
        service: str,
        *,
        previous: bool,
        tail: int | None,
        since: float | None,
        until: float | None = None,
        reader: Reader = PRIVILEGED,
    ) -> tuple[ObservedContainer | None, LogStream]: ...
    def deaths(
        self, service: str, reader: Reader = PRIVILEGED, limit: int | None = None
    ) -> list[Dead]: ...
    def termination(self, container_id: str) -> Termination | None: ...
    def prune_volumes(self, dry_run: bool) -> list[str]: ...


class ImageWorkLike(Protocol):
    """The part of healerd.daemon.imagework.ImageWork the API uses."""

    def update_now(
        self, service: str, *, downgrade: bool, retry_failed: bool, look: bool = False
    ) -> bool: ...
    def rollback(self, service: str) -> str: ...
    def pin(self, service: str, digest: str) -> str: ...
    def update_view(self, service: str, now: float) -> dict[str, object] | None: ...
    def images_view(self, reader: Reader = PRIVILEGED) -> dict[str, Any]: ...


class NoticesLike(Protocol):
    """The part of healerd.daemon.notifications.Notifier the API uses."""

    def targets_view(self) -> list[dict[str, object]]: ...
    def test(self, url: str | None = None) -> list[dict[str, object]]: ...


class SourcesLike(Protocol):
    """The part of healerd.daemon.sources.Sources the API uses."""

    def sync_now(self, name: str | None) -> dict[str, int]: ...
    def wait(self, rounds: dict[str, int], timeout: float) -> bool: ...
    def views(self, now: float | None = None) -> list[dict[str, Any]]: ...


class ReloadsLike(Protocol):
    """The part of healerd.daemon.reload.ReloadMemory the API uses."""

    @property
    def begun(self) -> int: ...
    def served(self, ticket: int) -> bool | None: ...


class DaemonLike(Protocol):
    """The part of healerd.daemon.main.Daemon the API uses."""

    @property
    def controller(self) -> ControllerLike: ...
    @property
    def images(self) -> ImageWorkLike: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def notices(self) -> NoticesLike: ...
    @property
    def sources(self) -> SourcesLike: ...
    @property
    def reloads(self) -> ReloadsLike: ...

    def request_reload(self) -> None: ...
    def node_report(self) -> NodeReport | None: ...

    def unverified(self) -> list[Unverified]: ...

    def name_tag(self, spec_hash: str) -> str: ...


def snapshots_payload(state_dir: Path, service: str | None) -> dict[str, Any]:
    """GET /v1/snapshots: the volume snapshots of `service` (or all), newest first, as
    their directories say now (healerd.daemon.snapshots): names, times, digests, sizes;
    never a path or a volume's data."""
    return {"snapshots": [s.view() for s in SnapshotStore.at(state_dir).list(service)]}


# -- services ------------------------------------------------------------------

Subs = tuple[Substitution, ...]


def masks_of(controller: ControllerLike) -> Callable[[str], Subs]:
    """What views of each service mask: the substitutions of its declared spec."""
    services = controller.desired.services
    return lambda name: shown(services.get(name))


def service_view(st: ServiceStatus, now: float, subs: Subs = ()) -> dict[str, Any]:
    return {
        "name": st.name,
        "desired": st.desired,
        "running": st.running,
        "ready": st.running,
        "available": st.available,
        "up_to_date": st.up_to_date,
        "restarts": st.restarts,
        "state": st.state,
        "reason": mask_free(st.reason, subs),
        "converged": is_converged(st),
        "paused": st.paused,
        "since": st.since or None,
        "age_seconds": round(max(0.0, now - st.since), 3) if st.since else None,
        "source_file": st.source_file,
        "next_retry": st.next_retry,
    }


def config_error_view(err: ConfigError) -> dict[str, Any]:
    return {
        "file": err.file,
        "line": err.line,
        "column": err.column,
        "field": err.field,
        "reason": err.reason,
        "message": str(err),
    }


def engine_view(controller: ControllerLike) -> dict[str, Any]:
    return {
        "reachable": controller.engine_ok,
        "version": controller.engine_version,
        "api_version": controller.engine_api_version,
        "kind": controller.engine_kind,
    }


def host_view(node: NodeReport | None) -> dict[str, Any] | None:
    """Memory, the engine's disk, load and pressure; a figure that cannot be read is null."""
    if node is None:
        return None
    h, lim, p = node.sample, node.limits, node.pressure
    out: dict[str, Any] = {"memory": None, "disk": None, "inodes": None, "cpus": h.cpus}
    if h.memory_total is not None and h.memory_available is not None:
        out["memory"] = {
            "total_bytes": h.memory_total,
            "available_bytes": h.memory_available,
            "used_percent": _percent(h.memory_total - h.memory_available, h.memory_total),
            "threshold_bytes": round(lim.memory_available.floor(h.memory_total)),
        }
    if h.disk_total is not None and h.disk_free is not None:
        out["disk"] = {
            "path": h.disk_path,
            "total_bytes": h.disk_total,
            "free_bytes": h.disk_free,
            "used_percent": _percent(h.disk_total - h.disk_free, h.disk_total),
            "threshold_bytes": round(lim.disk_free.floor(h.disk_total)),
        }
    if h.inodes_total is not None and h.inodes_free is not None:
        out["inodes"] = {
            "total": h.inodes_total,
            "free": h.inodes_free,
            "threshold": round(lim.inodes_free.floor(h.inodes_total)),
        }
    out["load"] = [round(x, 2) for x in h.load] if h.load is not None else None
    out["pressure"] = p.flags
    out["pressure_reasons"] = list(p.reasons)
    return out


def _percent(part: float, total: float) -> float:
    return round(100.0 * part / total, 1) if total else 0.0


def self_view(node: NodeReport | None) -> dict[str, Any] | None:
    """healerd's own footprint and its engine call budget."""
    if node is None:
        return None
    me, lim = node.me, node.limits
    return {
        "rss_bytes": me.rss,
        "cpu_percent": me.cpu_percent,
        "cpu_seconds": me.cpu_seconds,
        "open_fds": me.open_fds,
        "threads": me.threads,
        "engine_calls": node.engine_calls,
        "engine_calls_throttled": node.engine_calls_throttled,
        "engine_throttled_seconds": round(node.engine_throttled_seconds, 3),
        "engine_calls_per_second_limit": lim.engine_calls_per_second,
        "engine_call_burst": lim.engine_call_burst,
    }


def status_payload(
    controller: ControllerLike,
    names: Iterable[str] = (),
    now: float | None = None,
    node: NodeReport | None = None,
    unverified: Iterable[Unverified] = (),
    notifications: Iterable[dict[str, object]] = (),
    updates: Callable[[str, float], dict[str, object] | None] | None = None,
    sources: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    now = time.time() if now is None else now
    wanted = set(names)
    statuses = [s for s in controller.statuses() if not wanted or s.name in wanted]
    desired = controller.desired
    subs = masks_of(controller)
    views = [service_view(s, now, subs(s.name)) for s in statuses]
    for view in views if updates is not None else ():
        # The updater's word: an update, a hold, a rollback (a day), a pin (for good).
        found = updates(view["name"], now) if updates is not None else None
        if found is not None:
            view["update"] = {k: v for k, v in found.items() if k != "history"}
    return {
        "services": views,
        "missing": sorted(wanted - {s.name for s in statuses}),
        "engine": engine_view(controller),
        "host": host_view(node),
        "healerd": self_view(node),
        "waiting_for_resources": dict(sorted((node.waiting if node else {}).items())),
        "config_errors": [config_error_view(e) for e in desired.errors],
        "broken_files": list(desired.broken_files),
        "settings_errors": list(node.settings_errors) if node else [],
        "credentials_error": node.credentials_error if node else "",
        "paused": sorted(controller.paused_services()),
        # Each notification target: sent, failed, dropped, waiting, the last error (masked).
        "notifications": list(notifications),
        # Each git source: the commit fetched, its age, the one applied, the last error.
        "sources": list(sources),
        # Containers with healerd's labels it cannot prove it made: left alone.
        "unverified": [
            {"name": u.name, "id": u.id, "service": u.service, "why": u.why}
            for u in unverified
            if not wanted or u.service in wanted
        ],
        "daemon": {"version": __version__, "pid": os.getpid()},
    }


# -- containers, events, actions ------------------------------------------------


def termination_view(t: Termination) -> dict[str, Any]:
    """How a run ended that healerd started again in place (its words, its time)."""
    return {
        "exit_code": t.exit_code,
        "oom_killed": t.oom_killed,
        "finished_at": _rfc3339(t.at),
        "error": "",
        "why": t.why,
    }


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if at else ""


def container_view(c: ContainerStatus, now: float, subs: Subs = ()) -> dict[str, Any]:
    return {
        "name": c.name,
        "id": c.id,
        "service": c.service,
        "state": c.state,
        "status": c.status,
        "health": c.health,
        "restarts": c.restarts,
        "exit_code": c.exit_code,
        "created": c.created,
        "age_seconds": round(max(0.0, now - c.created), 3),
        "image": mask(c.image, subs),
        "up_to_date": c.up_to_date,
    }


def event_view(e: Event, subs: Subs = ()) -> dict[str, Any]:
    return {
        "seq": e.seq,
        "time": e.time,
        "kind": e.kind,
        "service": e.service,
        "container": e.container,
        "message": mask_free(e.message, subs),
    }


def action_view(a: Action, subs: Subs = ()) -> dict[str, Any]:
    """An action's target and reason only: its spec (and so its environment) stays home."""
    c = a.container
    image = a.spec.image if a.spec is not None else (c.image if c is not None else None)
    subs = (*subs, *shown(a.spec))
    return {
        "kind": a.kind.value,
        "service": a.service,
        "container": c.name if c is not None else None,
        "container_id": c.id if c is not None else None,
        "image": mask(image, subs) if image is not None else None,
        "reason": mask_free(a.reason, subs),
    }


__all__ = [
    "ControllerLike",
    "DaemonLike",
    "ReloadsLike",
    "action_view",
    "container_view",
    "event_view",
    "masks_of",
    "service_view",
    "status_payload",
]
