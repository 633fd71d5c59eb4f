"""Following a tag (`x-healerd: {auto_update: registry}`, Podman's
io.containers.autoupdate=registry): each such service runs its tag pinned to a registry
digest (`repo:tag@sha256:...`), so that a heal never picks up a moved tag by accident and a
rollback has something to go back to.

A check asks the registry for the tag's digest (one manifest request, no pull); a new one
is pulled and pinned, and the changed spec hash rolls the service with its update_config.
If a container of the new digest exits or turns unhealthy, or the rollout passes its
progress deadline, before the rollout completes, the previous digest is pinned again (a
rollback, by the same rollout rules) and the new one is marked bad: never tried again.

The registry is trusted to move the tag forward, not back: a tag moved to a digest the
service ran before (an older one) is held, not rolled out, until an operator allows it
(`healerctl update SERVICE --allow-downgrade`). The bad digests and those run are kept
per service, bounded, in healerd.core.updatememory (a file in `state_dir`), so that a
restart forgets neither. After a restart a pin is taken again from the image reference
the service's oldest running container was made with.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import Protocol

from healerd.config import DesiredState
from healerd.core import jobs
from healerd.core.events import EventLog
from healerd.core.persist import StateStore
from healerd.core.planner import history
from healerd.core.readiness import available, finished
from healerd.core.updatememory import DOWNGRADE, RETRY, DigestMemory
from healerd.engine import EngineError, ImagePullFailed, ImageStore, Registry
from healerd.engine.reference import split_reference
from healerd.model import (
    ContainerState,
    ObservedContainer,
    PullPolicy,
    RegistryAuth,
    ServiceSpec,
)
from healerd.vocabulary import AutoUpdate, EventKind

log = logging.getLogger("healerd.updates")


class DigestEngine(Registry, ImageStore, Protocol):
    """What following a tag needs: the registry's digest, and the local store's."""


@dataclass(frozen=True)
class Pin:
    declared: str  # the image as the file names it (repo:tag)
    digest: str  # sha256:...
    previous: str = ""  # the digest before it: a rollback's target, kept by image GC
    trying: bool = False  # rolled out, not proven yet
    since: float = 0.0  # when the trial began (wall clock): older containers say nothing


def follows(spec: ServiceSpec | None) -> bool:
    """Whether the service follows its tag (an image pinned by digest never moves)."""
    return spec is not None and spec.auto_update is AutoUpdate.REGISTRY and "@" not in spec.image


def repository(image: str) -> str:
    return split_reference(image)[0]


def _hub_short(repo: str) -> str:
    """Docker Hub's repositories as the engine writes them in RepoDigests (`nginx`,
    `user/app`), whatever the file wrote (`docker.io/library/nginx`)."""
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        repo = repo.removeprefix(prefix)
    return repo.removeprefix("library/")


def pinned_ref(declared: str, digest: str) -> str:
    return f"{declared}@{digest}"


def digest_in(ref: str, declared: str) -> str | None:
    """The digest of a reference made by pinned_ref for `declared`, else None."""
    prefix = f"{declared}@"
    return ref[len(prefix) :] if ref.startswith(prefix) and "sha256:" in ref else None


def short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12]


def failure(
    spec: ServiceSpec,
    mine: Sequence[ObservedContainer],
    unhealthy: Set[str],
    forgiven: Set[str],
    halted: str,
    since: float = 0.0,
) -> str:
    """Why the pinned spec's containers failed ("" while they may still succeed): one
    made since the trial began exited (not by an operator's stop or an engine restart; a
    run-once one with code 0 is a success), one is unhealthy past its grace, or the
    rollout passed its deadline. Failed containers kept as history of an earlier trial
    say nothing of this one."""
    old = {c.id for c in history(mine)}
    for c in mine:
        if c.spec_hash != spec.spec_hash or c.id in forgiven or c.id in old:
            continue
        if c.created < since - 1:  # the list's creation times are whole seconds
            continue
        if c.id in unhealthy:
            return f"container {c.name} turned unhealthy"
        if c.state in (ContainerState.EXITED, ContainerState.DEAD) and c.exit_code is not None:
            if jobs.run_once(spec) and c.exit_code == 0:
                continue
            return f"container {c.name} exited with code {c.exit_code}"
    return halted


def proven(spec: ServiceSpec, mine: Sequence[ObservedContainer], now: float) -> bool:
    """Every replica on the pinned spec and available (min_ready_seconds passed), no old
    one left running."""
    if any(c.running and c.spec_hash != spec.spec_hash for c in mine):
        return False
    ok = sum(1 for c in mine if available(c, spec, now) or (finished(c, spec) and c.exit_code == 0))
    return ok >= spec.replicas


def _adopted(spec: ServiceSpec, mine: Sequence[ObservedContainer]) -> str | None:
    """The digest a restarted healerd pins again: the oldest running container's (the
    proven one, if a rollout was under way), else the newest stopped one's (after a
    reboot); never a failed container kept as history (a rolled-back digest)."""
    old = {c.id for c in history(mine)}
    live = [c for c in mine if c.id not in old and digest_in(c.image, spec.image)]
    running = sorted((c for c in live if c.running), key=lambda c: c.created)
    stopped = sorted((c for c in live if not c.running), key=lambda c: -c.created)
    for c in (*running, *stopped):
        return digest_in(c.image, spec.image)
    return None


class Updates:
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
        self._pulling: dict[str, str] = {}  # service -> the new digest being pulled
        self._no_digest: set[str] = set()  # services whose local image has no registry digest
        self.checks = 0  # registry digest requests made (benchmarks, tests)
        # Called with (repository, references to keep) once an update is proven: image GC
        # removes the repository's older images (the daemon wires it; None: nothing).
        self.after_update: Callable[[str, tuple[str, ...]], None] | None = None

    # -- what the loop reads ---------------------------------------------------------

    def apply(self, spec: ServiceSpec) -> ServiceSpec:
        """The spec to run: the declared one with its tag pinned, when it follows one."""
        if not follows(spec):
            return spec
        with self._lock:
            pin = self._pins.get(spec.name)
        if pin is None or pin.declared != spec.image:
            return spec
        return replace(spec, image=pinned_ref(spec.image, pin.digest))

    def apply_all(self, state: DesiredState) -> DesiredState:
        services = {name: self.apply(spec) for name, spec in state.services.items()}
        return replace(state, services=services)

    def pin(self, key: str) -> Pin | None:
        with self._lock:
            return self._pins.get(key)

    def note(self, key: str) -> str:
        with self._lock:
            return self._notes.get(key, "")

    def protected(self) -> set[str]:
        """The references image GC keeps: every pinned digest and the one before it."""
        with self._lock:
            pins = list(self._pins.values())
            refs = set(self._pulling.values())
        refs |= {pinned_ref(p.declared, p.digest) for p in pins}
        refs |= {pinned_ref(p.declared, p.previous) for p in pins if p.previous}
        return refs

    def pulled(self) -> frozenset[str]:
        """The references pulled for updates since start (image GC: healerd's images)."""
        with self._lock:
            return frozenset(self._pulled)

    def use_store(self, store: StateStore) -> None:
        """Remember bad digests and digests run in `store` (the daemon's state_dir)."""
        self._memory.use(store)

    def allow(self, key: str, *, downgrade: bool = False, retry_failed: bool = False) -> None:
        """An operator's word for `key`'s next check: roll out a digest the service ran
        before (`downgrade`) or one that failed (`retry_failed`), once."""
        what = {w for w, on in ((DOWNGRADE, downgrade), (RETRY, retry_failed)) if on}
        if what:
            self._memory.allow(key, what)

    def forget(self, key: str) -> None:
        with self._lock:
            self._no_digest.discard(key)
            self._pins.pop(key, None)
            self._held.pop(key, None)
            self._notes.pop(key, None)
        self._memory.forget(key)

    # -- the reconcile pass ----------------------------------------------------------

    def first_pin(
        self,
        spec: ServiceSpec,
        mine: Sequence[ObservedContainer],
        ensure: Callable[[], bool],
    ) -> ServiceSpec:
        """A following service seen for the first time (a start, a new file): the digest
        its oldest running container was made with, else the local image's (`ensure`
        makes sure the image is there first; False: it is not, and the pass says why)."""
        pinned = self.apply(spec)
        if not follows(spec) or pinned.image != spec.image:
            return pinned
        with self._lock:
            if spec.name in self._no_digest:
                return spec  # until the next check
        digest = _adopted(spec, mine)
        if digest is None and ensure():
            try:
                digest = self._local_digest(spec.name, spec.image)
            except EngineError as exc:
                log.warning("%s: cannot read the digest of %s: %s", spec.name, spec.image, exc)
        if digest is None:
            return spec
        with self._lock:
            current = self._pins.get(spec.name)
            if current is None or current.declared != spec.image:
                self._pins[spec.name] = Pin(spec.image, digest)
        self._memory.ran(spec.name, spec.image, digest)
        self._on_change(spec.name)
        return self.apply(spec)

    def _local_digest(self, key: str, image: str) -> str | None:
        repo = _hub_short(repository(image))
        for ref in self._engine.local_digests(image):
            name, _, digest = ref.partition("@")
            if _hub_short(name) == repo and digest.startswith("sha256:"):
                return digest
        with self._lock:
            self._no_digest.add(key)
            self._notes[key] = f"{image} came from no registry: no digest to follow"
        return None

    def judge(
        self,
        spec: ServiceSpec,
        mine: Sequence[ObservedContainer],
        now: float,
        *,
        unhealthy: Set[str],
        forgiven: Set[str],
        halted: str,
    ) -> bool:
        """After a pass's plan: roll back a failed new digest (True: the pin moved, plan
        again), or call a completed rollout proven."""
        key = spec.name
        with self._lock:
            pin = self._pins.get(key)
        if pin is None or not pin.trying or spec.image != pinned_ref(pin.declared, pin.digest):
            return False
        why = failure(spec, mine, unhealthy, forgiven, halted, pin.since)
        if why:
            self._roll_back(key, pin, why)
            return True
        if proven(spec, mine, now):
            with self._lock:
                if self._pins.get(key) != pin:
                    return False
                self._pins[key] = replace(pin, trying=False)
                self._notes[key] = f"updated to {short(pin.digest)}" + (
                    f" (from {short(pin.previous)})" if pin.previous else ""
                )
            self._memory.ran(key, pin.declared, pin.digest)
            was = f" (was {short(pin.previous)})" if pin.previous else ""
            self._events.record(
                EventKind.IMAGE_UPDATED,
                key,
                f"all replicas run {pin.declared}@{short(pin.digest)}{was}",
            )
            if self.after_update is not None:
                keep = [pinned_ref(pin.declared, d) for d in (pin.digest, pin.previous) if d]
                self.after_update(repository(pin.declared), tuple(keep))
        return False

    def _roll_back(self, key: str, pin: Pin, why: str) -> None:
        back = Pin(pin.declared, pin.previous) if pin.previous else None
        note = (
            f"rolled back to {short(pin.previous)}: {short(pin.digest)} failed ({why}); "
            f"{short(pin.digest)} is not tried again (healerctl update {key} "
            "--retry-failed tries it once more)"
        )
        with self._lock:
            if self._pins.get(key) != pin:
                return
            if back is None:
                self._pins.pop(key, None)
            else:
                self._pins[key] = back
            self._notes[key] = note
        self._memory.failed(key, pin.declared, pin.digest)
        log.warning("%s: %s", key, note)
        self._events.record(EventKind.IMAGE_ROLLBACK, key, note)
        self._on_change(key)

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
        auth = self._auth_for(spec.image)
        self.checks += 1
        try:
            digest = self._engine.registry_digest(spec.image, auth)
        except EngineError as exc:
            log.warning("%s: cannot check %s for updates: %s", key, spec.image, exc)
            return ""
        log.debug("%s: %s is %s in its registry (pinned %s)", key, spec.image, digest, pin.digest)
        if self._held_back(key, pin, digest):
            return ""
        ref = f"{repository(spec.image)}@{digest}"
        with self._lock:
            self._pulling[key] = pinned_ref(spec.image, digest)  # image GC keeps it
        try:
            self._engine.pull(ref, auth)
        except (ImagePullFailed, EngineError) as exc:
            self._events.record(EventKind.PULL_FAILED, key, f"update {short(digest)}: {exc}")
            return ""
        finally:
            with self._lock:
                self._pulling.pop(key, None)
        with self._lock:
            self._pulled.add(pinned_ref(spec.image, digest))
        new = Pin(spec.image, digest, previous=pin.digest, trying=True, since=self._now())
        with self._lock:
            if self._pins.get(key) != pin:
                return ""  # rolled back or re-pinned meanwhile
            self._pins[key] = new
            self._notes[key] = f"updating to {short(digest)} from {short(pin.digest)}"
        self._events.record(
            EventKind.IMAGE_UPDATE, key, f"{spec.image} moved to {short(digest)}: rolling out"
        )
        self._on_change(key)
        return digest

    def _held_back(self, key: str, pin: Pin, digest: str) -> bool:
        """Whether the tag's digest is not to be rolled out: the pinned one; one that
        failed before; one the service ran before the pinned one (the tag moved back),
        held until an operator allows it. An allowance is used up here."""
        allowed = self._memory.take_allowance(key)
        if digest == pin.digest:
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
            self._notes[key] = note
        if not told:
            log.warning("%s: %s", key, note)
            self._events.record(EventKind.IMAGE_DOWNGRADE_HELD, key, note)
            self._on_change(key)  # a pass: the status says why
        return True


def following(services: Mapping[str, ServiceSpec]) -> list[ServiceSpec]:
    return [s for _, s in sorted(services.items()) if follows(s)]


__all__ = [
    "Pin",
    "Updates",
    "digest_in",
    "failure",
    "following",
    "follows",
    "pinned_ref",
    "proven",
    "repository",
]
