"""What is worth telling someone, from the states services enter and the events healerd
records: each condition (a crash loop, a failure, the engine away, a broken file) is told
once when it begins and once when it is over, never once per pass or per crash.

Pure: fed values, returns values; the sending (threads, Apprise, retries) is
healerd.daemon.notifications'.

A crash-looping service runs for a moment between its crashes, and may even count as
Converged then: a condition is over only once the service has stayed Converged (or
Completed) for `settle` seconds, so a crash loop is one message and one "recovered", not
one pair per crash.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from healerd.core.lifecycle import ServiceState
from healerd.vocabulary import EventKind, NoticeKind

# How long a service must stay as declared before its crash loop or failure counts as over.
SETTLE = 30.0
# A service's conditions that one "recovered" ends (a hold by host pressure ends apart).
_TROUBLE = (NoticeKind.CRASH_LOOP, NoticeKind.FAILED)
# What a CONFIG_FIXED event says of a file refused before: fixed, or gone (file_fixed).
FILE_FIXED = "reads cleanly again"
FILE_REMOVED = "removed while refused: what it declared is no longer declared"

# The node's conditions: the event that begins each, the one that ends it.
_NODE = {
    EventKind.ENGINE_LOST: (NoticeKind.ENGINE, True),
    EventKind.ENGINE_BACK: (NoticeKind.ENGINE, False),
    EventKind.PRESSURE: (NoticeKind.PRESSURE, True),
    EventKind.PRESSURE_ENDED: (NoticeKind.PRESSURE, False),
}
# Things that happen once: told each time.
_ONCE = {
    EventKind.IMAGE_UPDATED: (NoticeKind.UPDATE, "image updated"),
    EventKind.IMAGE_DOWNGRADE_HELD: (NoticeKind.UPDATE, "image update held"),
    EventKind.IMAGE_UPDATE_AVAILABLE: (NoticeKind.UPDATE, "image update available"),
    EventKind.IMAGE_UPDATE_HELD: (NoticeKind.UPDATE, "image update waits"),
    EventKind.IMAGE_ROLLBACK: (NoticeKind.ROLLBACK, "image update rolled back"),
}


class Event(Protocol):
    """An event of healerd.core.events' (its log holds a lock: this module holds none)."""

    @property
    def time(self) -> float: ...
    @property
    def kind(self) -> EventKind: ...
    @property
    def service(self) -> str: ...
    @property
    def message(self) -> str: ...


@dataclass(frozen=True)
class StateChange:
    """A service entered `new` (from `old`, None for its first) at wall time `at`."""

    service: str
    old: ServiceState | None
    new: ServiceState
    reason: str
    at: float


@dataclass(frozen=True)
class Notice:
    """One thing to tell: its kind, whose (a service, or "" for the node or a file), a
    short title and the reason. `tail`: attach the service's last lines of output."""

    kind: NoticeKind
    service: str
    title: str
    detail: str
    at: float
    tail: bool = False


def took(seconds: float) -> str:
    """`3m12s`: how long, for a person."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@dataclass
class _Open:
    since: float  # when the condition began (wall clock)
    what: str  # the state or reason it began with
    well_since: float | None = None  # the service is as declared since then


class NoticeBook:
    """The conditions told and not yet over (not thread-safe: one thread feeds it)."""

    def __init__(self, settle: float = SETTLE) -> None:
        self.settle = settle
        self._open: dict[tuple[str, NoticeKind], _Open] = {}

    def is_open(self, who: str, kind: NoticeKind) -> bool:
        return (who, kind) in self._open

    def state(self, c: StateChange) -> list[Notice]:
        """What entering `c.new` tells: a crash loop, a failure or a hold that begins,
        nothing while one lasts; as declared again starts the wait for `settle`. A first
        state (`c.old` None: a service declared anew, its status dropped at its removal)
        starts from nothing: what an earlier life of the name left open is forgotten."""
        if c.old is None:
            self.drop(c.service)
        kind = c.new.notice
        mine = [cond for (who, _), cond in self._open.items() if who == c.service]
        for cond in mine:
            if c.new.is_well:
                cond.well_since = cond.well_since if cond.well_since is not None else c.at
            else:
                cond.well_since = None  # Progressing again, or in trouble: not over yet
        return self._begin(c, kind) if kind is not None else []

    def _begin(self, c: StateChange, kind: NoticeKind) -> list[Notice]:
        if (c.service, kind) in self._open:
            return []
        self._open[(c.service, kind)] = _Open(c.at, str(c.new))
        if kind is NoticeKind.CRASH_LOOP:
            return [Notice(kind, c.service, f"{c.service}: crash loop", c.reason, c.at, tail=True)]
        if kind is NoticeKind.PRESSURE:
            title = f"{c.service}: held back by host pressure"
            return [Notice(kind, c.service, title, c.reason, c.at)]
        title = f"{c.service}: {c.new}"
        return [Notice(kind, c.service, title, c.reason or str(c.new), c.at, tail=True)]

    def tick(self, now: float) -> list[Notice]:
        """The conditions over by now: as declared for `settle` seconds. A service's
        crash loop and failure end in one "recovered", its downtime from the first."""
        out: list[Notice] = []
        for service in self._services():
            held = self._open.get((service, NoticeKind.PRESSURE))
            if held is not None and self._over(held, now):
                del self._open[(service, NoticeKind.PRESSURE)]
                detail = f"held back for {took(_well(held) - held.since)}"
                title = f"{service}: no longer held back"
                out.append(Notice(NoticeKind.PRESSURE, service, title, detail, now))
            trouble = [(k, c) for k in _TROUBLE if (c := self._open.get((service, k))) is not None]
            if not trouble or not all(self._over(c, now) for _, c in trouble):
                continue
            for kind, _ in trouble:
                del self._open[(service, kind)]
            conds = sorted((c for _, c in trouble), key=lambda c: c.since)
            down = took(max(_well(c) for c in conds) - conds[0].since)
            what = ", then ".join(c.what for c in conds)
            detail = f"runs as declared again; it was {what} for {down}"
            out.append(Notice(NoticeKind.RECOVERED, service, f"{service}: recovered", detail, now))
        return out

    def _over(self, cond: _Open, now: float) -> bool:
        return cond.well_since is not None and now - cond.well_since >= self.settle

    def drop(self, service: str) -> None:
        """A service no longer declared: its conditions end untold."""
        for key in [k for k in self._open if k[0] == service]:
            del self._open[key]

    def keep_only(self, declared: Collection[str]) -> None:
        """The services declared now: the conditions of any other end untold (a service
        removed while in trouble is not "recovered" when it comes back)."""
        for service in self._services():
            if service not in declared:
                self.drop(service)

    def _services(self) -> list[str]:
        """The services with a condition open (not the node's, not a file's)."""
        return list(dict.fromkeys(w for w, _ in self._open if w and not w.startswith("file:")))

    def event(self, e: Event) -> list[Notice]:
        """What an event of healerd's tells (most tell nothing)."""
        if e.kind in _ONCE:
            kind, title = _ONCE[e.kind]
            return [Notice(kind, e.service, f"{e.service}: {title}", e.message, e.time)]
        if e.kind in _NODE:
            kind, begins = _NODE[e.kind]
            return self._node(kind, begins, e)
        if e.kind is EventKind.CONFIG_ERROR:
            return self._file(e.message.split(":", 1)[0], e, broken=True)
        if e.kind is EventKind.CONFIG_FIXED:
            return self._file(e.message.split(":", 1)[0], e, broken=False)
        return []

    def _node(self, kind: NoticeKind, begins: bool, e: Event) -> list[Notice]:
        key = ("", kind)
        word = "engine" if kind is NoticeKind.ENGINE else "host pressure"
        if begins:
            if key in self._open:
                return []
            self._open[key] = _Open(e.time, e.message)
            title = "engine unreachable" if kind is NoticeKind.ENGINE else "host under pressure"
            return [Notice(kind, "", title, e.message, e.time)]
        cond = self._open.pop(key, None)
        if cond is None:
            return []
        title = "engine back" if kind is NoticeKind.ENGINE else "host pressure over"
        detail = f"{e.message} ({word} trouble lasted {took(e.time - cond.since)})"
        return [Notice(kind, "", title, detail, e.time)]

    def _file(self, file: str, e: Event, *, broken: bool) -> list[Notice]:
        key = (f"file:{file}", NoticeKind.CONFIG_ERROR)
        if broken:
            if key in self._open:
                return []
            self._open[key] = _Open(e.time, e.message)
            detail = f"{e.message}\nits services keep their last good state"
            return [Notice(NoticeKind.CONFIG_ERROR, "", f"{file}: refused", detail, e.time)]
        cond = self._open.pop(key, None)
        if cond is None:
            return []
        detail = f"{e.message} (it was broken for {took(e.time - cond.since)})"
        word = "removed" if e.message.endswith(FILE_REMOVED) else "fixed"
        return [Notice(NoticeKind.CONFIG_ERROR, "", f"{file}: {word}", detail, e.time)]


def file_fixed(file: str, *, removed: bool) -> str:
    """A CONFIG_FIXED event's message: the file refused before reads cleanly, or is gone."""
    return f"{file}: {FILE_REMOVED if removed else FILE_FIXED}"


def _well(cond: _Open) -> float:
    return cond.well_since if cond.well_since is not None else cond.since


def heal_notice(service: str, seconds: float, how: str, at: float) -> Notice:
    """A plain heal (only targets that ask for `heal` get it)."""
    return Notice(NoticeKind.HEAL, service, f"{service}: healed", f"{how} in {seconds:.2f}s", at)


def unclean_notice(at: float) -> Notice:
    """healerd started, and its last run had not stopped cleanly."""
    detail = (
        "the last run of healerd ended without its clean stop (a crash, kill -9, an OOM "
        "kill, a power loss); it took over the containers as it found them"
    )
    return Notice(NoticeKind.HEALERD, "", "healerd restarted after an unclean stop", detail, at)


def digest(notices: list[Notice], host: str) -> tuple[str, str]:
    """The title and body of one message: the notice itself, or a digest of many."""
    if len(notices) == 1:
        n = notices[0]
        return f"healerd on {host}: {n.title}", n.detail
    kinds: dict[str, int] = {}
    for n in notices:
        kinds[n.kind] = kinds.get(n.kind, 0) + 1
    counts = ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items()))
    title = f"healerd on {host}: {len(notices)} notices ({counts})"
    body = "\n\n".join(f"{n.title}\n{n.detail}" for n in notices)
    return title, body


__all__ = [
    "FILE_FIXED",
    "FILE_REMOVED",
    "SETTLE",
    "Notice",
    "NoticeBook",
    "StateChange",
    "digest",
    "file_fixed",
    "heal_notice",
    "took",
    "unclean_notice",
]
