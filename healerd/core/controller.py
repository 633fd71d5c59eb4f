"""The loop's public face: what the daemon, the API and the tests call, each name a
part's (no logic here). The parts, each in a module of its own:

- the dispatcher (healerd.core.dispatch): takes batches from the work queue, runs the
  passes, and is the only writer to the queue after a pass;
- the looks (healerd.core.looks): one list per batch, or the last look reused;
- the inputs (healerd.core.inputs): declarations, pins, pulls, events, operator requests;
- the reads (healerd.core.reads): statuses, what runs, logs, a dry run, for the API.

healerd.core.wiring.build_loop builds them, for the daemon and the tests alike."""

from __future__ import annotations

from dataclasses import dataclass

from healerd.config import DesiredState
from healerd.core.dispatch import Dispatcher
from healerd.core.engine_health import EngineHealth
from healerd.core.events import EventLog
from healerd.core.executor import Executor
from healerd.core.images import ImagePolicy
from healerd.core.inputs import Inputs
from healerd.core.looks import Looks
from healerd.core.loopmemory import LoopMemory
from healerd.core.loopsettings import DISCOVER, LoopSettings
from healerd.core.prune import PruneRefused
from healerd.core.readmodel import StatusBook
from healerd.core.reads import Reads
from healerd.core.reconcile import Reconciler
from healerd.core.report import Reporter, Stats
from healerd.core.updates import Updates
from healerd.core.wanted import Declared
from healerd.core.workqueue import WorkQueue


@dataclass(frozen=True)
class LoopParts:
    settings: LoopSettings
    queue: WorkQueue
    events: EventLog
    declared: Declared
    updates: Updates
    report: Reporter
    health: EngineHealth
    executor: Executor
    reconciler: Reconciler
    looks: Looks
    inputs: Inputs
    dispatcher: Dispatcher
    reads: Reads
    memory: LoopMemory
    book: StatusBook
    images: ImagePolicy


class Controller:
    def __init__(self, parts: LoopParts) -> None:
        self.parts = parts
        self.queue, self.events, self.updates = parts.queue, parts.events, parts.updates
        # Told of every change of a service's state (healerd.daemon.notifications).
        self.state_listeners = parts.book.listeners
        inputs, reads, dispatcher = parts.inputs, parts.reads, parts.dispatcher
        # Inputs (healerd.core.inputs).
        self.set_desired, self.check_updates = inputs.set_desired, inputs.check_updates
        self.retry_pulls, self.enqueue_all = inputs.retry_pulls, inputs.enqueue_all
        self.on_event, self.stream_state = inputs.on_event, inputs.stream_state
        self.pause, self.resume = inputs.pause, inputs.resume
        self.reconcile_now = inputs.reconcile_now
        # The loop (healerd.core.dispatch).
        self.run, self.process_once = dispatcher.run, dispatcher.process_once
        self.flush_log, self.shutdown = dispatcher.flush_log, dispatcher.shutdown
        self.prune_volumes = dispatcher.prune_volumes
        self.pulled_images = parts.executor.pulled  # healerd pulled since it started
        self.built_images = parts.executor.built  # healerd built since it started (a subset)
        self.build_now, self.build_mark = parts.images.build_now, parts.images.build_mark
        self.images = parts.images  # told of images_dir's archives (healerd.daemon.imagework)
        # Reads (healerd.core.reads).
        self.statuses, self.container_statuses = reads.statuses, reads.container_statuses
        self.paused_services, self.known = reads.paused_services, reads.known
        self.logs, self.termination, self.deaths = reads.logs, reads.termination, reads.deaths
        self.preview, self.summary = reads.preview, reads.summary
        self.local_images = reads.local_images

    @property
    def desired(self) -> DesiredState:
        return self.parts.declared.desired

    @property
    def stats(self) -> Stats:
        return self.parts.report.stats

    @property
    def engine_ok(self) -> bool | None:
        return self.parts.health.ok

    @property
    def engine_version(self) -> str | None:
        return self.parts.health.version

    @property
    def engine_api_version(self) -> str | None:
        return self.parts.health.api_version

    @property
    def engine_kind(self) -> str | None:
        return self.parts.health.kind

    @property
    def engine_data_root(self) -> str | None:
        return self.parts.health.data_root

    @property
    def last_progress(self) -> float:
        """When the dispatcher last took a batch or ended a pass (the watchdog's tick)."""
        return self.parts.dispatcher.last_progress


__all__ = ["DISCOVER", "Controller", "LoopParts", "LoopSettings", "PruneRefused"]
