"""What an update found waits for, in order: the operator (auto_update: notify, or
`healerctl update --check`), update_delay, update_window, the application's
update_lock, its pre_update hooks. `healerctl update` (now) skips the delay and the
window, never the lock nor pre_update: those are the application's word. An operator's
pin skips them the same way (the operator chose that digest). A rollback never waits:
it does not come through here.

The lock and the hooks need the engine; they come in as callables (the Gate), so that
this stays a decision over values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from healerd.core.updatememory import LOOK, NOW
from healerd.core.updatewindows import clock_text, next_open, window_open
from healerd.model import ServiceSpec
from healerd.model.updatepolicy import windows_text
from healerd.vocabulary import AutoUpdate

AVAILABLE, DELAY, WINDOW, LOCK, PRE_UPDATE = "available", "delay", "window", "lock", "pre_update"
SNAPSHOT = "snapshot"  # the snapshot before it could not be taken (healerd.core.updatedata)


def _no_holder(spec: ServiceSpec) -> tuple[str, float] | None:
    return None


def _no_hooks(spec: ServiceSpec) -> str:
    return ""


@dataclass(frozen=True)
class Gate:
    # (container name, since when) of a running container holding update_lock, or None.
    lock_holder: Callable[[ServiceSpec], tuple[str, float] | None] = _no_holder
    # "" when the pre_update hooks passed (or there are none), else why not.
    pre_update: Callable[[ServiceSpec], str] = _no_hooks
    # When a digest was first seen (the updater's memory: update_delay).
    seen_since: Callable[[ServiceSpec, str, float], float] = field(
        default=lambda spec, digest, now: now
    )
    operator_pin: Callable[[ServiceSpec], str] = field(default=lambda spec: "")


@dataclass(frozen=True)
class Wait:
    kind: str
    text: str


def short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12]


def _operator(spec: ServiceSpec, current: str, digest: str, allowed: frozenset[str]) -> Wait | None:
    if LOOK not in allowed and (spec.auto_update is not AutoUpdate.NOTIFY or NOW in allowed):
        return None
    how = "healerctl update --check" if LOOK in allowed else "auto_update: notify"
    return Wait(
        AVAILABLE,
        f"{spec.image} moved to {short(digest)} (runs {short(current)}): not rolled out "
        f"({how}); healerctl update {spec.name} rolls it out",
    )


def _timing(gate: Gate, spec: ServiceSpec, digest: str, now: float) -> Wait | None:
    policy = spec.update_policy
    if policy.delay:
        since = gate.seen_since(spec, digest, now)
        if now - since < policy.delay:
            return Wait(
                DELAY,
                f"{short(digest)} waits for update_delay: seen since {clock_text(since)}, "
                f"taken from {clock_text(since + policy.delay)} if the tag stays there",
            )
    if not window_open(policy.windows, now):
        opens = next_open(policy.windows, now)
        when = f"; next opens {clock_text(opens)}" if opens is not None else ""
        return Wait(
            WINDOW,
            f"{short(digest)} waits for its update window ({windows_text(policy.windows)}){when}",
        )
    return None


def waits(
    gate: Gate, spec: ServiceSpec, current: str, digest: str, allowed: frozenset[str], now: float
) -> Wait | None:
    """Why `digest` may not be rolled out now (None: it may). `current`: what runs."""
    pinned = gate.operator_pin(spec)
    found = None if pinned else _operator(spec, current, digest, allowed)
    if found is None and NOW not in allowed and not pinned:
        found = _timing(gate, spec, digest, now)
    if found is not None:
        return found
    if spec.update_policy.lock and (holder := gate.lock_holder(spec)) is not None:
        name, since = holder
        at = f" since {clock_text(since)}" if since else ""
        return Wait(
            LOCK,
            f"{short(digest)} held by {name}: {spec.update_policy.lock} exists there{at}",
        )
    why = gate.pre_update(spec)
    if why:
        return Wait(
            PRE_UPDATE,
            f"{short(digest)} postponed by pre_update ({why}); tried again at the next check",
        )
    return None


__all__ = [
    "AVAILABLE",
    "DELAY",
    "LOCK",
    "PRE_UPDATE",
    "SNAPSHOT",
    "WINDOW",
    "Gate",
    "Wait",
    "waits",
]
