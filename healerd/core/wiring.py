"""The composition root of the loop: `build_loop` makes every part once and wires them,
for the daemon (healerd.daemon.main) and the tests alike. Nothing else builds a part.
Optional collaborators become null objects here (no host limits: NoClaims; no run book:
NoRunBook; no credentials: anonymous pulls), so the parts branch on none of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from healerd.core.act import Acting
from healerd.core.admission import Admission
from healerd.core.clock import Clock
from healerd.core.controller import Controller, LoopParts
from healerd.core.dispatch import Dispatcher
from healerd.core.echoes import OwnActions
from healerd.core.engine_health import EngineHealth
from healerd.core.events import EventLog
from healerd.core.executor import Executor, plain_tag
from healerd.core.hints import LookHints
from healerd.core.hooks import Hooks
from healerd.core.images import ImagePolicy, no_pull_check
from healerd.core.inputs import Inputs
from healerd.core.looks import Claims, HostClaims, Looks, NoClaims
from healerd.core.loopmemory import LoopMemory
from healerd.core.loopsettings import LoopSettings
from healerd.core.memdelta import apply as apply_delta
from healerd.core.ratelimit import LastLook
from healerd.core.readlanes import ReadLanes
from healerd.core.readmodel import StatusBook
from healerd.core.reads import Reads
from healerd.core.reconcile import Reconciler
from healerd.core.report import LoopHooks, Reporter
from healerd.core.room import room_for
from healerd.core.runs import NoRunBook, RunBook
from healerd.core.shown import Shown
from healerd.core.updates import Updates
from healerd.core.wanted import Declared, Paused
from healerd.core.workqueue import WorkQueue
from healerd.engine import Engine
from healerd.model import RegistryAuth


def _nothing() -> None:
    pass


def _anonymous(_image: str) -> RegistryAuth | None:
    return None


class _Late:
    """Callbacks into parts built after their callers: each part is set once, before
    the loop runs or an event comes."""

    inputs: Inputs
    looks: Looks
    dispatcher: Dispatcher

    def __init__(self, on_engine_back: Callable[[], None]) -> None:
        self._on_engine_back = on_engine_back

    def repinned(self, key: str) -> None:
        self.inputs.repinned(key)

    def started(self, key: str, error: str | None) -> None:
        self.dispatcher.started_in_place(key, error)

    def engine_back(self) -> None:
        # EngineHealth said so (rate-limited, beside its line about the loss).
        self.looks.again()
        self.inputs.enqueue_all(force=True)
        self._on_engine_back()


@dataclass(frozen=True)
class _Common:
    """What several parts share."""

    clock: Clock
    settings: LoopSettings
    queue: WorkQueue
    events: EventLog
    report: Reporter
    own: OwnActions
    executor: Executor
    updates: Updates
    declared: Declared
    paused: Paused
    memory: LoopMemory
    book: StatusBook
    shown: Shown
    images: ImagePolicy
    hints: LookHints
    last_look: LastLook
    health: EngineHealth


def build_loop(
    engine: Engine,
    clock: Clock,
    settings: LoopSettings,
    admission: Admission | None = None,
    *,
    hooks: Sequence[LoopHooks] = (),
    engine_guard: Callable[[], None] = _nothing,
    on_engine_back: Callable[[], None] = _nothing,
    readers: ReadLanes | None = None,
    name_tag: Callable[[str], str] = plain_tag,
    credentials: Callable[[str], RegistryAuth | None] = _anonymous,
    runbook: RunBook | None = None,
) -> Controller:
    """`admission` None: no host limits (tests of the loop alone). `engine_guard` raises
    EngineError while this healerd must not act on the engine (another one manages it);
    it is called before each look until it passes once. `on_engine_back` is called when
    a list finds the engine back after an outage. `readers`: the API's read budgets
    (healerd.core.readlanes); by default one lane on the engine."""
    late = _Late(on_engine_back)
    lanes = readers or ReadLanes(engine, clock)
    c = _common(
        engine, clock, settings, admission, hooks, engine_guard, lanes, name_tag, credentials, late
    )
    reconciler = _reconciler(c, admission, runbook or NoRunBook(), late.started)
    room: Claims = NoClaims() if admission is None else HostClaims(admission, c.book, c.images)
    late.looks = looks = _looks(c, reconciler, room)
    late.inputs = inputs = _inputs(c, looks)
    late.dispatcher = dispatcher = _dispatcher(c, looks, reconciler)
    if admission is not None:
        admission.subscribe(partial(inputs.pressure_changed, admission))
    reads = _reads(c, lanes, reconciler)
    return Controller(
        LoopParts(
            c.settings,
            c.queue,
            c.events,
            c.declared,
            c.updates,
            c.report,
            c.health,
            c.executor,
            reconciler,
            looks,
            inputs,
            dispatcher,
            reads,
            c.memory,
            c.book,
            c.images,
        )
    )


def _pull_refusal(admission: Admission, engine: Engine, image: str) -> str | None:
    return admission.pull_refusal(image, engine.image_size_hint(image))


def _common(
    engine: Engine,
    clock: Clock,
    settings: LoopSettings,
    admission: Admission | None,
    hooks: Sequence[LoopHooks],
    engine_guard: Callable[[], None],
    readers: ReadLanes,
    name_tag: Callable[[str], str],
    credentials: Callable[[str], RegistryAuth | None],
    late: _Late,
) -> _Common:
    t = settings.timings
    queue, events, own = WorkQueue(clock, t.backoff), EventLog(clock), OwnActions(clock)
    parallel = settings.parallel_actions
    hooks_run = Hooks(engine, events, parallel)
    executor = Executor(engine, parallel, name_tag, own, hooks_run)
    updates = Updates(engine, events, credentials, late.repinned, clock.time)
    updates.data.pre_stop = hooks_run.pre_stop  # its stops for snapshots and restores
    memory = LoopMemory()
    updates.data.busy = lambda key: queue.processing(key) or memory.starting(key)
    declared, paused = Declared(updates), Paused()
    book = StatusBook(clock, events)
    shown = Shown(book, declared, paused)
    pull_check: Callable[[str], str | None] = no_pull_check
    if admission is not None:
        pull_check = partial(_pull_refusal, admission, engine)
    images = ImagePolicy(engine, executor, clock, events, t, pull_check, credentials, shown.pulling)
    executor.local_name = images.local_name
    health = EngineHealth(
        engine,
        clock,
        events,
        settings.engine_down_log_interval,
        guard=engine_guard,
        on_back=late.engine_back,
        timings=t,
    )
    return _Common(
        clock=clock,
        settings=settings,
        queue=queue,
        events=events,
        report=Reporter(events, hooks, clock),
        own=own,
        executor=executor,
        updates=updates,
        declared=declared,
        paused=paused,
        memory=memory,
        book=book,
        shown=shown,
        images=images,
        hints=LookHints(),
        last_look=LastLook(clock, readers.listed),  # readers are shown the loop's list
        health=health,
    )


def _reconciler(
    c: _Common,
    admission: Admission | None,
    runbook: RunBook,
    started: Callable[[str, str | None], None],
) -> Reconciler:
    """The pass, on the memory a healerd before this one left in the run book."""
    with c.memory.held() as mem:
        mem.load_runs(runbook.load(), c.clock.monotonic(), c.clock.time())
    # What a pass changes in the memory comes back as a delta, applied by its owner.
    share = partial(apply_delta, c.memory.lock, c.memory.mem, runbook)
    acting = Acting(c.clock, c.executor, c.report, share, started)
    return Reconciler(
        c.clock,
        c.images,
        c.report,
        acting,
        room_for(admission),
        c.updates,
        c.declared.spec,
        c.paused.has,
        c.settings.history_limit,
        c.settings.timings,
    )


def _looks(c: _Common, reconciler: Reconciler, room: Claims) -> Looks:
    return Looks(
        c.clock,
        c.settings.timings,
        health=c.health,
        last_look=c.last_look,
        memory=c.memory,
        declared=c.declared,
        hints=c.hints,
        room=room,
        report=c.report,
        reconciler=reconciler,
        queue=c.queue,
    )


def _inputs(c: _Common, looks: Looks) -> Inputs:
    return Inputs(
        c.clock,
        c.queue,
        c.events,
        declared=c.declared,
        paused=c.paused,
        shown=c.shown,
        book=c.book,
        updates=c.updates,
        images=c.images,
        memory=c.memory,
        seen=looks.seen,
        last_look=c.last_look,
        hints=c.hints,
        own=c.own,
        report=c.report,
    )


def _dispatcher(c: _Common, looks: Looks, reconciler: Reconciler) -> Dispatcher:
    return Dispatcher(
        c.clock,
        c.settings,
        c.queue,
        looks=looks,
        reconciler=reconciler,
        memory=c.memory,
        executor=c.executor,
        report=c.report,
        health=c.health,
        book=c.book,
        shown=c.shown,
        declared=c.declared,
        events=c.events,
    )


def _reads(c: _Common, readers: ReadLanes, reconciler: Reconciler) -> Reads:
    return Reads(
        c.clock,
        memory=c.memory,
        book=c.book,
        readers=readers,
        last_look=c.last_look,
        reconciler=reconciler,
        declared=c.declared,
        paused=c.paused,
        health=c.health,
    )


__all__ = ["build_loop"]
