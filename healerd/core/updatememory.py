"""What the auto-updater remembers of each service's digests, across restarts.

Per service (and the tag it follows): the digests that failed a trial (`bad`: never
tried again) and the digests it ran (`ran`: a tag moved back to one of them is a
downgrade, held until an operator allows it), each bounded, newest last. Kept in a
store (healerd.core.persist; the daemon's is a file in `state_dir`), saved at every
change: a restart no longer tries a bad digest again, and two broken digests that the
tag flips between are each tried once.

A trial (a new digest rolled out, not proven yet: its digest, the one before, since
when) is kept too, from its start until it is proven, fails or is replaced by another,
so that a restarted healerd goes on judging it (healerd.core.updates.first_pin) rather
than take the new digest as proven.

An operator's allowance (`healerctl update SERVICE --allow-downgrade`/`--retry-failed`)
lives in memory only and is used up by the service's next check.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from healerd.core.persist import MemoryStore, StateStore

log = logging.getLogger("healerd.updates")

MAX_BAD = 16  # digests remembered as failed, per service
MAX_RAN = 32  # digests remembered as run, per service
MAX_SERVICES = 1000  # entries read from a store (a service file holds at most 1000)
MAX_HISTORY = 20  # digest history entries, per service
DOWNGRADE = "downgrade"
RETRY = "retry"
NOW = "now"  # healerctl update: now, whatever the window and the delay say
LOOK = "look"  # healerctl update --check: look and tell, roll nothing


@dataclass(frozen=True)
class Said:
    """One thing the updater did or waits for, at wall time `at`: the status line's word
    (a day long, or until the next), and the digest history's entries."""

    at: float
    text: str
    digest: str = ""
    what: str = ""  # history: updated, rolled back, pinned, unpinned, held


@dataclass(frozen=True)
class Trial:
    """A new digest on trial: rolled out, not proven yet."""

    digest: str
    previous: str = ""  # the digest before it: the rollback's target
    since: float = 0.0  # when it began (wall clock): containers made before say nothing


@dataclass(frozen=True)
class Remembered:
    declared: str  # the image as the file names it: memory of another tag does not count
    bad: tuple[str, ...] = ()
    ran: tuple[str, ...] = ()
    pinned: str = ""  # healerctl pin: the digest to run; auto-update leaves it alone
    seen: tuple[str, float] | None = None  # the tag's newest digest, first seen when
    said: Said | None = None
    history: tuple[Said, ...] = ()
    trial: Trial | None = None


def _digests(value: object, limit: int) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    found = [d for d in value if isinstance(d, str) and d.startswith("sha256:")]
    return tuple(found[-limit:])


def _said(value: object) -> Said | None:
    if not isinstance(value, dict):
        return None
    at, text = value.get("at"), value.get("text")
    if not isinstance(at, int | float) or not isinstance(text, str):
        return None
    digest, what = value.get("digest", ""), value.get("what", "")
    return Said(float(at), text[:500], str(digest)[:80], str(what)[:20])


def _trial(value: object) -> Trial | None:
    if not isinstance(value, dict):
        return None
    digest, previous, since = value.get("digest"), value.get("previous", ""), value.get("since")
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        return None
    if not isinstance(previous, str) or (previous and not previous.startswith("sha256:")):
        return None
    if not isinstance(since, int | float) or isinstance(since, bool):
        return None
    return Trial(digest[:80], previous[:80], float(since))


def _entry(entry: dict[str, object]) -> Remembered:
    pinned, seen = entry.get("pinned"), entry.get("seen")
    history = entry.get("history")
    return Remembered(
        str(entry["declared"]),
        _digests(entry.get("bad"), MAX_BAD),
        _digests(entry.get("ran"), MAX_RAN),
        pinned if isinstance(pinned, str) and pinned.startswith("sha256:") else "",
        (seen[0], float(seen[1]))
        if isinstance(seen, list)
        and len(seen) == 2
        and isinstance(seen[0], str)
        and isinstance(seen[1], int | float)
        else None,
        _said(entry.get("said")),
        tuple(h for h in map(_said, history[-MAX_HISTORY:]) if h is not None)
        if isinstance(history, list)
        else (),
        _trial(entry.get("trial")),
    )


def _parsed(data: object) -> dict[str, Remembered]:
    """The store's document (`{"services": {NAME: {declared, bad, ran, ...}}}`); anything
    malformed is left out, never an error."""
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict):
        return {}
    out: dict[str, Remembered] = {}
    for name, entry in list(services.items())[:MAX_SERVICES]:
        if not isinstance(entry, dict) or not isinstance(entry.get("declared"), str):
            continue
        out[str(name)] = _entry(entry)
    return out


def _said_doc(s: Said) -> dict[str, object]:
    return {"at": s.at, "text": s.text, "digest": s.digest, "what": s.what}


def _added(digests: tuple[str, ...], digest: str, limit: int) -> tuple[str, ...]:
    """`digest` moved to the end (newest), the oldest dropped beyond `limit`."""
    return (*(d for d in digests if d != digest), digest)[-limit:]


class DigestMemory:
    """Thread-safe (the checker thread and the reconcile workers share it)."""

    def __init__(self, store: StateStore | None = None) -> None:
        self._lock = threading.Lock()
        self._store: StateStore = store or MemoryStore()
        self._services = _parsed(self._store.load())
        self._allowed: dict[str, set[str]] = {}

    def use(self, store: StateStore) -> None:
        """Remember in `store` from now on, starting from what it holds."""
        loaded = _parsed(store.load())
        with self._lock:
            self._store, self._services = store, loaded

    def of(self, key: str, declared: str) -> Remembered:
        with self._lock:
            found = self._services.get(key)
        return found if found is not None and found.declared == declared else Remembered(declared)

    def is_bad(self, key: str, declared: str, digest: str) -> bool:
        return digest in self.of(key, declared).bad

    def is_older(self, key: str, declared: str, digest: str, current: str) -> bool:
        """Whether `digest` is one the service ran before `current` (a move back)."""
        ran = self.of(key, declared).ran
        return digest != current and digest in ran

    def ran(self, key: str, declared: str, digest: str) -> None:
        """`digest` runs (proven, or found running at a start): no longer bad, and its
        trial is over."""

        def mark(r: Remembered) -> Remembered:
            bad = tuple(d for d in r.bad if d != digest)
            return replace(
                r, bad=bad, ran=_added(r.ran, digest, MAX_RAN), trial=_ended(r.trial, digest)
            )

        self._change(key, declared, mark)

    def failed(self, key: str, declared: str, digest: str) -> None:
        """`digest` failed (its trial, or healerctl rollback): bad, and its trial is over
        (in the same save: a restart never finds one without the other)."""

        def mark(r: Remembered) -> Remembered:
            return replace(
                r,
                bad=_added(r.bad, digest, MAX_BAD),
                ran=tuple(d for d in r.ran if d != digest),
                trial=_ended(r.trial, digest),
            )

        self._change(key, declared, mark)

    def forget(self, key: str) -> None:
        with self._lock:
            self._allowed.pop(key, None)
            if self._services.pop(key, None) is not None:
                self._save()

    def allow(self, key: str, what: set[str]) -> None:
        """An operator's one-time allowance (DOWNGRADE, RETRY) for `key`'s next check."""
        with self._lock:
            self._allowed.setdefault(key, set()).update(what)

    def take_allowance(self, key: str) -> frozenset[str]:
        with self._lock:
            return frozenset(self._allowed.pop(key, set()))

    def _change(self, key: str, declared: str, change: Callable[[Remembered], Remembered]) -> None:
        with self._lock:
            before = self._services.get(key)
            if before is None or before.declared != declared:
                before = Remembered(declared)
            after = change(before)
            if after != self._services.get(key):
                self._services[key] = after
                self._save()

    def _save(self) -> None:
        """Under the lock: the store gets each document in order (changes are rare)."""
        document = {"services": {name: _doc(r) for name, r in sorted(self._services.items())}}
        try:
            self._store.save(document)
        except OSError as exc:
            log.warning("auto-update memory not saved (kept in memory): %s", exc)

    # -- an operator's pin, a digest's first sight, what was said ----------------------

    def latest(self, key: str) -> Said | None:
        with self._lock:
            found = self._services.get(key)
        return found.said if found is not None else None

    def history(self, key: str) -> tuple[Said, ...]:
        with self._lock:
            found = self._services.get(key)
        return found.history if found is not None else ()

    def operator_pin(self, key: str) -> str:
        with self._lock:
            found = self._services.get(key)
        return found.pinned if found is not None else ""

    def before(self, key: str, declared: str, digest: str) -> str:
        """The digest the service ran before `digest` ("" : none known)."""
        ran = [d for d in self.of(key, declared).ran if d != digest]
        return ran[-1] if ran else ""

    def pin(self, key: str, declared: str, digest: str) -> None:
        self._change(key, declared, lambda r: replace(r, pinned=digest))

    def seen_since(self, key: str, declared: str, digest: str, wall: float) -> float:
        """When the tag was first seen at `digest` (now, if it names another than before)."""
        was = self.of(key, declared).seen
        if was is not None and was[0] == digest:
            return was[1]
        self._change(key, declared, lambda r: replace(r, seen=(digest, wall)))
        return wall

    def trial(self, key: str, declared: str) -> Trial | None:
        """The trial under way when it was last saved (None: none)."""
        return self.of(key, declared).trial

    def begin_trial(self, key: str, declared: str, trial: Trial) -> None:
        """A new digest on trial, in place of any other (superseded)."""
        self._change(key, declared, lambda r: replace(r, trial=trial))

    def end_trial(self, key: str, declared: str, digest: str) -> None:
        """The trial of `digest`, if it is the one kept, is over."""
        self._change(key, declared, lambda r: replace(r, trial=_ended(r.trial, digest)))

    def say(self, key: str, declared: str, said: Said, *, history: bool = False) -> None:
        """The service's latest word; `history`: an entry of its digest history too."""

        def mark(r: Remembered) -> Remembered:
            more = (*r.history, said)[-MAX_HISTORY:] if history else r.history
            return replace(r, said=said, history=more)

        self._change(key, declared, mark)


def _ended(trial: Trial | None, digest: str) -> Trial | None:
    return None if trial is not None and trial.digest == digest else trial


def _doc(r: Remembered) -> dict[str, object]:
    doc: dict[str, object] = {"declared": r.declared, "bad": list(r.bad), "ran": list(r.ran)}
    if r.pinned:
        doc["pinned"] = r.pinned
    if r.seen is not None:
        doc["seen"] = list(r.seen)
    if r.said is not None:
        doc["said"] = _said_doc(r.said)
    if r.history:
        doc["history"] = [_said_doc(h) for h in r.history]
    if r.trial is not None:
        t = r.trial
        doc["trial"] = {"digest": t.digest, "previous": t.previous, "since": t.since}
    return doc


__all__ = [
    "DOWNGRADE",
    "LOOK",
    "MAX_BAD",
    "MAX_HISTORY",
    "MAX_RAN",
    "NOW",
    "RETRY",
    "DigestMemory",
    "Remembered",
    "Said",
    "Trial",
]
