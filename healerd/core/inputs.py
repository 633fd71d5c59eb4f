"""What puts keys into the work queue from outside a pass: a new declaration, a moved
pin, new registry credentials, engine events, the host's pressure, and the operator's
requests (pause, resume, reconcile now). Events and timers only queue keys; every pass
re-reads the engine, so a missed event costs nothing but time."""

from __future__ import annotations

import logging
from collections.abc import Callable

from healerd import model
from healerd.config import DesiredState
from healerd.core.admission import Admission
from healerd.core.clock import Clock
from healerd.core.echoes import OwnActions
from healerd.core.events import EventLog
from healerd.core.hints import LookHints
from healerd.core.images import ImagePolicy
from healerd.core.loopmemory import LoopMemory
from healerd.core.loopsettings import DISCOVER
from healerd.core.notices import file_fixed
from healerd.core.observe import note_event
from healerd.core.outcome import Facts, decide
from healerd.core.pressure import Pressure
from healerd.core.ratelimit import LastLook
from healerd.core.readmodel import StatusBook
from healerd.core.report import Reporter
from healerd.core.shown import Shown
from healerd.core.updates import Updates, following
from healerd.core.wanted import Declared, Paused
from healerd.core.workqueue import WorkQueue
from healerd.model import EngineEvent
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.controller")


class Inputs:
    def __init__(
        self,
        clock: Clock,
        queue: WorkQueue,
        events: EventLog,
        *,
        declared: Declared,
        paused: Paused,
        shown: Shown,
        book: StatusBook,
        updates: Updates,
        images: ImagePolicy,
        memory: LoopMemory,
        seen: Callable[[], set[str]],
        last_look: LastLook,
        hints: LookHints,
        own: OwnActions,
        report: Reporter,
    ) -> None:
        """`seen()`: the services the looks found containers of."""
        self._clock = clock
        self._queue = queue
        self._events = events
        self._declared = declared
        self._paused = paused
        self._shown = shown
        self._book = book
        self._updates = updates
        self._images = images
        self._memory = memory
        self._seen = seen
        self._last_look = last_look
        self._hints = hints
        self._own = own
        self._report = report

    def set_desired(self, state: DesiredState) -> None:
        """Swap in a new desired state and queue every service whose spec changed."""
        old = self._declared.replace(state)
        for err in state.errors:
            if err not in old.errors:
                self._events.record(EventKind.CONFIG_ERROR, "", str(err))
        broken_changed = set(old.broken_files) ^ set(state.broken_files)
        for file in sorted(set(old.broken_files) - set(state.broken_files)):
            removed = state.files is not None and file not in state.files
            self._events.record(EventKind.CONFIG_FIXED, "", file_fixed(file, removed=removed))
        for name in set(old.services) | set(state.services):
            spec = state.services.get(name)
            if old.services.get(name) != spec or (spec and spec.source_file in broken_changed):
                self._queue.add(name, force=True)
        if old.hold_orphans != state.hold_orphans:
            self._queue.add(DISCOVER, force=True)
        for name, was, now in self._book.resized(old.services, state.services):
            self._shown.show(name, decide(Facts(resized=(was, now))), desired=now)

    def repinned(self, key: str) -> None:
        """A followed tag's pin moved (a new digest, a rollback, a first pin): the specs
        everyone reads are pinned again and the service looks at once."""
        self._declared.repin()
        self._queue.add(key, force=True)

    def check_updates(self) -> list[str]:
        """Ask the registry about every service that follows its tag (the checker
        thread, every auto_update_interval); returns the services that got a new digest."""
        updated = []
        for spec in following(self._declared.declared.services):
            try:
                if self._updates.check(spec):
                    updated.append(spec.name)
            except Exception:
                log.exception("%s: checking for an image update failed unexpectedly", spec.name)
        return updated

    def retry_pulls(self) -> None:
        """New registry credentials: each service waiting for its image tries now."""
        for key in self._images.waiting_keys():
            self._queue.add(key, force=True)

    def enqueue_all(self, *, force: bool = False) -> None:
        """Queue every known service plus a discovery pass (resync, engine back)."""
        keys = set(self._declared.desired.services) | self._seen()
        for key in sorted(keys | {DISCOVER}):
            self._queue.add(key, force=force)

    def on_event(self, event: EngineEvent) -> None:
        """Queue the event's service. The engine sends `die` before its list shows the
        container stopped, so remember the container and look again until it does."""
        log.debug("event %s %s %s", event.action, event.service, event.container_id[:12])
        self._last_look.changed()
        with self._memory.held() as mem:
            note_event(mem, event, self._clock.monotonic())
            known = event.container_id in mem.first_seen
        if event.action is model.EngineAction.STARTED:
            # A new run has a new network namespace: what joined the old one looks again.
            for joiner in self._declared.desired.joiners.get(event.service, ()):
                self._queue.add(joiner)
        hint = self._hints.event(event.service, event.action)  # healerd.core.hints
        if self._own.consume(event):
            return  # the pass that did it looks again anyway (healerd.core.echoes)
        if event.action is model.EngineAction.DESTROYED:
            self._report.gone(event.service, event.container_id, event.name, known=known)
        self._queue.add(event.service)
        if hint:
            self._hints.hinted(event.service, self._queue.queued_at(event.service))

    def stream_state(self, connected: bool) -> None:
        """The event watcher's stream is up or down: while it is up and quiet, the last
        list is still what runs, and readers are shown it without a list of their own."""
        self._last_look.stream(connected)

    def pause(self, service: str) -> None:
        self._paused.add(service)
        spec = self._declared.spec(service)
        replicas = spec.replicas if spec is not None else None
        self._shown.show(service, decide(Facts(paused=True)), desired=replicas)
        self._events.record(
            EventKind.PAUSED, service, "paused by operator: left alone until resumed"
        )
        self._queue.add(service, force=True)

    def resume(self, service: str) -> str:
        """Ends a pause, and a hold an update left (a restore of its volumes that
        failed: the service stays stopped until the operator says); "", or why the hold
        stands: never while its volumes are being copied (it would start on a volume
        being rewritten; the copy's end releases it, or says why not)."""
        self._paused.discard(service)
        if self._updates.data.copying(service):
            why = (
                f"{service}: its volumes are being copied now (a snapshot or a restore): "
                "it starts once that ends; resume again if the restore fails"
            )
            log.warning("resume of %s: %s", service, why)
            self._events.record(EventKind.RESUMED, service, f"resume deferred: {why}")
            return why
        held = self._updates.data.release_all(service)
        if still := self._updates.data.held(service):  # an interrupted restore's give-up
            self._events.record(EventKind.RESUMED, service, f"resume deferred: {still}")
            return f"{service}: {still}"
        why = " (its update's hold ended: it runs on its volumes as they are)" if held else ""
        self._events.record(EventKind.RESUMED, service, f"resumed by operator{why}")
        self._queue.add(service, force=True)
        return ""

    def reconcile_now(self, service: str | None = None) -> None:
        if service is None:
            self.enqueue_all(force=True)
        else:
            self._queue.add(service, force=True)

    def pressure_changed(self, admission: Admission, old: Pressure, new: Pressure) -> None:
        """The host's pressure turned on or off (Admission.subscribe): whoever waits for
        room may fit now (or must now wait), so it looks again at once."""
        if new.any:
            log.warning("host under pressure: %s", new.describe())
            self._events.record(EventKind.PRESSURE, "", new.describe())
        else:
            log.info("host pressure ended")
            self._events.record(EventKind.PRESSURE_ENDED, "", "no resource below its threshold")
        for key in admission.waiting():
            self._queue.add(key)


__all__ = ["Inputs"]
