"""Applies a plan's actions through the engine, in parallel with a bound.

Every action is idempotent at the engine boundary (removing a missing container
is success), so a pass interrupted half-way is simply finished by the next one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import string
import threading
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from healerd.config import EnvFileError, MountRefused, effective_environment, mounts_for_create
from healerd.core.echoes import OwnActions
from healerd.core.hooks import Hooks
from healerd.engine import CannotRestart, Engine, EngineError, EngineUnavailable, NameConflict
from healerd.model import (
    LABEL_CRASH_STREAK,
    LABEL_REPLACES,
    LABEL_RESTARTS,
    LABEL_SOURCE_FILE,
    LABEL_SPEC_HASH,
    NAME_HASH_LEN,
    Action,
    ActionKind,
    BuildSpec,
    ContainerState,
    ObservedContainer,
    RegistryAuth,
    ServiceSpec,
    aside_name,
)

log = logging.getLogger("healerd.executor")

_ALPHABET = string.ascii_lowercase + string.digits
_NAME_ATTEMPTS = 5


def plain_tag(spec_hash: str) -> str:
    return spec_hash[:NAME_HASH_LEN]


def container_name(spec: ServiceSpec, tag: Callable[[str], str] = plain_tag) -> str:
    """`<service>-<5 chars for the spec>-<5 random chars>`, like a pod name. The daemon's
    `tag` salts the spec hash with the host key (the hash of a spec that holds a secret
    must not be there for guessing it)."""
    suffix = "".join(secrets.choice(_ALPHABET) for _ in range(5))
    return f"{spec.name}-{tag(spec.spec_hash)}-{suffix}"


@dataclass(frozen=True)
class ActionResult:
    action: Action
    error: str | None = None
    container_id: str | None = None
    container_name: str | None = None
    # The engine could not be reached: said once for the outage, not once per action.
    unreachable: bool = False
    # Not tried: held back because the stop of its container failed.
    held: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


class Executor:
    def __init__(
        self,
        engine: Engine,
        parallel: int,
        name_tag: Callable[[str], str] = plain_tag,
        own: OwnActions | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        """`hooks` runs the services' lifecycle hooks (healerd.core.hooks): pre_stop
        before this executor stops or removes a running container, post_start after the
        start of one it started was reported (`post_start`)."""
        self._engine = engine
        self._hooks = hooks if hooks is not None else Hooks(engine, parallel=parallel)
        self._name_tag = name_tag
        self._own = own
        self._pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="healerd-act")
        self._pulled_lock = threading.Lock()
        self._pulled: set[str] = set()
        self._built: set[str] = set()
        self._flight_lock = threading.Lock()
        self._in_flight: set[Future[None]] = set()  # starts of start_later, to drain
        # What a create names for a service's image: a digest only an archive in
        # images_dir proved is named by its image's ID (ImagePolicy.local_name).
        self.local_name: Callable[[str], str] = lambda image: image

    def apply(self, actions: Sequence[Action]) -> list[ActionResult]:
        """Run all actions, at most `parallel` at once, and wait for every one.

        Stops and removes go first, so that what the containers hold (a fixed host port,
        memory, anonymous volumes, a place in the history) is free before their
        replacements start. Then the creates and starts, at full parallelism: they are
        what heals. Last, the old containers of a rollout whose replacement took over
        their volumes; but not one whose replacement failed: it keeps its slot (and its
        logs and data) for the retry. A failed container that is replaced is not removed
        at all: it stays, stopped, as history.
        """
        retiring = {
            a.container.id
            for a in actions
            if a.kind is ActionKind.CREATE and a.retire and a.container is not None
        }

        def later(a: Action) -> bool:
            return a.container is not None and a.container.id in retiring

        stops = [
            a
            for a in actions
            if a.kind is ActionKind.STOP or (a.kind is ActionKind.REMOVE and not later(a))
        ]
        starts = [a for a in actions if a.kind in (ActionKind.CREATE, ActionKind.START)]
        stopped = self._run_all(stops)
        # A container whose stop failed still runs: nothing takes its place (its
        # anonymous volumes, its port) before a pass sees it stopped.
        running = {r.action.container.id: r for r in stopped if r.action.container and not r.ok}
        held = [a for a in starts if a.container is not None and a.container.id in running]
        starts = [a for a in starts if a not in held]
        done = stopped + self._run_all(starts)
        done += [_not_after_a_failed_stop(a, running) for a in held]
        kept = {
            r.action.container.id
            for r in done
            if not r.ok and r.action.kind is ActionKind.CREATE and r.action.container is not None
        }
        clears = [
            a
            for a in actions
            if a.kind is ActionKind.REMOVE
            and later(a)
            and (a.container is None or a.container.id not in kept)
        ]
        return done + self._run_all(clears)

    def _run_all(self, actions: Sequence[Action]) -> list[ActionResult]:
        if len(actions) <= 1:
            return [self._run(a) for a in actions]
        return list(self._pool.map(self._run, actions))

    def _run(self, action: Action) -> ActionResult:
        try:
            if action.kind is ActionKind.CREATE:
                assert action.spec is not None
                return self._create(action, action.spec)
            assert action.container is not None
            # Without a spec (an orphan) the container's own stop timeout applies.
            grace = action.spec.stop_grace_period if action.spec else None
            if action.kind is ActionKind.START:
                return self._start(action, action.container)
            self._hooks.pre_stop(action.spec, action.container)
            if action.kind is ActionKind.STOP:
                self._engine.stop(action.container, grace)
            else:
                if self._own is not None:
                    self._own.removing(action.container.id)
                self._engine.remove(action.container, grace)
            return ActionResult(
                action, container_id=action.container.id, container_name=action.container.name
            )
        except EngineError as exc:
            return ActionResult(
                action, error=str(exc), unreachable=isinstance(exc, EngineUnavailable)
            )
        except Exception as exc:
            log.exception("unexpected error in %s", action.describe())
            return ActionResult(action, error=f"unexpected {type(exc).__name__}: {exc}")

    def _start(self, action: Action, c: ObservedContainer) -> ActionResult:
        """Heal in place; where the engine says only a new container can heal it (gone,
        being removed, its network or a mount source gone), that container is made in
        the same action: the plan's start stands for "this replica runs again"."""
        if self._own is not None:
            self._own.starting(c.id)
        name = action.spec.container_name if action.spec is not None else None
        if name and c.name == aside_name(name, c.id):  # a replacement cut short: its name
            with contextlib.suppress(EngineError):  # back first, else it runs as it is
                self._engine.rename(c, name)
        try:
            self._engine.start(c)
        except CannotRestart as exc:
            if action.spec is None:
                raise
            log.info("%s: cannot start %s in place (%s): replacing it", c.service, c.name, exc)
            why = "it was removed (not by healerd)" if exc.gone else f"it cannot start again: {exc}"
            create = dataclasses.replace(
                action, kind=ActionKind.CREATE, reason=f"replace {c.name}: {why}"
            )
            return self._create(create, action.spec)
        return ActionResult(action, container_id=c.id, container_name=c.name)

    def _create(self, action: Action, spec: ServiceSpec) -> ActionResult:
        labels = {
            LABEL_SPEC_HASH: spec.spec_hash,
            LABEL_RESTARTS: str(action.restarts),
            LABEL_CRASH_STREAK: str(action.crash_streak),
        }
        if spec.source_file:
            labels[LABEL_SOURCE_FILE] = spec.source_file
        inherit = action.container.anon_volumes if action.container is not None else ()
        if action.container is not None:
            labels[LABEL_REPLACES] = action.container.id
        if spec.env_files:
            # Secrets are read now, not kept in memory; errors name file and line only.
            try:
                spec = dataclasses.replace(spec, environment=effective_environment(spec))
            except (EnvFileError, OSError) as exc:
                raise EngineError(f"env_file: {exc}") from None
        if spec.secrets or spec.configs:
            # Checked again now; the engine gets the paths read, with no link to follow.
            try:
                spec = mounts_for_create(spec)
            except MountRefused as exc:
                raise EngineError(f"secrets: {exc}") from None
        if (image := self.local_name(spec.image)) != spec.image:
            spec = dataclasses.replace(spec, image=image)  # the labels keep the spec's hash
        if spec.container_name:
            return self._create_named(action, spec, labels, inherit)
        return self._create_generated(action, spec, labels, inherit)

    def _create_generated(
        self,
        action: Action,
        spec: ServiceSpec,
        labels: dict[str, str],
        inherit: Sequence[tuple[str, str]],
    ) -> ActionResult:
        """A create under a generated name, another name if the engine has it already."""
        last: NameConflict | None = None
        for _ in range(_NAME_ATTEMPTS):
            name = container_name(spec, self._name_tag)
            if self._own is not None:
                self._own.creating(name)
            try:
                cid = self._engine.create_and_start(spec, name, labels, inherit)
                return ActionResult(action, container_id=cid, container_name=name)
            except EngineError as exc:
                if self._own is not None:  # nothing of this call is on its way to start
                    self._own.create_failed(name)
                if not isinstance(exc, NameConflict):  # else another container's name
                    raise
                last = exc
        raise EngineError(f"no free container name after {_NAME_ATTEMPTS} tries: {last}")

    def _create_named(
        self,
        action: Action,
        spec: ServiceSpec,
        labels: dict[str, str],
        inherit: Sequence[tuple[str, str]],
    ) -> ActionResult:
        """Compose's container_name: the container this one replaces holds the name, so
        it is renamed aside, the new one created (on its anonymous volumes), and the old
        one removed; if the create fails, the old one gets its name back. A name held by
        any other container is an error: healerd never touches what it does not own."""
        name = spec.container_name
        assert name is not None
        old = action.container
        try:
            cid = self._engine.create_and_start(spec, name, labels, inherit)
            if old is not None and old.name == aside_name(name, old.id):
                # Renamed aside by a replacement the engine cut short (signing.aside_of):
                # the new one runs; a remove that fails is the next pass's to do again.
                self._hooks.pre_stop(spec, old)
                try:
                    self._engine.remove(old, spec.stop_grace_period)
                except EngineError as exc:
                    log.warning("%s: %s not removed yet: %s", spec.name, old.name, exc)
            return ActionResult(action, container_id=cid, container_name=name)
        except NameConflict:
            if old is None or old.name != name:
                raise EngineError(
                    f"container_name {name!r} is taken by a container this service does not "
                    "replace: remove or rename it"
                ) from None
        aside = aside_name(name, old.id)
        self._engine.rename(old, aside)
        try:
            cid = self._engine.create_and_start(spec, name, labels, inherit)
        except EngineError:
            with contextlib.suppress(EngineError):
                self._engine.rename(dataclasses.replace(old, name=aside), name)
            raise
        # Its anonymous volumes that the new one took over are in use: they stay.
        self._hooks.pre_stop(spec, old)
        self._engine.remove(dataclasses.replace(old, name=aside), spec.stop_grace_period)
        return ActionResult(action, container_id=cid, container_name=name)

    def pull(self, image: str, auth: RegistryAuth | None = None) -> None:
        """Pull an image (raises ImagePullFailed): one of the other ways healerd changes
        the engine, so it is here with the container actions."""
        self._engine.pull(image, auth)
        with self._pulled_lock:
            self._pulled.add(image)

    def build(self, build: BuildSpec, tag: str, *, no_cache: bool = False) -> None:
        """Build an image (raises ImageBuildFailed): beside pull, for the same reason."""
        self._engine.build_image(build, tag, no_cache=no_cache)
        with self._pulled_lock:  # image GC's: the build it replaces may go, once unused
            self._pulled.add(tag)
            self._built.add(tag)

    def built(self) -> frozenset[str]:
        """The tags built since start (healerctl images says "built", not "pulled")."""
        with self._pulled_lock:
            return frozenset(self._built)

    def pulled(self) -> frozenset[str]:
        """The references pulled or built since start: image GC may collect their
        repositories, and the images they named (healerd.core.imagegc `mine`)."""
        with self._pulled_lock:
            return frozenset(self._pulled)

    def prune_volumes(self, keep: AbstractSet[str], dry_run: bool) -> list[str]:
        """Remove the unused project volumes no declared service names (on request)."""
        return self._engine.prune_volumes(keep, dry_run)

    def prune_networks(self, keep: AbstractSet[str]) -> bool:
        """Remove the project networks healerd made that no declared service names."""
        return self._engine.prune_networks(keep)

    def creating(self) -> frozenset[str]:
        """The names of the containers this executor is creating (not started yet)."""
        return self._own.creating_names() if self._own is not None else frozenset()

    def start_later(self, actions: Sequence[Action], done: Callable[[ActionResult], None]) -> None:
        """Starts in place, each on the pool at once; `done` gets each one's result when
        it ends. The pass does not wait for them: a start is most of a heal, and the
        deaths that come meanwhile (a storm) are planned and started while these run,
        as soon as the engine says so, not a whole batch of starts later."""

        def one(a: Action) -> None:
            result = self._run(a)
            try:
                done(result)
            except Exception:
                log.exception("after %s", a.describe())
            self.post_start([result])

        for a in actions:
            f = self._pool.submit(one, a)
            with self._flight_lock:
                self._in_flight.add(f)
            f.add_done_callback(self._landed)  # at once, in this thread, if done already

    def post_start(self, results: Sequence[ActionResult]) -> None:
        """The post_start hooks of the containers these results started, once their
        starts were reported: on the hooks' own pool, so that neither the heal's latency
        nor the executor's slots wait for them."""
        for r in results:
            if r.ok and r.action.kind in _STARTS and r.container_id is not None:
                self._hooks.post_start(r.action.spec, r.container_id, r.container_name or "")

    def _landed(self, f: Future[None]) -> None:
        with self._flight_lock:
            self._in_flight.discard(f)

    def drain(self, timeout: float | None = None) -> None:
        """Wait for the starts of start_later to end (a pass without threads: tests)."""
        with self._flight_lock:
            pending = list(self._in_flight)
        wait(pending, timeout)
        self._hooks.drain(timeout)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._hooks.shutdown()


_STARTS = (ActionKind.CREATE, ActionKind.START)


# Containers that may still hold what a replacement needs (a fixed host port, memory).
HOLDING_STATES = frozenset(
    {ContainerState.RUNNING, ContainerState.PAUSED, ContainerState.RESTARTING}
)


def _not_after_a_failed_stop(a: Action, running: Mapping[str, ActionResult]) -> ActionResult:
    assert a.container is not None
    stop = running[a.container.id]
    why = f"not done: the stop of {a.container.name} failed ({stop.error})"
    return ActionResult(a, error=why, unreachable=stop.unreachable, held=True)
