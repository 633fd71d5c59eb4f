"""Sending what healerd.core.notices finds worth telling, to healerd.yaml's targets.

The loop only offers: a state change, an event or a heal is put on a bounded intake queue
without waiting (a full queue drops it and counts the drop), so no target, dead or slow,
ever holds a heal back. One thread (`healerd-notify`) does the rest: it feeds the notice
book, gathers what comes together (GATHER) into one message per target (50 services
killed at once are one digest), adds a crash loop's last lines of output (masked), and
sends with Apprise. A message a target refuses stays in that target's outbox and is
tried again with backoff (10 s doubling to 5 min) until it goes, or until the outbox is
full, when the oldest is dropped and counted. Each send runs in a thread of its own, one
at a time per target: Apprise's own timeouts bound it, and a target that does not
answer delays no other target's messages.

What is sent of a service is masked as the API shows it (`mask_free` with the values
its declaration interpolated), and every answer of a target has its URL's secret parts
masked (`scrub`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from healerd.config import DesiredState
from healerd.config.masking import mask_environment, mask_free, shown
from healerd.config.notifyconf import NotifyTarget, masked_url, scrub
from healerd.core.events import Event
from healerd.core.notices import Notice, NoticeBook, StateChange, digest, heal_notice
from healerd.daemon.apprisesend import AppriseSender
from healerd.engine import LogStream
from healerd.model import ObservedContainer, ServiceSpec
from healerd.vocabulary import NoticeKind

log = logging.getLogger("healerd.notify")

# What comes together goes as one message: a gather ends once nothing new came for
# GATHER seconds, or GATHER_MAX seconds after its first notice.
GATHER = 2.0
GATHER_MAX = 10.0
INTAKE_MAX = 10_000
OUTBOX_MAX = 100  # messages per target waiting to go
RETRY_FIRST, RETRY_MAX = 10.0, 300.0
TAIL_LINES = 10
# The `target` label of `healerctl notify test --url`: one value, whatever the URL.
TEST_URL_TARGET = "test-url"
_FAILURES = frozenset({NoticeKind.CRASH_LOOP, NoticeKind.FAILED, NoticeKind.CONFIG_ERROR})


class Sender(Protocol):
    def send(self, url: str, title: str, body: str, failure: bool) -> tuple[bool, str]:
        """(whether it went, what the target answered)."""
        ...


@dataclass
class TargetState:
    """What `healerctl status` shows of a target."""

    name: str
    sent: int = 0
    failed: int = 0
    dropped: int = 0
    last_error: str = ""
    last_error_at: float | None = None
    last_sent_at: float | None = None
    outbox: deque[tuple[str, str, bool]] = field(default_factory=deque)
    next_try: float = 0.0
    delay: float = RETRY_FIRST
    busy: bool = False  # a send to it is under way (one at a time per target)

    def view(self) -> dict[str, object]:
        return {
            "name": self.name,
            "sent": self.sent,
            "failed": self.failed,
            "dropped": self.dropped,
            "pending": len(self.outbox),
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
            "last_sent_at": self.last_sent_at,
        }


@dataclass
class Hooks:
    """What the notifier asks the daemon: the targets (reloadable), whether a service is
    muted, a service's last lines of output, where to count a result, how a text about a
    service is masked (`masked(service, text)`), and the services declared now (None:
    not known; the conditions of a service no longer declared are forgotten)."""

    targets: Callable[[], Sequence[NotifyTarget]]
    muted: Callable[[str], bool] = lambda _service: False
    tail: Callable[[str, int], list[str]] = lambda _service, _n: []
    count: Callable[[str, str], None] = lambda _target, _result: None
    host: str = field(default_factory=socket.gethostname)
    masked: Callable[[str, str], str] = lambda _service, text: text
    declared: Callable[[], Collection[str]] | None = None


def _thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="healerd-notify-send", daemon=True).start()


class Notifier:
    def __init__(
        self,
        hooks: Hooks,
        sender: Sender | None = None,
        *,
        settle: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        spawn: Callable[[Callable[[], None]], None] = _thread,
    ) -> None:
        """`spawn(work)`: where a send runs (a thread of its own; tests run it at once)."""
        self._hooks = hooks
        self._sender = sender or AppriseSender()
        self._book = NoticeBook() if settle is None else NoticeBook(settle)
        self._intake: queue.Queue[object] = queue.Queue(INTAKE_MAX)
        self._mono, self._wall = monotonic, wall
        self._lock = threading.Lock()  # the targets' states
        self._spawn = spawn
        self._states: dict[str, TargetState] = {}
        self._gathered: list[Notice] = []
        self._gather_until: float | None = None
        self._gather_first = 0.0

    # -- what the loop calls: never blocks ----------------------------------------------

    def offer(self, item: StateChange | Event | Notice) -> None:
        if not self._hooks.targets():
            return
        try:
            self._intake.put_nowait(item)
        except queue.Full:
            self._hooks.count("", "dropped")

    def on_heal(self, service: str, latency_seconds: float, how: str) -> None:
        if self._hooks.targets():  # no notice made on the heal path for nobody
            self.offer(heal_notice(service, latency_seconds, how, self._wall()))

    def on_action(self, kind: str, service: str, ok: bool) -> None:
        pass

    def on_pass(self, service: str, seconds: float) -> None:
        pass

    # -- the notifier's thread -----------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step(self._wait())
            except Exception:  # a bug here must not end the notifications for good
                log.exception("notifications: a step failed; going on")
                stop.wait(1.0)

    def _wait(self) -> float:
        """How long the thread may sleep: until the gather ends, a retry is due, or the
        book's next look (a recovery's settle)."""
        now = self._mono()
        due = [1.0]
        if self._gather_until is not None:
            due.append(self._gather_until - now)
        with self._lock:
            due += [s.next_try - now for s in self._states.values() if s.outbox and not s.busy]
        return max(0.0, min(due))

    def step(self, timeout: float) -> None:
        """Take what came in (waiting up to `timeout` for the first), then send what is due."""
        items: list[object] = []
        try:
            items.append(
                self._intake.get(timeout=timeout) if timeout > 0 else self._intake.get_nowait()
            )
            while len(items) < INTAKE_MAX:
                items.append(self._intake.get_nowait())
        except queue.Empty:
            pass
        found: list[Notice] = []
        for item in items:
            found += self._notices(item)
        if self._hooks.declared is not None:
            self._book.keep_only(self._hooks.declared())
        found += self._book.tick(self._wall())
        # Muted and masked as the service is declared now (or was just before it went).
        found = [self._masked(n) for n in found if not (n.service and self._hooks.muted(n.service))]
        now = self._mono()
        if found:
            if not self._gathered:
                self._gather_first = now
            self._gathered += found
            self._gather_until = min(self._gather_first + GATHER_MAX, now + GATHER)
        if self._gather_until is not None and now >= self._gather_until:
            gathered, self._gathered, self._gather_until = self._gathered, [], None
            self._post(gathered)
        self._send_due(now)

    def _notices(self, item: object) -> list[Notice]:
        if isinstance(item, Notice):
            return [item]
        if isinstance(item, StateChange):
            return self._book.state(item)
        if isinstance(item, Event):
            return self._book.event(item)
        return []

    def _masked(self, n: Notice) -> Notice:
        """The reason (a state's, an event's) as the API shows it: values masked."""
        if not n.service:
            return n
        return dataclasses.replace(n, detail=self._hooks.masked(n.service, n.detail))

    def _post(self, notices: list[Notice]) -> None:
        """One message per target of what it wants of `notices`."""
        tails = {n.service: self._tail(n.service) for n in notices if n.tail and n.service}
        for target in self._hooks.targets():
            mine = [n for n in notices if target.wants(n.kind, n.service)]
            if not mine:
                continue
            title, body = digest(mine, self._hooks.host)
            for service in dict.fromkeys(n.service for n in mine if n.tail):  # once each
                if tails.get(service):
                    lines = "\n".join(tails[service])
                    body += f"\n\nlast lines of {service}'s output:\n{lines}"
            failure = any(n.kind in _FAILURES for n in mine)
            with self._lock:
                state = self._state(target)
                if len(state.outbox) >= OUTBOX_MAX:
                    state.outbox.popleft()
                    state.dropped += 1
                    self._hooks.count(target.name, "dropped")
                state.outbox.append((title, body, failure))

    def _tail(self, service: str) -> list[str]:
        try:
            return self._hooks.tail(service, TAIL_LINES)
        except Exception as exc:  # the output is a bonus: the notice goes without it
            log.debug("no output of %s for a notification: %s", service, exc)
            return []

    def _state(self, target: NotifyTarget) -> TargetState:
        state = self._states.get(target.name)
        if state is None:
            state = self._states[target.name] = TargetState(target.name)
        return state

    def _send_due(self, now: float) -> None:
        targets = self._hooks.targets()
        known = {t.name for t in targets}
        with self._lock:  # a target a reload removed: its outbox goes (and is not waited on)
            for gone in [name for name in self._states if name not in known]:
                del self._states[gone]
        for target in targets:
            with self._lock:
                state = self._states.get(target.name)
                if state is None or state.busy or not state.outbox or state.next_try > now:
                    continue
                state.busy = True
                message = state.outbox[0]
            self._spawn(functools.partial(self._send_one, target, state, message))

    def _send_one(
        self, target: NotifyTarget, state: TargetState, message: tuple[str, str, bool]
    ) -> None:
        """One send to one target (in a thread of its own), then wake the notifier."""
        ok, said = self._send(target.url, *message)
        self._hooks.count(target.name, "sent" if ok else "failed")
        with self._lock:
            state.busy = False
            self._settle(state, ok, said, message)
        with contextlib.suppress(queue.Full):  # the next message, or a retry, is due
            self._intake.put_nowait(None)

    def _send(self, url: str, title: str, body: str, failure: bool) -> tuple[bool, str]:
        try:
            ok, said = self._sender.send(url, title, body, failure)
        except Exception as exc:  # a sender's bug is one failed send
            ok, said = False, f"{type(exc).__name__}: {exc}"
        return ok, scrub(said, url)

    def _settle(
        self, state: TargetState, ok: bool, said: str, message: tuple[str, str, bool]
    ) -> None:
        if ok:
            if state.outbox and state.outbox[0] is message:  # (unless dropped meanwhile)
                state.outbox.popleft()
            state.sent += 1
            state.last_sent_at, state.delay, state.next_try = self._wall(), RETRY_FIRST, 0.0
            return
        state.failed += 1
        state.last_error, state.last_error_at = said, self._wall()
        state.next_try = self._mono() + state.delay
        log.warning(
            "notification to %s not sent (%d waiting; next try in %.0fs): %s",
            state.name,
            len(state.outbox),
            state.delay,
            said,
        )
        state.delay = min(RETRY_MAX, state.delay * 2)

    # -- what the API asks ------------------------------------------------------------

    def targets_view(self) -> list[dict[str, object]]:
        with self._lock:
            known = {t.name for t in self._hooks.targets()}
            return [s.view() for name, s in sorted(self._states.items()) if name in known]

    def test(self, url: str | None = None) -> list[dict[str, object]]:
        """Send a test message to each target (or to `url` alone), now: what each said.
        A URL's results are counted as TEST_URL_TARGET: callers make no label values."""
        targets: Sequence[NotifyTarget] = (
            [NotifyTarget(url, masked_url(url))] if url else self._hooks.targets()
        )
        title = f"healerd on {self._hooks.host}: test"
        body = (
            "A test message from `healerctl notify test`: this target receives healerd's "
            "notifications."
        )
        out: list[dict[str, object]] = []
        for target in targets:
            ok, said = self._send(target.url, title, body, False)
            self._hooks.count(TEST_URL_TARGET if url else target.name, "sent" if ok else "failed")
            out.append({"name": target.name, "ok": ok, "answer": said})
        return out


class Watched(Protocol):
    """The part of the controller the notifier reads: the declaration, the output."""

    @property
    def desired(self) -> DesiredState: ...

    def logs(
        self, service: str, *, previous: bool, tail: int | None, since: float | None, until: float
    ) -> tuple[ObservedContainer | None, LogStream]: ...


def output_tail(c: Watched, service: str, lines: int, spec: ServiceSpec | None) -> list[str]:
    """A service's last lines of output, the values of its declaration `spec` masked."""
    _, stream = c.logs(service, previous=False, tail=lines, since=None, until=time.time())
    with stream:
        raw = b"".join(itertools.islice(stream, 64))[-16384:]
    text = mask_free(raw.decode("utf-8", "replace"), shown(spec))
    return [mask_environment(line, spec) for line in text.splitlines()[-lines:]]


# What a notice says of a service healerd never saw declared (declared and gone between
# two of the notifier's looks): what of its text is secret is not known, so none is sent.
WITHHELD = "(not shown: the service is no longer declared)"


def masked_text(text: str, spec: ServiceSpec | None) -> str:
    """A text about a service (a state's reason, an event's message) as the API shows
    it (healerd.daemon.api.views): each value its declaration interpolated masked."""
    return mask_free(text, shown(spec))


def for_daemon(
    targets: Callable[[], Sequence[NotifyTarget]],
    controller: Callable[[], Watched],
    count: Callable[[str, str], None],
) -> Notifier:
    """The daemon's notifier (daemon_hooks), sending with Apprise."""
    return Notifier(daemon_hooks(targets, controller, count))


def daemon_hooks(
    targets: Callable[[], Sequence[NotifyTarget]],
    controller: Callable[[], Watched],
    count: Callable[[str, str], None],
) -> Hooks:
    """Targets as healerd.yaml says now, `x-healerd: {notify: false}` honoured, a crash
    loop's output read from the engine, reasons masked as the API masks them, and a
    service's conditions forgotten once it is no longer declared."""

    seen: list[DesiredState] = []  # the declaration now and the one before it

    def looked() -> DesiredState:
        """The declaration now, kept in `seen` with the one before (a resync's or a
        repin's copy of the same services is no news)."""
        desired = controller().desired
        if not seen:
            seen.append(desired)
        elif seen[0] is not desired:
            if seen[0].services != desired.services:
                seen[:] = [desired, seen[0]]
            else:
                seen[0] = desired
        return desired

    def spec_of(service: str) -> ServiceSpec | None:
        """Its declaration, or the one before (looked at every step): a notice may come
        just after its service went, and is masked (or muted) as the service was."""
        looked()
        return next((d.services[service] for d in seen if service in d.services), None)

    def muted(service: str) -> bool:
        spec = spec_of(service)
        return spec is not None and not spec.notify

    def tail(service: str, lines: int) -> list[str]:
        spec = spec_of(service)
        return [] if spec is None else output_tail(controller(), service, lines, spec)

    def masked(service: str, text: str) -> str:
        spec = spec_of(service)
        return WITHHELD if spec is None else masked_text(text, spec)

    def declared() -> Collection[str]:
        return looked().services.keys()

    return Hooks(targets, muted, tail, count, masked=masked, declared=declared)


__all__ = [
    "TEST_URL_TARGET",
    "WITHHELD",
    "AppriseSender",
    "Hooks",
    "Notifier",
    "Sender",
    "TargetState",
    "Watched",
    "daemon_hooks",
    "for_daemon",
    "mask_environment",
    "masked_text",
    "output_tail",
]
