"""Lifecycle hooks at run time: Compose's `post_start` and `pre_stop`, and x-healerd's
`pre_update`, each run in a container of the service through the engine
(ContainerRuntime.exec_hook), one hook after the other, all within one bound.

- post_start: after healerd started a container (created, or started again in place),
  once the start is reported, on a pool of its own: a heal never waits for it, and a
  hook that runs long holds no slot of the executor's. One that fails is told and the
  container keeps running, as `docker compose up` reports the error and leaves the
  container (Kubernetes kills it: healerd would then heal it, and run the hook again,
  in a loop a failing hook never leaves).
- pre_stop: before healerd stops or removes a running container, in the stop's own
  thread, within the service's stop_grace_period (at least PRE_STOP_FLOOR); then the
  stop, whatever the hooks did. Never for a container that stopped by itself.
- pre_update: before an image update (`pre_update` below), in the service's oldest
  running container; one that fails postpones the update.

A hook that fails (a non-zero exit, its time passed, the engine refused it) is logged
with its exit code and the last lines of its output, the service's and the hook's
environment values and the file's `${VAR}` values masked, and recorded as a
`hook-failed` event; the hooks after it do not run.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass

from healerd.config.masking import mask_environment, mask_free, shown
from healerd.config.units import format_duration
from healerd.core.events import EventLog
from healerd.engine import ContainerRuntime, EngineError, HookRun
from healerd.model import (
    HOOK_TIMEOUT,
    PRE_STOP_FLOOR,
    ContainerState,
    Hook,
    ObservedContainer,
    ServiceSpec,
)
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.hooks")


@dataclass(frozen=True)
class HookFailure:
    """How the hooks of one run failed: which (`where`, as `post_start[0]`), its exit
    code (None: it passed its time, or the engine refused it: `error`), the last lines
    of its output, masked, and the bound of the run (`timeout`)."""

    where: str
    exit_code: int | None
    output: str = ""
    error: str = ""
    timeout: float = 0.0

    def describe(self) -> str:
        if self.error:
            what = f"could not run: {self.error}"
        elif self.exit_code is None:
            what = f"passed its {format_duration(self.timeout)} and was left running"
        else:
            what = f"exited with code {self.exit_code}"
        return f"{self.where} {what}" + (f"; output: {self.output}" if self.output else "")


def pre_stop_bound(spec: ServiceSpec) -> float:
    """How long the pre_stop hooks of one stop may take, all together."""
    return max(PRE_STOP_FLOOR, spec.stop_grace_period)


def run_hooks(
    engine: ContainerRuntime,
    spec: ServiceSpec,
    container_id: str,
    kind: str,
    bound: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> HookFailure | None:
    """Run `spec`'s hooks of `kind` (post_start, pre_stop, pre_update) in the container,
    in order, all within `bound` seconds; the first that fails ends the run."""
    hooks: Sequence[Hook] = getattr(spec, kind)
    deadline = monotonic() + bound
    for index, hook in enumerate(hooks):
        where = f"{kind}[{index}]"
        left = max(0.0, deadline - monotonic())
        try:
            run = engine.exec_hook(container_id, hook, left)
        except EngineError as exc:
            return HookFailure(where, None, error=_masked(str(exc), spec, hook), timeout=bound)
        if not run.ok:
            return _failure(where, run, spec, hook, bound)
    return None


def _failure(where: str, run: HookRun, spec: ServiceSpec, hook: Hook, bound: float) -> HookFailure:
    return HookFailure(where, run.exit_code, _masked(run.output, spec, hook), timeout=bound)


def _masked(text: str, spec: ServiceSpec, hook: Hook) -> str:
    text = mask_free(text, shown(spec))
    return "\n".join(mask_environment(line, spec, hook.environment) for line in text.splitlines())


_Job = tuple[Future[None], Callable[[], None]] | None


class _Workers:
    """At most `count` daemon threads, made as jobs come, taking jobs in order: a hook
    under way (up to HOOK_TIMEOUT) never holds healerd's exit, as a ThreadPoolExecutor's
    threads would (they are joined when the interpreter exits)."""

    def __init__(self, count: int) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._count = max(1, count)
        self._lock = threading.Lock()
        self._made = 0

    def submit(self, job: Callable[[], None]) -> Future[None]:
        future: Future[None] = Future()
        self._jobs.put((future, job))
        with self._lock:
            if self._made < self._count:
                self._made += 1
                threading.Thread(target=self._work, name="healerd-hook", daemon=True).start()
        return future

    def _work(self) -> None:
        while (item := self._jobs.get()) is not None:
            future, job = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                job()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(None)

    def shutdown(self) -> None:
        """Idle threads end; a running job ends on its own bound (its thread is a daemon)."""
        with self._lock:
            made, self._count = self._made, 0
        for _ in range(made):
            self._jobs.put(None)


class Hooks:
    """Runs a service's hooks in its containers for the executor, and tells of a
    failure: a log line and a `hook-failed` event (`events` None: the line only)."""

    def __init__(
        self,
        engine: ContainerRuntime,
        events: EventLog | None = None,
        parallel: int = 4,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._events = events
        self._monotonic = monotonic
        # Threads are made when a post_start first runs: none for a host without hooks.
        self._pool = _Workers(parallel)
        self._lock = threading.Lock()
        self._running: set[Future[None]] = set()

    def pre_stop(self, spec: ServiceSpec | None, container: ObservedContainer) -> None:
        """Before a stop or a remove of `container`: its pre_stop hooks if it runs, within
        pre_stop_bound; returns when they end or their time is up (never raises)."""
        if spec is None or not spec.pre_stop or container.state is not ContainerState.RUNNING:
            return
        bound = pre_stop_bound(spec)
        failure = run_hooks(self._engine, spec, container.id, "pre_stop", bound, self._monotonic)
        if failure is not None:
            self.failed(spec.name, container.name, failure, "the stop goes on")

    def post_start(self, spec: ServiceSpec | None, container_id: str, name: str) -> None:
        """After a start of `container_id` was reported: its post_start hooks, on the
        hooks' own pool (this returns at once)."""
        if spec is None or not spec.post_start:
            return

        def run() -> None:
            failure = run_hooks(
                self._engine, spec, container_id, "post_start", HOOK_TIMEOUT, self._monotonic
            )
            if failure is not None:
                self.failed(spec.name, name, failure, "the container keeps running")

        future = self._pool.submit(run)
        with self._lock:
            self._running.add(future)
        future.add_done_callback(self._ended)

    def _ended(self, future: Future[None]) -> None:
        with self._lock:
            self._running.discard(future)
        if future.exception() is not None:
            log.error("a post_start hook's thread failed", exc_info=future.exception())

    def failed(self, service: str, container: str, failure: HookFailure, then: str) -> None:
        tell(self._events, service, container, failure, then)

    def drain(self, timeout: float | None = None) -> None:
        """Wait for the post_start hooks under way (tests; a pass without threads)."""
        with self._lock:
            pending = list(self._running)
        wait(pending, timeout)

    def shutdown(self) -> None:
        self._pool.shutdown()


def tell(
    events: EventLog | None, service: str, container: str, failure: HookFailure, then: str
) -> None:
    """A hook's failure, and what follows (`then`): a log line, and a `hook-failed`
    event unless `events` is None."""
    message = f"{failure.describe()}; {then}"
    log.warning(
        "%s: %s: %s",
        service,
        container,
        message,
        extra={
            "healerd_service": service,
            "container_name": container,
            "action": "hook",
            "reason": message,
        },
    )
    if events is not None:
        events.record(EventKind.HOOK_FAILED, service, message, container)


@dataclass(frozen=True)
class PreUpdate:
    """What the pre_update hooks said: `ok` (none declared, or all exited 0), else why
    the update waits (`reason`); `container`: where they ran."""

    ok: bool
    reason: str = ""
    container: str = ""


def pre_update(
    engine: ContainerRuntime,
    spec: ServiceSpec,
    containers: Sequence[ObservedContainer],
    events: EventLog | None = None,
) -> PreUpdate:
    """Before an image update of `spec`'s service: its pre_update hooks in its oldest
    running container of `containers` (the service's, as the loop lists them), within
    HOOK_TIMEOUT. Not ok when one fails; ok when no container of the service runs (there
    is nobody to ask, and a crash-looping service must still get the image that fixes
    it); a failure is logged and recorded in `events` as a post_start's is."""
    if not spec.pre_update:
        return PreUpdate(ok=True)
    running = [
        c for c in containers if c.service == spec.name and c.state is ContainerState.RUNNING
    ]
    if not running:
        # Nothing runs to ask (a crash loop, say): the update goes on, else a service
        # that fails could never get the image that fixes it.
        log.info("%s: pre_update not run: no container of the service runs", spec.name)
        return PreUpdate(ok=True)
    oldest = min(running, key=lambda c: (c.created, c.name))
    failure = run_hooks(engine, spec, oldest.id, "pre_update", HOOK_TIMEOUT)
    if failure is None:
        return PreUpdate(ok=True, container=oldest.name)
    tell(events, spec.name, oldest.name, failure, "the update waits for the next check")
    return PreUpdate(ok=False, reason=failure.describe(), container=oldest.name)


__all__ = [
    "HookFailure",
    "Hooks",
    "PreUpdate",
    "pre_stop_bound",
    "pre_update",
    "run_hooks",
    "tell",
]
