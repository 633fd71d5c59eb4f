"""An in-memory engine for unit tests of the loop (integration tests use a real dockerd).

Strict, like kopf's mocks ("Must not be called!"): a test states which engine calls it
allows, `FakeEngine(clock, allow=LOOP_CALLS | {"pull"})`; any other call raises an
AssertionError that names it, and is recorded in `engine.refused`. The loop catches
exceptions in a pass, so the raise alone may go unseen: tests/conftest.py fails every
test in which a FakeEngine refused a call, whoever caught the error.

Call names are those of `engine.calls`: "list" (list_managed), "create"
(create_and_start), and the Engine protocol's other method names.

Where it models the engine, it behaves as dockerd does: tests/contract/suite.py holds it
and the Docker adapter to the same tests (tests/unit/test_engine_contract.py). Like an
adapter it has a `meter` (each call takes from it, as each request does) and an `owner`.
"""

from __future__ import annotations

import builtins
import dataclasses
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime

from healerd.core.clock import FakeClock
from healerd.core.planner import history
from healerd.core.updatepins import repository
from healerd.engine import (
    CannotRestart,
    Death,
    EngineError,
    EngineUnavailable,
    HookRun,
    ImageBuildFailed,
    ImageLoadFailed,
    ImageMissing,
    ImagePullFailed,
    Inherited,
    Labelled,
    LocalImage,
    LogStream,
    NameConflict,
    Owner,
)
from healerd.engine.pacing import Meter
from healerd.model import (
    LABEL_CONTEXT_HASH,
    LABEL_SERVICE,
    LABEL_SPEC_HASH,
    OWNER_LABEL_PREFIX,
    BuildSpec,
    ContainerState,
    EngineAction,
    EngineEvent,
    Health,
    Hook,
    ObservedContainer,
    RegistryAuth,
    ServiceSpec,
)

# What a reconcile pass asks of the engine: one list, whether an image is there, creates,
# starts, stops, renames (a fixed container_name) and removes, lifecycle hooks; and, on
# first contact and whenever the engine is back, its version and data root.
LOOP_CALLS = frozenset(
    {
        "list",
        "version",
        "data_root",
        "image_present",
        "create",
        "start",
        "stop",
        "remove",
        "rename",
        "prune_networks",
        "exec_hook",
    }
)
# Opt-in: pulls, the image size (the disk check before a pull, with admission), the
# engine's identity (the daemon's one-healerd-per-engine lock), the event stream.
OPT_IN_CALLS = frozenset(
    {"pull", "image_size_hint", "identity", "watch", "stop_watch", "logs", "death"}
    | {"prune_volumes", "registry_digest", "local_digests"}
    | {"set_restart_policy"}  # the daemon's hand-off at a stop, taken back at a start
    | {"file_time"}  # an update's lock file (update_lock)
    | {"volume_path"}  # snapshots: where a volume's files are
    | {"image_labels", "build_image"}  # services with build: (issue 34)
    | {"load_image"}  # the images directory (issue 35)
)
# Image garbage collection (healerd.core.imagegc): the image list, which images
# containers use, removing one.
IMAGE_GC_CALLS = frozenset({"list_images", "images_in_use", "remove_image"})
ALL_CALLS = LOOP_CALLS | OPT_IN_CALLS | IMAGE_GC_CALLS
# Without `allow=`: what an ordinary pass does, nothing more.
DEFAULT_ALLOW = LOOP_CALLS

_engines: list[FakeEngine] = []  # made since the last forget_engines(), for tests/conftest.py


def forget_engines() -> None:
    """Forget the engines of earlier tests (tests/conftest.py, before each test)."""
    _engines.clear()


def new_refusals() -> list[str]:
    """The calls refused by engines made since forget_engines(), not reported before."""
    out: list[str] = []
    for engine in list(_engines):
        refused = list(engine.refused)
        out += refused[engine.reported :]
        engine.reported = len(refused)
    return out


class FakeEngine:
    def __init__(
        self, clock: FakeClock | None = None, allow: Iterable[str] = DEFAULT_ALLOW
    ) -> None:
        self.allow = frozenset(allow)
        unknown = self.allow - ALL_CALLS
        if unknown:
            raise ValueError(
                f"FakeEngine: no such engine call {sorted(unknown)}: {sorted(ALL_CALLS)}"
            )
        self.refused: list[str] = []  # calls outside `allow`, e.g. "pull('img:2')"
        self.reported = 0  # how many of them tests/conftest.py has seen
        _engines.append(self)
        self.containers: dict[str, ObservedContainer] = {}
        self.calls: list[str] = []
        self.list_scopes: list[str | None] = []  # per list call: its service, None for all
        self.down = False
        self.fail_creates = 0
        self.images: set[str] | None = None  # None: every image is present
        self.loadable: dict[bytes, tuple[str, ...]] = {}  # archive bytes -> what a load brings
        self.pullable: set[str] = set()
        self.refuse_starts: dict[str, str] = {}  # container id -> why the engine refuses
        # Builds (issue 34): each image's labels (a build sets its context hash), the
        # builds made (tag, context hash, no_cache), and why a build of a tag fails.
        self.image_label_sets: dict[str, dict[str, str]] = {}
        self.builds: list[tuple[str, str, bool]] = []
        self.build_failures: dict[str, str] = {}
        self.pull_auths: list[tuple[str, RegistryAuth | None]] = []  # what each pull was given
        self.crash_images: set[str] = set()  # containers of these exit at once
        self.image_volumes = False  # images declare a VOLUME: containers get one each
        # container id -> (wall time, line) it wrote (`say`)
        self.output: dict[str, list[tuple[float, str]]] = {}
        self.files: dict[tuple[str, str], float] = {}  # (container, path) -> mtime
        self.oom: set[str] = set()  # containers the kernel killed for memory
        self.image_sizes: dict[str, int] = {}  # repository -> bytes of a local image
        self.networks_kept: set[str] | None = None  # the last prune_networks' keep
        self.project_volumes: set[str] = set()  # unused named volumes prune_volumes sees
        # Named volumes' host directories (volume_path); an anonymous volume of
        # `volumes` is under the data root.
        self.volume_paths: dict[str, str] = {}
        self.registry: dict[str, str] = {}  # image (repo:tag) -> the digest its registry has
        self.repo_digests: dict[str, tuple[str, ...]] = {}  # local image -> RepoDigests
        self.root = "/fake/data-root"
        # Image garbage collection: the local store by ID, image IDs that containers
        # healerd does not list use, and the IDs removed, in order.
        self.local_images: dict[str, LocalImage] = {}
        self.foreign_image_users: set[str] = set()
        self.removed_images: list[str] = []
        self.policies: dict[str, str] = {}  # container id -> its engine restart policy
        # Containers a start cannot bring back (their network gone, say), with why.
        self.unstartable: dict[str, str] = {}
        # When each container's latest run began and its last one ended, as the engine's
        # inspect says it (RFC 3339).
        self.started_at: dict[str, str] = {}
        self.finished_at: dict[str, str] = {}
        # Containers with a healthcheck: its test (run by `run_health_checks`).
        self.checks: dict[str, tuple[str, ...]] = {}
        self.broken_images: set[str] = set()  # a start of these fails (no such command)
        self.volumes: set[str] = set()  # anonymous volumes on the engine
        # Hooks run (exec_hook): (container id, hook, timeout), in order; how a hook
        # ends, by its command's first word (else exit 0, no output); `on_hook` is
        # called with each run's container id and hook before it ends (a test's probe).
        self.hooks_run: list[tuple[str, Hook, float]] = []
        self.stop_timeouts: list[float | None] = []  # each stop's grace, in order
        self.hook_answers: dict[str, HookRun] = {}
        self.on_hook: Callable[[str, Hook], None] | None = None
        # The event stream: every event so far, in order (`watch` delivers them).
        self.emitted: list[EngineEvent] = []
        self._stream = threading.Condition()
        self._watch_stopped = False
        self.clock = clock
        # As an adapter's: every call takes from the meter (one request a call), and the
        # owner decides what a list shows and labels what a create makes.
        self.meter = Meter()
        self.owner: Owner = Labelled()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _allowed(self, call: str, *args: object) -> None:
        """Refuse a call this test did not allow: record it, and raise. An allowed one
        takes from the meter, as each request of a real adapter does."""
        if call in self.allow:
            self.meter.take()
            return
        what = f"{call}({', '.join(repr(a) for a in args)})"
        self.refused.append(what)
        raise AssertionError(
            f"FakeEngine: {what} must not be called: this test allows {sorted(self.allow)}"
        )

    def version(self) -> str:
        self._allowed("version")
        self._check()
        return "fake"

    def api_version(self) -> str | None:
        return "1.41"

    def engine_kind(self) -> str | None:
        return "docker"

    def identity(self) -> str:
        self._allowed("identity")
        self._check()
        return "fake-engine-id /fake/data-root"

    def data_root(self) -> str | None:
        self._allowed("data_root")
        return self.root

    def _check(self) -> None:
        if self.down:
            raise EngineUnavailable("fake engine down")

    def now(self) -> float:
        return self.clock.time() if self.clock else float(len(self.containers))

    def _stamp(self) -> str:
        """Now as the engine's inspect writes times (RFC 3339, UTC)."""
        return datetime.fromtimestamp(self.now(), UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def _emit(self, c: ObservedContainer, *actions: EngineAction, **details: object) -> None:
        """The event stream's events about `c` (`details`: signal, exit_code)."""
        with self._stream:
            for action in actions:
                event = EngineEvent(c.service, c.id, action, name=c.name, **details)  # type: ignore[arg-type]
                self.emitted.append(event)
            self._stream.notify_all()

    def list_managed(self, service: str | None = None) -> list[ObservedContainer]:
        self._allowed("list")
        self.calls.append("list")
        self.list_scopes.append(service)
        self._check()
        with self._lock:  # only those with healerd's labels (a service)
            cs = self.containers.values()
            listed = [c for c in cs if c.service and service in (None, c.service)]
        return self.owner.mine(listed, service)

    def create_and_start(
        self, spec: ServiceSpec, name: str, labels: Mapping[str, str], inherit: Inherited = ()
    ) -> str:
        self._allowed("create", spec.name, name)
        self.calls.append("create")
        self._check()
        labels = self.owner.labels(spec, name, labels)
        with self._lock:
            if any(c.name == name for c in self.containers.values()):
                raise NameConflict(f"name {name} is taken")
            if self.fail_creates:
                self.fail_creates -= 1
                raise EngineError("fake create failure")
            if not self._present(spec.image):
                raise ImageMissing(f"no such image {spec.image}")
            n = next(self._ids)
            cid = f"id{n:04d}"
            crash = spec.image in self.crash_images
            hc = spec.healthcheck
            checked = hc is not None and bool(hc.test) and not hc.disable
            c = ObservedContainer(
                id=cid,
                name=name,
                service=labels.get(LABEL_SERVICE, spec.name),
                # The caller's hash wins, as the adapter's container_labels says.
                spec_hash=labels.get(LABEL_SPEC_HASH, spec.spec_hash),
                image=spec.image,
                state=ContainerState.EXITED if crash else ContainerState.RUNNING,
                created=self.now(),
                health=Health.STARTING if checked and not crash else None,
                exit_code=1 if crash else None,
                restarts=int(labels.get("io.healerd.restarts", "0")),
                crash_streak=int(labels.get("io.healerd.crash-streak", "0")),
                source_file=labels.get("io.healerd.source-file", ""),
                replaces=labels.get("io.healerd.replaces", ""),
                anon_volumes=tuple(inherit) or self.new_volumes(cid, spec),
                owner_labels=self._owner_labels(spec, labels),
            )
            if spec.image in self.broken_images:
                # The engine made it, its start failed, and the adapter removed it with
                # the anonymous volumes made for it: nothing is left.
                self._emit(c, EngineAction.CREATED, EngineAction.DESTROYED)
                raise EngineError(f"start {name}: exec: no such file or directory")
            self.containers[cid] = c
            self.volumes |= {v for v, _ in c.anon_volumes}
            self.started_at[cid] = self._stamp()
            if checked and hc is not None:
                self.checks[cid] = hc.test
            self._emit(c, EngineAction.CREATED, EngineAction.STARTED)
            if crash:
                self.finished_at[cid] = self._stamp()
                self._emit(c, EngineAction.DIED, exit_code=1)
            return cid

    def _owner_labels(
        self, spec: ServiceSpec, labels: Mapping[str, str]
    ) -> tuple[tuple[str, str], ...]:
        """As the engine lists them: every io.healerd.* label, the service and spec hash
        added unless given (as the adapter's create does)."""
        own = {LABEL_SERVICE: spec.name, LABEL_SPEC_HASH: spec.spec_hash, **labels}
        return tuple(sorted((k, v) for k, v in own.items() if k.startswith(OWNER_LABEL_PREFIX)))

    def new_volumes(self, cid: str, spec: ServiceSpec) -> tuple[tuple[str, str], ...]:
        """A fresh anonymous volume for each of the spec's volumes without a source, and
        for the image's VOLUME (`image_volumes`)."""
        targets = [v.target for v in spec.volumes if not v.source and v.kind in ("", "volume")]
        targets += ["/data"] if self.image_volumes and "/data" not in targets else []
        return tuple((f"vol-{cid}" + (f"-{i}" if i else ""), t) for i, t in enumerate(targets))

    def start(self, container: ObservedContainer) -> None:
        self._allowed("start", container.name)
        self.calls.append("start")
        self._check()
        with self._lock:
            gone = container.id not in self.containers
            why = self.unstartable.get(container.id)
            refused = self.refuse_starts.get(container.id)
        if refused:  # as a port another container took: a new container would not help
            raise EngineError(f"start {container.name}: {refused}")
        if gone or why:
            # As the adapter says what only a new container gets past
            # (healerd.engine.docker.containers, start).
            raise CannotRestart(
                f"start {container.name}: {why or 'No such container'}",
                gone=gone or "removal" in (why or ""),
            )
        with self._lock:
            c = self.containers[container.id]
        if c.running:
            return  # already running: success, nothing changes (not even its health)
        self.started_at[c.id] = self._stamp()
        self._emit(c, EngineAction.STARTED)
        if container.image in self.crash_images:  # it crashes again at once
            self.set(c.id, state=ContainerState.EXITED, exit_code=1)
            self._emit(c, EngineAction.DIED, exit_code=1)
            return
        # A new run: its health checks start again.
        health = Health.STARTING if c.id in self.checks or c.health is not None else None
        self.set(c.id, state=ContainerState.RUNNING, exit_code=None, health=health)

    def prune_volumes(self, keep: AbstractSet[str], dry_run: bool) -> list[str]:
        self._allowed("prune_volumes")
        self.calls.append("prune_volumes")
        self._check()
        return sorted(set(self.project_volumes) - set(keep))

    def volume_path(self, name: str) -> str:
        self._allowed("volume_path", name)
        self.calls.append("volume_path")
        self._check()
        if name in self.volume_paths:
            return self.volume_paths[name]
        if name in self.volumes:
            return f"{self.root}/volumes/{name}/_data"
        raise EngineError(f"volume {name}: no such volume")

    def prune_networks(self, keep: AbstractSet[str]) -> bool:
        self._allowed("prune_networks")
        self.calls.append("prune_networks")
        self._check()
        self.networks_kept = set(keep)
        return True

    def rename(self, container: ObservedContainer, name: str) -> None:
        self._allowed("rename", container.name, name)
        self.calls.append("rename")
        self._check()
        with self._lock:
            if any(c.name == name for c in self.containers.values()):
                raise NameConflict(f"name {name} is taken")
            c = self.containers.get(container.id)
            if c is not None:
                self.containers[c.id] = dataclasses.replace(c, name=name)

    def stop(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        self._allowed("stop", container.name)
        self.calls.append("stop")
        self.stop_timeouts.append(stop_timeout)
        self._check()
        c = self.containers.get(container.id)
        if c is not None and c.state in (ContainerState.RUNNING, ContainerState.PAUSED):
            # Unpaused first, as the adapter does: a stop ends it.
            self._emit(c, EngineAction.KILLED, signal=15)
            self.set(c.id, state=ContainerState.EXITED, exit_code=0)
            self._emit(c, EngineAction.DIED, exit_code=0)
            self._emit(c, EngineAction.STOPPED)

    def image_present(self, image: str) -> bool:
        self._allowed("image_present", image)
        self.calls.append("image_present")
        self._check()
        return self._present(image)

    def _present(self, image: str) -> bool:
        """As the engine finds `repo:tag@digest`: by its digest (pulled as `repo@digest`)."""
        if self.images is None or image in self.images:
            return True
        name, at, digest = image.partition("@")
        return bool(at) and f"{repository(name)}@{digest}" in self.images

    def image_size_hint(self, image: str) -> int | None:
        self._allowed("image_size_hint", image)
        self.calls.append("image_size_hint")
        self._check()
        return self.image_sizes.get(image.rsplit(":", 1)[0])

    def pull(self, image: str, auth: RegistryAuth | None = None) -> None:
        self._allowed("pull", image)
        self.calls.append("pull")
        self.pull_auths.append((image, auth))
        self._check()
        if image not in self.pullable:
            raise ImagePullFailed(f"pull {image}: no registry")
        if self.images is not None:
            self.images.add(image)

    def load_image(self, chunks: Iterable[bytes]) -> list[str]:
        """The archive's bytes are read whole (fakes are small); `loadable` maps them to
        the references a load brings, anything else is refused as the engine would."""
        self._allowed("load_image", "")
        self.calls.append("load_image")
        self._check()
        data = b"".join(chunks)
        refs = self.loadable.get(data)
        if refs is None:
            raise ImageLoadFailed("unexpected EOF")
        if self.images is not None:
            self.images.update(refs)
        return list(refs)

    def image_labels(self, image: str) -> dict[str, str] | None:
        self._allowed("image_labels", image)
        self.calls.append("image_labels")
        self._check()
        if self.images is not None and image not in self.images:
            return None
        return dict(self.image_label_sets.get(image, {}))

    def build_image(self, build: BuildSpec, tag: str, *, no_cache: bool = False) -> None:
        self._allowed("build_image", tag)
        self.calls.append("build_image")
        self._check()
        self.builds.append((tag, build.context_hash, no_cache))
        if tag in self.build_failures:
            raise ImageBuildFailed(f"build {tag}: {self.build_failures[tag]}")
        if self.images is not None:
            self.images.add(tag)
        labels = {**dict(build.labels), LABEL_CONTEXT_HASH: build.context_hash}
        self.image_label_sets[tag] = labels

    def registry_digest(self, image: str, auth: RegistryAuth | None = None) -> str:
        self._allowed("registry_digest", image)
        self.calls.append("registry_digest")
        self._check()
        if image not in self.registry:
            raise ImagePullFailed(f"check {image}: manifest unknown")
        return self.registry[image]

    def local_digests(self, image: str) -> tuple[str, ...]:
        self._allowed("local_digests", image)
        self.calls.append("local_digests")
        self._check()
        if self.images is not None and image not in self.images:
            raise ImageMissing(f"inspect image {image}: no such image")
        return self.repo_digests.get(image, ())

    def remove(self, container: ObservedContainer, stop_timeout: float | None) -> None:
        self._allowed("remove", container.name)
        self.calls.append("remove")
        self._check()
        with self._lock:
            c = self.containers.pop(container.id, None)
            if c is None:
                return  # gone already: success
            used = {v for o in self.containers.values() for v, _ in o.anon_volumes}
            self.volumes -= {v for v, _ in c.anon_volumes} - used
        if c.running:
            self._emit(c, EngineAction.KILLED, signal=9)
            self._emit(c, EngineAction.DIED, exit_code=137)
        self._emit(c, EngineAction.DESTROYED)

    def exec_hook(self, container_id: str, hook: Hook, timeout: float) -> HookRun:
        """As the engine's exec: refused (409) unless the container runs; the answer
        `hook_answers` holds for its command (None as the exit code: it passed its
        time), else exit 0."""
        self._allowed("exec_hook", container_id, hook.command)
        self.calls.append("exec_hook")
        self._check()
        with self._lock:
            c = self.containers.get(container_id)
        if c is None:
            raise EngineError(f"exec in {container_id}: No such container")
        if c.state is not ContainerState.RUNNING:
            raise EngineError(f"exec in {container_id}: Container {container_id} is not running")
        self.hooks_run.append((container_id, hook, timeout))
        if self.on_hook is not None:
            self.on_hook(container_id, hook)
        return self.hook_answers.get(hook.command[0] if hook.command else "", HookRun(0))

    def watch(
        self, on_event: Callable[[EngineEvent], None], on_connected: Callable[[], None]
    ) -> None:
        """The events from now on, until stop_watch (or the engine goes down)."""
        self._allowed("watch")
        self._check()
        with self._stream:
            seen = len(self.emitted)
        on_connected()
        while True:
            with self._stream:
                while seen == len(self.emitted) and not (self._watch_stopped or self.down):
                    self._stream.wait(0.05)
                if self._watch_stopped:
                    return
                if self.down:
                    raise EngineUnavailable("fake engine down: the event stream ended")
                new, seen = self.emitted[seen:], len(self.emitted)
            for event in new:
                on_event(event)

    def stop_watch(self) -> None:
        self._allowed("stop_watch")
        with self._stream:
            self._watch_stopped = True
            self._stream.notify_all()

    # -- disruptions -------------------------------------------------------------

    def kill(self, cid: str, exit_code: int = 137, *, signal: int | None = None) -> None:
        """The container's process ends with `exit_code` (a crash); with `signal`, it was
        sent that signal (`docker kill`)."""
        c = self.containers[cid]
        if signal is not None:
            self._emit(c, EngineAction.KILLED, signal=signal)
        self.set(cid, state=ContainerState.EXITED, exit_code=exit_code)
        self._emit(c, EngineAction.DIED, exit_code=exit_code)

    def pause(self, cid: str) -> None:
        """`docker pause`."""
        self.set(cid, state=ContainerState.PAUSED)
        self._emit(self.containers[cid], EngineAction.PAUSED)

    def run_health_checks(self) -> None:
        """Each running container's healthcheck runs once: a test of `true` (or `exit 0`)
        passes, any other fails (the fake runs no command)."""
        for cid, test in list(self.checks.items()):
            c = self.containers.get(cid)
            if c is not None and c.running:
                ok = test[-1] in ("true", "exit 0")
                self.set(cid, health=Health.HEALTHY if ok else Health.UNHEALTHY)
                self._emit(c, EngineAction.HEALTH)

    def set(self, cid: str, **changes: object) -> None:
        with self._lock:
            c = self.containers[cid]
            self.containers[cid] = new = dataclasses.replace(c, **changes)  # type: ignore[arg-type]
        if c.running and not new.running:  # a run ended: when, as the inspect says it
            self.finished_at[cid] = self._stamp()

    def say(self, container_id: str, *lines: str) -> None:
        """The container writes `lines` now (the clock's wall time, 0 without a clock)."""
        at = self.clock.time() if self.clock is not None else 0.0
        self.output.setdefault(container_id, []).extend((at, line) for line in lines)

    def logs(
        self, container_id: str, tail: int | None, since: float | None, until: float | None = None
    ) -> LogStream:
        """As the engine's json-file driver: the last `tail` lines first, then those
        written from `since` until `until`."""
        self._allowed("logs", container_id)
        self.calls.append("logs")
        self._check()
        lines = self.output.get(container_id, [])
        if tail is not None:
            lines = lines[-tail:] if tail else []
        text = "".join(
            f"{line}\n"
            for at, line in lines
            if (since is None or at >= since) and (until is None or at <= until)
        )
        return LogStream([text.encode()] if text else [])

    def file_time(self, container_id: str, path: str) -> float | None:
        self._allowed("file_time", container_id, path)
        self.calls.append("file_time")
        self._check()
        c = self.containers.get(container_id)
        if c is None or not c.running:
            return None
        return self.files.get((container_id, path))

    def death(self, container_id: str) -> Death:
        self._allowed("death", container_id)
        self.calls.append("death")
        self._check()
        c = self.containers[container_id]
        began = self.started_at.get(container_id, "")
        ended = self.finished_at.get(container_id, "")
        if c.running:
            ended = self.finished_at.get(container_id, "")
            return Death(None, False, ended, started_at=began, ran_before=bool(ended))
        return Death(
            c.exit_code,
            c.exit_code == 137 and container_id in self.oom,
            ended or "2026-01-01T00:00:00Z",
            started_at=began,
        )

    def live(self) -> dict[str, ObservedContainer]:
        """The containers that count: history (replaced failed containers, kept for
        their logs) apart."""
        with self._lock:
            cs = list(self.containers.values())
        old = {c.id for c in history(cs)}
        return {c.id: c for c in cs if c.id not in old}

    def running(self, service: str) -> list[ObservedContainer]:
        return [c for c in self.containers.values() if c.service == service and c.running]

    # -- image garbage collection ----------------------------------------------------

    def list_images(self) -> list[LocalImage]:
        self._allowed("list_images")
        self.calls.append("list_images")
        self._check()
        with self._lock:
            return list(self.local_images.values())

    def images_in_use(self) -> builtins.set[str]:  # `set` is a method here
        """The image IDs of `foreign_image_users` and of containers whose image is the ID
        of a local image or one of its references."""
        self._allowed("images_in_use")
        self.calls.append("images_in_use")
        self._check()
        with self._lock:
            used = set(self.foreign_image_users)
            for c in self.containers.values():
                for img in self.local_images.values():
                    if c.image in (img.id, *img.tags, *img.digests):
                        used.add(img.id)
            return used

    def set_restart_policy(self, container_id: str, policy: str) -> None:
        self._allowed("set_restart_policy", container_id, policy)
        self.calls.append("set_restart_policy")
        self._check()
        with self._lock:
            if container_id in self.containers:
                self.policies[container_id] = policy

    def remove_image(self, image_id: str) -> bool:
        self._allowed("remove_image", image_id)
        self.calls.append("remove_image")
        self._check()
        with self._lock:
            if image_id in self.foreign_image_users or image_id not in self.local_images:
                return False
            del self.local_images[image_id]
            self.removed_images.append(image_id)
            return True
