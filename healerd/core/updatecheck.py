"""The checker half of healerd.core.updates: ask the registry (or take the operator's
pin), see what the update waits for (healerd.core.updatewaits), pull and pin for a
trial. It runs on the checker thread, never a reconcile worker. The state both halves
share is made here (UpdateState.__init__)."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from healerd.core.events import EventLog
from healerd.core.hooks import pre_update
from healerd.core.updatedata import UpdateData
from healerd.core.updatememory import DOWNGRADE, LOOK, RETRY, DigestMemory, Said, Trial
from healerd.core.updatepins import Pin, follows, pinned_ref, repository, short
from healerd.core.updatewaits import (
    AVAILABLE,
    LOCK,
    PRE_UPDATE,
    SNAPSHOT,
    Gate,
    Wait,
    waits,
)
from healerd.engine import EngineError, ImagePullFailed, ImageStore, Registry
from healerd.engine.api import ContainerFiles, ContainerRuntime
from healerd.model import PullPolicy, RegistryAuth, ServiceSpec
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.updates")


class DigestEngine(Registry, ImageStore, ContainerRuntime, ContainerFiles, Protocol):
    """What following a tag needs: the registry's digest, the local store's, and the
    service's running containers' update_lock."""


class UpdateState:
    """The pins of the services that follow their tag; thread-safe (the checker thread
    and the reconcile workers share it). `on_change(key)` is called after a pin moved."""

    def __init__(
        self,
        engine: DigestEngine,
        events: EventLog,
        auth_for: Callable[[str], RegistryAuth | None],
        on_change: Callable[[str], None],
        now: Callable[[], float],
    ) -> None:
        """`now`: the wall clock (a trial's start, compared with containers' creation)."""
        self._engine = engine
        self._now = now
        self._events = events
        self._auth_for = auth_for
        self._on_change = on_change
        self._lock = threading.Lock()
        self._pins: dict[str, Pin] = {}
        self._memory = DigestMemory()  # bad digests and digests run, per service
        self._held: dict[str, str] = {}  # service -> the older digest its tag moved back to
        self._pulled: set[str] = set()  # the references this updater pulled
        self._notes: dict[str, str] = {}
        # References image GC keeps while an update or a rollback brings them: how many
        # of those are under way for each (the checker and a rollback may overlap).
        self._kept: Counter[str] = Counter()
        # service -> (digest, why) an update waits for: said once (healerd.core.updatewaits)
        self._waiting: dict[str, tuple[str, str]] = {}
        self.data = UpdateData(engine, on_change)  # holds and volume snapshots
        self._gate = Gate(
            lock_holder=self._lock_holder,
            seen_since=lambda spec, digest, at: self._memory.seen_since(
                spec.name, spec.image, digest, at
            ),
            operator_pin=lambda spec: self._memory.of(spec.name, spec.image).pinned,
            pre_update=self._pre_update,
        )
        self._no_digest: set[str] = set()  # services whose local image has no registry digest
        self.checks = 0  # registry digest requests made (benchmarks, tests)
        # Called with (repository, references to keep) once an update is proven: image GC
        # removes the repository's older images (the daemon wires it; None: nothing).
        self.after_update: Callable[[str, tuple[str, ...]], None] | None = None

    def _say(
        self,
        key: str,
        declared: str,
        text: str,
        digest: str = "",
        what: str = "",
        *,
        history: bool = True,
    ) -> None:
        said = Said(self._now(), text, digest, what)
        self._memory.say(key, declared, said, history=history and bool(what))

    # -- the checker -----------------------------------------------------------------

    def check(self, spec: ServiceSpec) -> str:
        """Ask the registry for the tag's digest; pull and pin a new one. Returns what
        happened ("" when nothing changed). Runs outside the reconcile workers, so that
        a slow registry or pull never holds a heal back."""
        key = spec.name
        with self._lock:
            pin = self._pins.get(key)
            if key in self._no_digest:
                # The next pass looks at the local image again (pulled since, perhaps).
                self._no_digest.discard(key)
                self._notes.pop(key, None)
                pin = None
        if pin is None and follows(spec):
            self._on_change(key)
        if not follows(spec) or pin is None or pin.declared != spec.image or pin.trying:
            return ""
        if spec.replicas == 0 or spec.pull_policy is PullPolicy.NEVER:
            return ""  # nothing runs it, or nothing may be pulled for it
        if self.data.held(key):
            return ""  # a snapshot or a restore is under way: no new update meanwhile
        allowed = self._memory.take_allowance(key)
        kept = False  # the operator's word stands when the application held the update
        try:
            digest = self._target(spec, pin, allowed)
            if not digest:
                return ""
            wait = waits(self._gate, spec, pin.digest, digest, allowed, self._now())
            if wait is not None:
                kept = wait.kind in (LOCK, PRE_UPDATE)
                self._hold(spec, digest, wait)
                return ""
            with self._lock:
                self._waiting.pop(key, None)
            taken = self._take(spec, pin, digest)
            kept = not taken
            return taken
        finally:
            if kept and allowed - {LOOK}:
                self._memory.allow(key, set(allowed - {LOOK}))

    def _lock_holder(self, spec: ServiceSpec) -> tuple[str, float] | None:
        """A running container of the service holding update_lock (its name and the
        file's time), else None. A container that stopped holds nothing: a stale lock
        file (balena's failing) ends with its container. A failing look holds too."""
        path = spec.update_policy.lock
        try:
            for c in self._engine.list_managed(spec.name):
                if not c.running or (at := self._engine.file_time(c.id, path)) is None:
                    continue
                if at and c.started and at < c.started - 1:
                    continue  # left from a run before a restart in place: stale
                return c.name, at
        except EngineError as exc:
            log.warning("%s: cannot look for %s: %s", spec.name, path, exc)
            return "the engine (it did not answer)", 0.0
        return None

    def _pre_update(self, spec: ServiceSpec) -> str:
        """The service's pre_update hooks (healerd.core.hooks): "" when they pass."""
        if not spec.pre_update:
            return ""
        try:
            answer = pre_update(
                self._engine, spec, self._engine.list_managed(spec.name), self._events
            )
        except EngineError as exc:
            return f"the engine did not answer: {exc}"
        return "" if answer.ok else answer.reason

    def _target(self, spec: ServiceSpec, pin: Pin, allowed: frozenset[str]) -> str:
        """The digest to move to ("" : none): the operator's pin, else the tag's."""
        key = spec.name
        pinned = self._memory.of(key, spec.image).pinned
        if pinned:
            failed = self._memory.is_bad(key, spec.image, pinned) and RETRY not in allowed
            return "" if pinned == pin.digest or failed else pinned
        auth = self._auth_for(spec.image)
        self.checks += 1
        try:
            digest = self._engine.registry_digest(spec.image, auth)
        except EngineError as exc:
            log.warning("%s: cannot check %s for updates: %s", key, spec.image, exc)
            return ""
        log.debug("%s: %s is %s in its registry (pinned %s)", key, spec.image, digest, pin.digest)
        return "" if self._held_back(key, pin, digest, allowed) else digest

    def _hold(self, spec: ServiceSpec, digest: str, wait: Wait) -> None:
        """Said once per digest and reason: the status line, an event, the log."""
        key = spec.name
        with self._lock:
            told = self._waiting.get(key) == (digest, wait.kind)
            self._waiting[key] = (digest, wait.kind)
        if told:
            return
        log.info("%s: %s", key, wait.text)
        what = "available" if wait.kind == AVAILABLE else "held"
        self._say(key, spec.image, wait.text, digest, what, history=False)
        kind = (
            EventKind.IMAGE_UPDATE_AVAILABLE if what == "available" else EventKind.IMAGE_UPDATE_HELD
        )
        self._events.record(kind, key, wait.text)
        self._on_change(key)

    @contextmanager
    def kept(self, ref: str) -> Iterator[None]:
        """Image GC keeps `ref` meanwhile (`protected`): pulled, and not pinned yet."""
        with self._lock:
            self._kept[ref] += 1
        try:
            yield
        finally:
            with self._lock:
                self._kept[ref] -= 1
                if self._kept[ref] <= 0:
                    del self._kept[ref]

    def _take(self, spec: ServiceSpec, pin: Pin, digest: str) -> str:
        """Pull `digest` and pin it for a trial (the rollout and the judge do the rest).
        Image GC keeps it from the pull to the pin (a snapshot may take minutes)."""
        with self.kept(pinned_ref(spec.image, digest)):
            return self._pull_and_pin(spec, pin, digest)

    def _pull_and_pin(self, spec: ServiceSpec, pin: Pin, digest: str) -> str:
        key = spec.name
        try:
            self._engine.pull(f"{repository(spec.image)}@{digest}", self._auth_for(spec.image))
        except (ImagePullFailed, EngineError) as exc:
            self._events.record(EventKind.PULL_FAILED, key, f"update {short(digest)}: {exc}")
            return ""
        with self._lock:
            self._pulled.add(pinned_ref(spec.image, digest))
        holder = self._lock_holder(spec) if spec.update_policy.lock else None
        if holder is not None:  # taken while the pull went on
            self._hold(
                spec,
                digest,
                Wait(
                    LOCK,
                    f"{short(digest)} held by {holder[0]}: {spec.update_policy.lock} exists there",
                ),
            )
            return ""
        hold = None
        if spec.snapshot:
            why, hold = self.data.snapshot(spec, pin.digest, digest)
            if why:
                self._hold(spec, digest, Wait(SNAPSHOT, f"{short(digest)} not rolled out: {why}"))
                return ""
        try:
            return self._pin_new(spec, pin, digest)
        finally:
            if hold is not None:
                self.data.release(key, hold)  # the new pin is in: the loop may start it

    def _pin_new(self, spec: ServiceSpec, pin: Pin, digest: str) -> str:
        key = spec.name
        new = Pin(spec.image, digest, previous=pin.digest, trying=True, since=self._now())
        with self._lock:
            if self._pins.get(key) != pin:
                return ""  # rolled back or re-pinned meanwhile
            # Kept before anything is made from it (a restart goes on judging it); the
            # memory's lock is never held when this one is taken.
            self._memory.begin_trial(key, spec.image, Trial(digest, pin.digest, new.since))
            self._pins[key] = new
            self._waiting.pop(key, None)
        self._say(key, spec.image, f"updating to {short(digest)} from {short(pin.digest)}", digest)
        self._events.record(
            EventKind.IMAGE_UPDATE, key, f"{spec.image} moved to {short(digest)}: rolling out"
        )
        self._on_change(key)
        return digest

    def _held_back(self, key: str, pin: Pin, digest: str, allowed: frozenset[str]) -> bool:
        """Whether the tag's digest is not to be rolled out: the pinned one; one that
        failed before; one the service ran before the pinned one (the tag moved back),
        held until an operator allows it."""
        if digest == pin.digest:
            with self._lock:
                self._waiting.pop(key, None)
            return True
        if self._memory.is_bad(key, pin.declared, digest) and RETRY not in allowed:
            return True
        older = self._memory.is_older(key, pin.declared, digest, pin.digest)
        if not older or DOWNGRADE in allowed:
            with self._lock:
                self._held.pop(key, None)
            return False
        note = (
            f"{pin.declared} moved back to {short(digest)}, which ran before "
            f"{short(pin.digest)}: not rolled back without healerctl update {key} "
            "--allow-downgrade"
        )
        with self._lock:
            told = self._held.get(key) == digest
            self._held[key] = digest
        if not told:
            self._say(key, pin.declared, note, digest, "held", history=False)
            log.warning("%s: %s", key, note)
            self._events.record(EventKind.IMAGE_DOWNGRADE_HELD, key, note)
            self._on_change(key)  # a pass: the status says why
        return True


__all__ = ["DigestEngine", "UpdateState"]
