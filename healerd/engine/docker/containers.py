"""healerd's containers on the engine (ContainerRuntime but the create, which is
create.py): the one list call, start, stop, rename, remove, logs and inspects; and the
restart policy of the hand-off (RestartHandOff)."""

from __future__ import annotations

import re
import time
from contextlib import suppress
from datetime import datetime

import docker.errors

from healerd.engine.api import CannotRestart, Death, EngineError, LogStream, Owner
from healerd.engine.docker import logs, podman
from healerd.engine.docker.client import DockerClient
from healerd.engine.docker.errors import needs_new, removed
from healerd.engine.docker.listing import RowCache, int_or_none
from healerd.engine.docker.project import Ensured, in_use_or_gone
from healerd.model import LABEL_SERVICE, ContainerState, ObservedContainer

# Docker 26 answers a stop 5-20 ms before its container list says the container exited
# (the list reads a view the exit updates after waking the stop; measured on Debian 13's
# 26.1, while 20.10 had the list in time). The engine contract wants the list to agree
# once stop returns, so stop looks, for at most SETTLE_S (then the die event tells).
SETTLE_S = 2.0
_SETTLE_POLL_S = 0.005
_NOT_STOPPED = ("running", "paused", "restarting")


def _seconds(stop_timeout: float | None) -> int | None:
    return None if stop_timeout is None else int(stop_timeout)


def _removing(exc: EngineError) -> bool:
    """A remove refused because another one is under way: as good as done."""
    cause = exc.__cause__
    return (
        isinstance(cause, docker.errors.APIError)
        and cause.status_code == 409
        and "already in progress" in str(cause.explanation or "")
    )


class DockerContainers:
    _client: DockerClient
    _ensured: Ensured
    _rows: RowCache
    owner: Owner

    def list_managed(self, service: str | None = None) -> list[ObservedContainer]:
        label = LABEL_SERVICE if service is None else f"{LABEL_SERVICE}={service}"
        listed = self._rows.parse(self._client.container_rows({"label": label}), service)
        return self.owner.mine(listed, service)

    def start(self, container: ObservedContainer) -> None:
        self._client.listening(f"start {container.name}")
        try:
            with self._client.call(f"start {container.name}"):
                self._client.api.start(container.id)
        except EngineError as exc:
            if needs_new(exc.__cause__):
                self._ensured.forget()  # perhaps one of ours is gone: look again
                gone = removed(exc.__cause__)
                raise CannotRestart(str(exc), gone=gone) from exc.__cause__
            raise

    def stop(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        try:
            with self._client.call(f"stop {container.name}"):
                if container.state is ContainerState.PAUSED:
                    self._client.api.unpause(container.id)
                self._client.api.stop(container.id, timeout=_seconds(stop_timeout))
            self._listed_stopped(container.id)
        except EngineError as exc:
            if not isinstance(exc.__cause__, docker.errors.NotFound):
                raise

    def _listed_stopped(self, container_id: str) -> None:
        """Until the engine's list no longer says running (or SETTLE_S has passed); a
        list that fails is no reason to call the stop, done, a failure."""
        deadline = time.monotonic() + SETTLE_S
        with suppress(EngineError):
            while True:
                rows = self._client.container_rows({"id": container_id})
                if all(row.get("State") not in _NOT_STOPPED for row in rows):
                    return
                if time.monotonic() >= deadline:
                    return
                time.sleep(_SETTLE_POLL_S)

    def rename(self, container: ObservedContainer, name: str) -> None:
        with self._client.call(f"rename {container.name} to {name}"):
            self._client.api.rename(container.id, name)

    def remove(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        try:
            with self._client.call(f"remove {container.name}"):
                if container.running:
                    self._client.api.stop(container.id, timeout=_seconds(stop_timeout))
                self._client.api.remove_container(container.id, force=True, v=False)
        except EngineError as exc:
            if isinstance(exc.__cause__, docker.errors.NotFound) or _removing(exc):
                return
            raise
        self._drop_volumes(container)

    def _drop_volumes(self, container: ObservedContainer) -> None:
        """Remove the container's anonymous volumes that no container uses any more. A
        replacement mounts its predecessor's by name, so the engine's own `rm -v` would
        leave them behind: healerd removes each once its last container is gone."""
        for volume, _ in container.anon_volumes:
            try:
                with self._client.call(f"remove volume {volume[:12]}"):
                    self._client.api.remove_volume(volume)
            except EngineError as exc:
                if not in_use_or_gone(exc, 409):
                    raise

    def logs(
        self, container_id: str, tail: int | None, since: float | None, until: float | None = None
    ) -> LogStream:
        what = f"logs {container_id[:12]}"
        query = logs.params(tail, since, until)
        return logs.open_stream(self._client, container_id, query, lambda: self._client.call(what))

    def death(self, container_id: str) -> Death:
        with self._client.call(f"inspect {container_id[:12]}"):
            state = self._client.api.inspect_container(container_id).get("State") or {}
        running, finished = bool(state.get("Running")), str(state.get("FinishedAt") or "")
        ended = bool(finished) and not finished.startswith("0001")
        return Death(
            exit_code=None if running else int_or_none(state.get("ExitCode")),
            oom_killed=bool(state.get("OOMKilled")),
            finished_at=finished if ended else "",
            error=str(state.get("Error") or ""),
            started_at=str(state.get("StartedAt") or ""),
            ran_before=running and ended,
        )

    def file_time(self, container_id: str, path: str) -> float | None:
        with (
            self._client.call(f"stat {container_id[:12]}:{path}"),
            suppress(docker.errors.NotFound),
        ):
            stream, stat = self._client.api.get_archive(container_id, path, chunk_size=512)
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # the stat header is all it takes; the content is not read
            return _stat_time(str(stat.get("mtime") or "")) or 0.0
        return None

    def set_restart_policy(self, container_id: str, policy: str) -> None:
        # Podman answers the missing endpoint 404, as Docker a container gone: asked first.
        with self._client.call(f"update {container_id[:12]}"):
            self._client.negotiated()
        kind, version = self._client.engine_kind, self._client.engine_version
        podman.no_update(kind, version, "the restart hand-off")
        with (
            self._client.call(f"update {container_id[:12]}"),
            suppress(docker.errors.NotFound),
        ):
            restart = {"Name": policy, "MaximumRetryCount": 0}
            self._client.api.update_container(container_id, restart_policy=restart)


__all__ = ["DockerContainers"]


def _stat_time(text: str) -> float | None:
    """The archive stat's mtime (RFC 3339, nanoseconds, an offset or Z) as a wall time;
    None when unreadable."""
    m = re.fullmatch(r"([0-9-]+T[0-9:]+)(?:\.([0-9]+))?(Z|[+-][0-9:]+)", text)
    if m is None:
        return None
    head, frac, zone = m.groups()
    try:
        whole = datetime.fromisoformat(head + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None
    return whole.timestamp() + (float(f"0.{frac}") if frac else 0.0)
