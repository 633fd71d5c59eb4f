"""The local API: a fake daemon behind a real socket, and clients that call it."""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from healerd.config import ConfigError, DesiredState, Settings
from healerd.core.clock import SystemClock
from healerd.core.events import EventLog
from healerd.core.lifecycle import ServiceState
from healerd.core.postmortem import Dead
from healerd.core.pressure import assess
from healerd.core.readlanes import PRIVILEGED, Reader
from healerd.core.readmodel import complete
from healerd.core.runs import Termination
from healerd.core.signing import Unverified
from healerd.core.status import ContainerStatus, NodeReport, ServiceStatus
from healerd.core.updates import UpdateRefused
from healerd.daemon.api import server as api_module
from healerd.daemon.api.server import Peer
from healerd.daemon.metrics import LoopMetrics, Metrics
from healerd.daemon.notifications import Hooks, Notifier
from healerd.engine import EngineUnavailable, ImageBuildFailed, LogStream
from healerd.host.psutil_probe import PsutilProbe
from healerd.model import (
    Action,
    ActionKind,
    NodeLimits,
    ObservedContainer,
    ServiceSpec,
)

SECRET = "s3cr3t-value-never-shown"


def spec(name: str, replicas: int = 1) -> ServiceSpec:
    return ServiceSpec(
        name=name,
        image="img:1",
        replicas=replicas,
        environment=(("TOKEN", SECRET),),
        source_file=f"/etc/healerd/conf.d/{name}.yaml",
    )


@dataclass
class FakeStats:
    passes: int = 3
    list_calls: int = 5
    reused_looks: int = 2


@dataclass
class FakeController:
    terminations: dict[str, Termination] = field(default_factory=dict)
    desired: DesiredState = field(
        default_factory=lambda: DesiredState(
            services=MappingProxyType({"web": spec("web", 2), "db": spec("db")}),
            errors=(ConfigError("/etc/healerd/conf.d/bad.yaml", 3, "services.x.image", "bad"),),
            hold_orphans=False,
            broken_files=("/etc/healerd/conf.d/bad.yaml",),
        )
    )
    events: EventLog = field(default_factory=lambda: EventLog(SystemClock()))
    engine_ok: bool | None = True
    engine_version: str | None = "28.2.2"
    engine_api_version: str | None = "1.45"
    engine_kind: str | None = "docker"
    stats: FakeStats = field(default_factory=FakeStats)
    engine_down: bool = False
    paused: set[str] = field(default_factory=set)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    hooks: list[object] = field(default_factory=list)
    pruned: list[bool] = field(default_factory=list)  # prune_volumes' dry_run, per call
    readers: list[Reader] = field(default_factory=list)  # whose budget each read took
    # What logs() answers, made at each call (None: no container); deaths(): the
    # history, newest first.
    output: Callable[[], tuple[ObservedContainer, LogStream]] | None = None
    dead: list[Dead] = field(default_factory=list)
    build_fails: dict[str, str] = field(default_factory=dict)  # service -> builder's words

    def statuses(self) -> list[ServiceStatus]:
        # Completed by the real read model, as the Controller does.
        return complete(self.raw_statuses(), self.desired.services, self.paused)

    def raw_statuses(self) -> list[ServiceStatus]:
        now = time.time()
        return [
            ServiceStatus(
                "db",
                desired=1,
                running=1,
                available=1,
                up_to_date=1,
                state=ServiceState.CONVERGED,
                since=now,
            ),
            ServiceStatus(
                "web",
                desired=2,
                running=1,
                available=1,
                up_to_date=1,
                restarts=4,
                state=ServiceState.CRASH_LOOP_BACK_OFF,
                reason="containers keep stopping; next replacement in 3.0s",
                since=now - 90,
                next_retry=now + 3,
            ),
        ]

    def container_statuses(
        self, service: str | None = None, reader: Reader = PRIVILEGED
    ) -> list[ContainerStatus]:
        self.readers.append(reader)
        if self.engine_down:
            raise EngineUnavailable("connection refused")
        rows = [
            ContainerStatus(
                "c1" * 32, "web-abcde-11111", "web", "running", "Up 1 minute", None, 4, None,
                time.time() - 60, "img:1", True,
            ),
            ContainerStatus(
                "c2" * 32, "db-abcde-22222", "db", "exited", "Exited (1)", "unhealthy", 0, 1,
                time.time() - 5, "img:1", True,
            ),
        ]  # fmt: skip
        return [c for c in rows if service is None or c.service == service]

    def paused_services(self) -> set[str]:
        return set(self.paused)

    def build_mark(self) -> float:
        return 0.0

    def build_now(
        self, key: str, spec: ServiceSpec, *, no_cache: bool = False, since: float | None = None
    ) -> str:
        """healerctl build: a failure for a service named in `build_fails`."""
        self.calls.append(("build", (key, no_cache)))
        if key in self.build_fails:
            raise ImageBuildFailed(f"cannot build {spec.image}: {self.build_fails[key]}")
        return f"built {spec.image}"

    def pause(self, service: str) -> None:
        self.calls.append(("pause", service))
        self.paused.add(service)

    def resume(self, service: str) -> str:
        self.calls.append(("resume", service))
        self.paused.discard(service)
        return ""

    def reconcile_now(self, service: str | None) -> None:
        self.calls.append(("reconcile", service))

    def logs(
        self,
        service: str,
        *,
        previous: bool,
        tail: int | None,
        since: float | None,
        until: float | None = None,
        reader: Reader = PRIVILEGED,
    ) -> tuple[ObservedContainer | None, LogStream]:
        self.readers.append(reader)
        self.calls.append(("logs", (service, previous, tail, since)))
        if self.output is None:
            return None, LogStream([])
        return self.output()

    def deaths(
        self, service: str, reader: Reader = PRIVILEGED, limit: int | None = None
    ) -> list[Dead]:
        self.readers.append(reader)
        return list(self.dead[:limit])

    def termination(self, container_id: str) -> Termination | None:
        return self.terminations.get(container_id)

    def prune_volumes(self, dry_run: bool) -> list[str]:
        self.pruned.append(dry_run)
        return ["p_data"]

    def preview(self, service: str | None, reader: Reader = PRIVILEGED) -> list[Action]:
        self.readers.append(reader)
        if self.engine_down:
            raise EngineUnavailable("connection refused")
        return [Action(ActionKind.CREATE, "web", "1/2 running", spec=spec("web", 2))]


class FakeImages:
    """ImageWork's `update_now`: the services that follow a tag, and the calls made."""

    def __init__(self) -> None:
        self.following = {"web"}
        self.updates: list[tuple[str, bool, bool]] = []
        self.looks: list[str] = []
        self.said: dict[str, dict[str, object]] = {}
        self.verbs: list[tuple[str, str]] = []
        self.viewed: list[Reader] = []
        self.image_list: dict[str, Any] = {
            "images": [],
            "missing": [],
            "images_dir": "/images",
            "refused": [],
        }

    def update_now(
        self, service: str, *, downgrade: bool, retry_failed: bool, look: bool = False
    ) -> bool:
        if service not in self.following:
            return False
        self.updates.append((service, downgrade, retry_failed))
        if look:
            self.looks.append(service)
        return True

    def rollback(self, service: str) -> str:
        if service not in self.following:
            raise UpdateRefused(f"{service} does not follow its tag")
        self.verbs.append(("rollback", service))
        return f"{service}: rolled back"

    def pin(self, service: str, digest: str) -> str:
        self.verbs.append(("pin" if digest else "unpin", f"{service} {digest}".strip()))
        return f"{service}: pinned to {digest}" if digest else f"{service}: unpinned"

    def update_view(self, service: str, now: float) -> dict[str, object] | None:
        return self.said.get(service)

    def images_view(self, reader: Reader = PRIVILEGED) -> dict[str, Any]:
        self.viewed.append(reader)
        copy: dict[str, Any] = json.loads(json.dumps(self.image_list))  # fresh, as the daemon's
        return copy


class FakeSources:
    """Sources' API side: `names` may be synced; each sync is one round, done at once."""

    def __init__(self) -> None:
        self.names = ["site-7"]
        self.synced: list[str | None] = []
        self.error = ""
        self.done = True

    def sync_now(self, name: str | None) -> dict[str, int]:
        if name is not None and name not in self.names:
            raise KeyError(name)
        self.synced.append(name)
        return {n: 0 for n in self.names if name in (None, n)}

    def wait(self, rounds: dict[str, int], timeout: float) -> bool:
        return self.done

    def views(self, now: float | None = None) -> list[dict[str, Any]]:
        return [
            {
                "name": n,
                "url": "https://git.example.net/edge/site-7.git",
                "ref": "main",
                "commit": "a" * 40,
                "commit_time": 1700000000.0,
                "commit_age_seconds": 3600.0,
                "fetched_at": 1700003590.0,
                "fetched_age_seconds": 10.0,
                "applied_commit": "a" * 40,
                "candidate_commit": None,
                "last_error": self.error,
            }
            for n in self.names
        ]


class FakeReloads:
    """A reload served is a new desired-state object, as FakeDaemon.request_reload (or a
    test's stand-in) makes it: no reload of the fake is ever under way."""

    def __init__(self, controller: FakeController) -> None:
        self._controller = controller
        self._before: object = None

    @property
    def begun(self) -> int:
        self._before = self._controller.desired
        return 0

    def served(self, ticket: int) -> bool | None:
        return True if self._controller.desired is not self._before else None


class FakeDaemon:
    def __init__(self, socket_path: Path) -> None:
        # Wired as the Daemon wires it: the loop's hooks are handed to the controller.
        loop_metrics = LoopMetrics()
        self.controller = FakeController(hooks=[loop_metrics])
        self.images = FakeImages()
        self.metrics = Metrics(loop_metrics, self.controller, node=self.node_report)
        self.settings = Settings(socket_path=socket_path)
        self.notices = Notifier(Hooks(targets=lambda: self.settings.notifications))
        self.sources = FakeSources()
        self.reload_requests = 0
        self.reloads = FakeReloads(self.controller)
        self.settings_errors: tuple[str, ...] = ()
        self.unverified_containers: list[Unverified] = []

    def name_tag(self, spec_hash: str) -> str:
        return spec_hash[:5]

    def unverified(self) -> list[Unverified]:
        return list(self.unverified_containers)

    def node_report(self) -> NodeReport:
        probe, limits = PsutilProbe(), NodeLimits()
        sample = probe.sample("/")
        return NodeReport(
            sample,
            assess(sample, limits),
            limits,
            probe.self_sample(),
            waiting={"web": "1 container(s) wait for resources"},
            engine_calls=42,
            settings_errors=self.settings_errors,
        )

    def request_reload(self) -> None:
        self.reload_requests += 1
        c = self.controller
        # What the main loop does: a new desired-state object.
        c.desired = DesiredState(dict(c.desired.services), (), False, ())


def raw(path: Path, data: bytes, *, shut: bool = True, timeout: float = 5.0) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    try:
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
    except (BrokenPipeError, ConnectionResetError):
        # The server answered (a 431, say) and closed before reading it all: its answer
        # is still there to read.
        pass
    chunks = []
    while True:
        try:
            b = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not b:
            break
        chunks.append(b)
    s.close()
    return b"".join(chunks)


def call(path: Path, method: str, target: str, body: bytes = b"") -> tuple[int, Any]:
    head = f"{method} {target} HTTP/1.0\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    resp = raw(path, head + body)
    status = int(resp.split(b" ", 2)[1])
    payload = resp.split(b"\r\n\r\n", 1)[1]
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload.decode()


REAL_PEER_OF = api_module.peer_of


TAG = b"\0healerd-test-uid-"


def fake_peer_of(sock: socket.socket) -> Peer | None:
    """The uid a test client named in its bound address; else the real peer."""
    name = sock.getpeername()
    if isinstance(name, bytes) and name.startswith(TAG):
        uid = int(name[len(TAG) :].split(b"-", 1)[0])
        return Peer(os.getpid(), uid, uid)
    return REAL_PEER_OF(sock)


def connect_as(path: Path, uid: int, timeout: float = 5.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(TAG.decode() + f"{uid}-{secrets.token_hex(6)}")
    s.connect(str(path))  # blocking: waits for room in the listen backlog
    s.settimeout(timeout)
    return s
