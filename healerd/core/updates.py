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
the service's oldest running container was made with; a new digest that was on trial
(kept in that memory until it is proven or fails) goes on being judged, from when its
trial began, when a container was made from it, and is dropped when none was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import replace

from healerd.config import DesiredState
from healerd.core.persist import StateStore
from healerd.core.updatecheck import UpdateState
from healerd.core.updatedata import Hold
from healerd.core.updatememory import DOWNGRADE, LOOK, NOW, RETRY, Said
from healerd.core.updatepins import (
    Pin,
    adopted,
    digest_in,
    failure,
    follows,
    hub_short,
    on_trial,
    pinned_ref,
    proven,
    repository,
    short,
)
from healerd.engine import EngineError, EngineUnavailable, ImagePullFailed
from healerd.model import (
    ObservedContainer,
    ServiceSpec,
)
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd.updates")

SAY_FOR = 24 * 3600.0  # how long the status line tells of an update, a hold, a rollback


class Updates(UpdateState):
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
        """The status line's word: what the last update, hold or rollback did (a day);
        a pin, as long as it lasts."""
        with self._lock:
            note = self._notes.get(key, "")
        said = self.said(key)
        note = note or (said.text if said is not None else "")
        pinned = self.pinned(key)
        if pinned and "healerctl pin" not in note:
            note = f"pinned to {short(pinned)}" + (f"; {note}" if note else "")
        return note

    def said(self, key: str) -> Said | None:
        """The updater's latest word of `key` and when, for SAY_FOR (or until the next)."""
        said = self._memory.latest(key)
        return said if said is not None and self._now() - said.at < SAY_FOR else None

    def history(self, key: str) -> tuple[Said, ...]:
        """Updates, rollbacks and pins of `key`, oldest first (describe)."""
        return self._memory.history(key)

    def protected(self) -> set[str]:
        """The references image GC keeps: every pinned digest and the one before it."""
        with self._lock:
            pins = list(self._pins.values())
            refs = set(self._kept)
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

    def allow(
        self, key: str, *, downgrade: bool = False, retry_failed: bool = False, look: bool = False
    ) -> None:
        """An operator's word for `key`'s next check (healerctl update): now, whatever
        the window and the delay say (or only look and tell, `look`); roll out a digest
        the service ran before (`downgrade`) or one that failed (`retry_failed`), once."""
        flags = ((DOWNGRADE, downgrade), (RETRY, retry_failed), (LOOK, look), (NOW, not look))
        what = {w for w, on in flags if on}
        if what:
            self._memory.allow(key, what)

    def forget(self, key: str) -> None:
        with self._lock:
            self._no_digest.discard(key)
            self._pins.pop(key, None)
            self._held.pop(key, None)
            self._notes.pop(key, None)
            self._waiting.pop(key, None)
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
        digest = self._adoptable(spec, mine)
        trial = self._resumed(spec, mine, digest)
        if trial is None and digest is None and ensure():
            try:
                digest = self._local_digest(spec.name, spec.image)
            except EngineError as exc:
                log.warning("%s: cannot read the digest of %s: %s", spec.name, spec.image, exc)
        if trial is not None:
            pin = trial
        elif digest is not None:
            pin = Pin(spec.image, digest)
        else:
            return spec
        with self._lock:
            current = self._pins.get(spec.name)
            if current is None or current.declared != spec.image:
                self._pins[spec.name] = pin
        if trial is None:
            self._memory.ran(spec.name, spec.image, pin.digest)
        self._on_change(spec.name)
        return self.apply(spec)

    def _adoptable(self, spec: ServiceSpec, mine: Sequence[ObservedContainer]) -> str | None:
        """The digest the containers say, never one that failed (unless the operator
        pinned it): a restart in the middle of a rollback (its restore, a stop-first
        rollout) finds only the failed digest's containers, and the digest that ran
        before it, the one the data was restored for, is the one to run."""
        key = spec.name
        bad = set(self._memory.of(key, spec.image).bad) - {self._memory.operator_pin(key)}
        digest = adopted(spec, mine, skip=bad)
        if digest is None and bad and adopted(spec, mine) is not None:
            digest = self._memory.before(key, spec.image, "") or None
            if digest is not None:
                log.info("%s: its containers run a digest that failed: %s runs", key, short(digest))
        return digest

    def _resumed(
        self, spec: ServiceSpec, mine: Sequence[ObservedContainer], digest: str | None
    ) -> Pin | None:
        """The trial a healerd before this one left under way (its record in the
        memory), pinned again to be judged as if healerd had not stopped; `digest` is
        the one adopted from the containers. A trial nothing was made from is dropped:
        the digest before runs (its data untouched) and the next check finds it again."""
        trial = self._memory.trial(spec.name, spec.image)
        if trial is None:
            return None
        new, old = short(trial.digest), short(trial.previous)
        if on_trial(spec, mine, trial.digest, digest):
            log.info("%s: the update to %s (from %s) is still on trial", spec.name, new, old)
            return Pin(spec.image, trial.digest, trial.previous, trying=True, since=trial.since)
        self._memory.end_trial(spec.name, spec.image, trial.digest)
        text = f"the update to {new} was dropped at a restart of healerd: nothing ran it yet"
        log.info("%s: %s", spec.name, text)
        self._say(spec.name, spec.image, text, trial.digest, history=False)
        return None

    def _local_digest(self, key: str, image: str) -> str | None:
        repo = hub_short(repository(image))
        for ref in self._engine.local_digests(image):
            name, _, digest = ref.partition("@")
            if hub_short(name) == repo and digest.startswith("sha256:"):
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
            self._roll_back(key, pin, why, spec)
            return True
        if proven(spec, mine, now):
            with self._lock:
                if self._pins.get(key) != pin:
                    return False
                self._pins[key] = replace(pin, trying=False)
            self._memory.ran(key, pin.declared, pin.digest)
            text = f"updated to {short(pin.digest)}" + (
                f" (from {short(pin.previous)})" if pin.previous else ""
            )
            self._say(key, pin.declared, text, pin.digest, "updated")
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

    def _roll_back(self, key: str, pin: Pin, why: str, spec: ServiceSpec | None) -> None:
        back = Pin(pin.declared, pin.previous) if pin.previous else None
        note = (
            f"rolled back to {short(pin.previous)}: {short(pin.digest)} failed ({why}); "
            f"{short(pin.digest)} is not tried again (healerctl update {key} "
            "--retry-failed tries it once more)"
        )
        hold = None
        if spec is not None and spec.snapshot:  # held before the pin moves back: nothing
            hold = self.data.hold(key, self._restoring(pin))  # starts before the data
        with self._lock:
            moved = self._pins.get(key) == pin
            if moved and back is None:
                self._pins.pop(key, None)
            elif moved and back is not None:
                self._pins[key] = back
        if not moved:
            if hold is not None:
                self.data.release(key, hold)
            return
        self._memory.failed(key, pin.declared, pin.digest)
        self._say(key, pin.declared, note, pin.previous, "rolled back")
        log.warning("%s: %s", key, note)
        self._events.record(EventKind.IMAGE_ROLLBACK, key, note)
        if spec is not None and hold is not None:
            self._restore(spec, hold, pin, note)  # its word comes after the rollback's
        self._on_change(key)

    @staticmethod
    def _restoring(pin: Pin) -> str:
        return f"stopped to restore its volumes as they were before {short(pin.digest)}"

    def _restore(self, spec: ServiceSpec, hold: Hold, pin: Pin, note: str) -> None:
        """The volumes back as they were before `pin`'s update, then the previous
        digest (the hold keeps it from starting before)."""

        def told(what: str) -> None:
            log.warning("%s: %s", spec.name, what)
            self._say(spec.name, pin.declared, f"{note}; {what}", pin.previous, history=False)
            self._events.record(EventKind.IMAGE_ROLLBACK, spec.name, what)

        self.data.restore_later(spec, hold, pin.digest, told)

    # -- an operator's word (healerctl rollback, pin, unpin) ---------------------------

    def rollback_now(self, key: str, spec: ServiceSpec | None = None) -> str:
        """Back to the digest before the one running; that one is not tried again (until
        --retry-failed) and an operator's pin ends (else it would come back)."""
        with self._lock:
            pin = self._pins.get(key)
        if pin is None:
            raise UpdateRefused(f"{key} runs no pinned digest (it follows no tag, or not yet)")
        previous = pin.previous or self._memory.before(key, pin.declared, pin.digest)
        if not previous:
            raise UpdateRefused(f"{key} ran no digest before {short(pin.digest)}")
        with self.kept(pinned_ref(pin.declared, previous)):  # until it is pinned
            return self._rollback(key, spec, pin, previous)

    def _rollback(self, key: str, spec: ServiceSpec | None, pin: Pin, previous: str) -> str:
        self._bring_back(key, pin.declared, previous)
        self._memory.pin(key, pin.declared, "")
        if pin.trying and pin.previous:
            self._roll_back(key, pin, "healerctl rollback", spec)
            return f"{key}: rolling back to {short(previous)}"
        note = (
            f"rolled back to {short(previous)} by healerctl rollback: {short(pin.digest)} "
            f"is not tried again (healerctl update {key} --retry-failed tries it once more)"
        )
        hold = None
        if spec is not None and spec.snapshot:
            hold = self.data.hold(key, self._restoring(pin))
        with self._lock:
            moved = self._pins.get(key) == pin
            if moved:
                self._pins[key] = Pin(pin.declared, previous)
        if not moved:
            if hold is not None:
                self.data.release(key, hold)
            raise UpdateRefused(f"{key}'s digest changed meanwhile; look and try again")
        self._memory.failed(key, pin.declared, pin.digest)
        self._say(key, pin.declared, note, previous, "rolled back")
        log.warning("%s: %s", key, note)
        self._events.record(EventKind.IMAGE_ROLLBACK, key, note)
        if spec is not None and hold is not None:
            self._restore(spec, hold, replace(pin, previous=previous), note)
        self._on_change(key)
        return f"{key}: {note}"

    def _bring_back(self, key: str, declared: str, digest: str) -> None:
        """The previous image here before anything of the rollback is done: a `docker
        rmi` may have removed it, and a rollback with snapshot volumes stops the service
        before its data goes back. Pulled now, or the rollback is refused as it stands."""
        ref = pinned_ref(declared, digest)
        try:
            if self._engine.image_present(ref):
                return
            log.info("%s: pulling %s for the rollback", key, ref)
            self._engine.pull(f"{repository(declared)}@{digest}", self._auth_for(declared))
        except EngineUnavailable as exc:
            raise UpdateRefused(f"{key} not rolled back: {exc}; nothing was changed") from None
        except (ImagePullFailed, EngineError) as exc:
            raise UpdateRefused(
                f"{key} not rolled back: {ref} is not on this host and cannot be pulled "
                f"({exc}); nothing was changed"
            ) from None
        with self._lock:
            self._pulled.add(ref)
        self._events.record(EventKind.PULLED, key, f"pulled {ref} for the rollback")

    def set_pin(self, key: str, declared: str, digest: str) -> str:
        """healerctl pin (digest) or unpin (""): kept in state_dir, so a restart keeps it.
        The checker moves the service (it pulls first); auto-update leaves it alone."""
        with self._lock:
            pin = self._pins.get(key)
        if digest and pin is not None and pin.trying:
            raise UpdateRefused(f"{key} is being updated now; pin it once that is over")
        self._memory.pin(key, declared, digest)
        if digest:
            self._memory.allow(key, {RETRY})  # the operator's choice, even one that failed
            text = f"pinned to {short(digest)} by healerctl pin; auto-update leaves it there"
            kind = EventKind.IMAGE_PINNED
        else:
            text = "unpinned by healerctl unpin: follows its tag again"
            kind = EventKind.IMAGE_UNPINNED
        self._say(key, declared, text, digest, "pinned" if digest else "unpinned")
        log.info("%s: %s", key, text)
        self._events.record(kind, key, text)
        self._on_change(key)
        return f"{key}: {text}"

    def use_pre_update(self, hooks: Callable[[ServiceSpec], str]) -> None:
        """Run the service's pre_update hooks before an update: "" when they pass, else
        why not (the daemon wires healerd.core's hook runner)."""
        self._gate = replace(self._gate, pre_update=hooks)

    def waiting(self) -> dict[str, tuple[str, str]]:
        """service -> (digest, why) of each new digest that waits (metrics)."""
        with self._lock:
            return dict(self._waiting)

    def pinned(self, key: str) -> str:
        """The operator's pin of `key` ("" : none)."""
        return self._memory.operator_pin(key)


class UpdateRefused(Exception):
    """An operator's verb that cannot be done (the API answers 409 with the message)."""


def following(services: Mapping[str, ServiceSpec]) -> list[ServiceSpec]:
    return [s for _, s in sorted(services.items()) if follows(s)]


__all__ = [
    "Pin",
    "UpdateRefused",
    "Updates",
    "digest_in",
    "failure",
    "following",
    "follows",
    "pinned_ref",
    "proven",
    "repository",
]
