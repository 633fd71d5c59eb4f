"""Notifications: the notice book (each condition once, then one recovery), the targets
of healerd.yaml (checks, masking), and the sending thread's queue, digests and retries,
with a fake sender and clock (no thread, no sleep)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from healerd.config import SettingsError, load_settings
from healerd.config.notifyconf import NotifyTarget, masked_url, scrub
from healerd.core.events import Event
from healerd.core.lifecycle import ServiceState
from healerd.core.notices import NoticeBook, StateChange, digest
from healerd.daemon.notifications import GATHER, OUTBOX_MAX, RETRY_FIRST, Hooks, Notifier
from healerd.vocabulary import DEFAULT_NOTICES, EventKind, NoticeKind

CRASH = ServiceState.CRASH_LOOP_BACK_OFF
UP = ServiceState.CONVERGED
PROG = ServiceState.PROGRESSING


def change(
    new: ServiceState, at: float, old: ServiceState | None = PROG, svc: str = "db"
) -> StateChange:
    """A service's change of state (`old` None: its first, as the status book says)."""
    return StateChange(svc, old, new, f"reason {new}", at)


def event(kind: EventKind, at: float, message: str = "said", service: str = "") -> Event:
    return Event(1, at, kind, service, message)


# -- the book -----------------------------------------------------------------------------


def test_a_crash_loop_is_told_once_and_its_recovery_once_after_it_settles() -> None:
    book = NoticeBook(settle=30)
    told = book.state(change(CRASH, 100))
    assert [n.kind for n in told] == [NoticeKind.CRASH_LOOP] and told[0].tail
    # Between crashes the service runs a moment (even Converged): nothing is told.
    for t in range(110, 200, 10):
        assert book.state(change(UP if t % 20 else PROG, t)) == []
        assert book.state(change(CRASH, t + 5)) == []
        assert book.tick(t + 6) == []
    assert book.state(change(UP, 300)) == []
    assert book.tick(329) == []
    (done,) = book.tick(330)
    assert done.kind is NoticeKind.RECOVERED and done.service == "db"
    assert "CrashLoopBackOff for 3m20s" in done.detail
    assert book.tick(1000) == []
    # A new crash loop later is a new condition.
    assert [n.kind for n in book.state(change(CRASH, 2000))] == [NoticeKind.CRASH_LOOP]


def test_failed_degraded_pull_backoff_and_halted_rollout_are_failed() -> None:
    for state in (
        ServiceState.FAILED,
        ServiceState.DEGRADED,
        ServiceState.IMAGE_PULL_BACK_OFF,
        ServiceState.ERR_IMAGE_NEVER_PULL,
        ServiceState.ROLLOUT_HALTED,
    ):
        (n,) = NoticeBook().state(change(state, 1))
        assert n.kind is NoticeKind.FAILED and str(state) in n.title and n.detail


def test_states_that_are_no_trouble_tell_nothing() -> None:
    book = NoticeBook()
    for state in (ServiceState.PENDING, PROG, UP, ServiceState.PAUSED, ServiceState.WAITING):
        assert book.state(change(state, 1)) == []
    assert book.tick(10_000) == []


def test_engine_and_pressure_are_told_when_they_begin_and_end() -> None:
    book = NoticeBook()
    (lost,) = book.event(event(EventKind.ENGINE_LOST, 10, "connection refused"))
    assert lost.kind is NoticeKind.ENGINE and "connection refused" in lost.detail
    assert book.event(event(EventKind.ENGINE_LOST, 11)) == []
    (back,) = book.event(event(EventKind.ENGINE_BACK, 75, "engine reachable again"))
    assert back.title == "engine back" and "1m05s" in back.detail
    assert book.event(event(EventKind.ENGINE_BACK, 80)) == []
    assert len(book.event(event(EventKind.PRESSURE, 1, "memory"))) == 1
    assert len(book.event(event(EventKind.PRESSURE_ENDED, 2))) == 1


def test_a_broken_file_is_told_once_with_its_first_error_then_fixed() -> None:
    book = NoticeBook()
    first = "/etc/healerd/conf.d/a.yaml:3: services.web.ports[0]: bad"
    (n,) = book.event(event(EventKind.CONFIG_ERROR, 1, first))
    assert n.title == "/etc/healerd/conf.d/a.yaml: refused" and first in n.detail
    assert book.event(event(EventKind.CONFIG_ERROR, 2, "/etc/healerd/conf.d/a.yaml:9: x")) == []
    (fixed,) = book.event(
        event(EventKind.CONFIG_FIXED, 62, "/etc/healerd/conf.d/a.yaml: reads cleanly again")
    )
    assert fixed.title.endswith("fixed") and "1m01s" in fixed.detail


def test_updates_and_rollbacks_are_told_each_time() -> None:
    book = NoticeBook()
    for kind, want in (
        (EventKind.IMAGE_UPDATED, NoticeKind.UPDATE),
        (EventKind.IMAGE_DOWNGRADE_HELD, NoticeKind.UPDATE),
        (EventKind.IMAGE_ROLLBACK, NoticeKind.ROLLBACK),
    ):
        for _ in range(2):
            (n,) = book.event(event(kind, 1, "from sha256:a to sha256:b: exited", "web"))
            assert n.kind is want and n.service == "web" and "sha256:b" in n.detail
    assert book.event(event(EventKind.RESTARTED, 1)) == []


def test_a_digest_names_every_notice() -> None:
    book = NoticeBook()
    notices = [n for i in range(20) for n in book.state(change(CRASH, 1, svc=f"s{i}"))]
    title, body = digest(notices, "edge-7")
    assert title == "healerd on edge-7: 20 notices (crash-loop x20)"
    assert all(f"s{i}: crash loop" in body for i in range(20))


# -- healerd.yaml --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("ntfy://ntfy.example.net/edge-7", "ntfy://ntfy.example.net/***"),
        ("json://user:s3cret@127.0.0.1:8080/hook?token=abc", "json://***@127.0.0.1:8080/***"),
        ("tgram://123456789:ABCdefGhIJKlmnOPqrsTUVwxyz/12345", "tgram://***"),
        ("mailto://localhost:2525?from=a@localhost", "mailto://localhost:2525/***"),
    ],
)
def test_a_url_is_shown_masked(url: str, masked: str) -> None:
    assert masked_url(url) == masked
    said = scrub(f"failed for {url}: s3cret abc 123456789:ABCdefGhIJKlmnOPqrsTUVwxyz", url)
    assert url not in said
    for secret in ("s3cret", "abc", "123456789:ABC", "edge-7", "hook"):
        assert secret not in said or secret not in url


def test_a_percent_encoded_secret_is_masked_as_the_target_reads_it_too() -> None:
    """Apprise decodes a URL's user, password and query before it uses them (and may
    say them back in an error): the decoded forms are masked as well."""
    url = "json://bot:p%40ss%2Fw0rd@127.0.0.1:8080/hook?token=a%2Bb+c%3D"
    said = scrub("401 for bot with password p@ss/w0rd, token a+b c=", url)
    assert "p@ss/w0rd" not in said and "a+b c=" not in said, said


def write_settings(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "healerd.yaml"
    path.write_text(text)
    os.chmod(path, mode)
    os.chmod(tmp_path, 0o755)
    return path


def test_targets_are_read_with_defaults(tmp_path: Path) -> None:
    path = write_settings(
        tmp_path,
        "notifications:\n"
        "  - url: ntfy://ntfy.example.net/edge-7\n"
        "  - url: json://127.0.0.1:9/x\n    name: hook\n    events: [heal, crash-loop]\n"
        "    services: [db]\n"
        "  - mqtt://127.0.0.1/healerd\n",
    )
    a, b, c = load_settings(path).notifications
    assert a == NotifyTarget("ntfy://ntfy.example.net/edge-7", "1:ntfy://ntfy.example.net/***")
    assert a.events == DEFAULT_NOTICES and NoticeKind.HEAL not in a.events
    assert b.name == "hook" and b.events == {NoticeKind.HEAL, NoticeKind.CRASH_LOOP}
    assert b.wants(NoticeKind.HEAL, "db") and not b.wants(NoticeKind.HEAL, "web")
    assert b.wants(NoticeKind.CRASH_LOOP, "") and not b.wants(NoticeKind.FAILED, "db")
    assert c.url == "mqtt://127.0.0.1/healerd"


def test_a_bad_target_is_refused_with_its_line_and_never_shows_the_url(tmp_path: Path) -> None:
    path = write_settings(
        tmp_path,
        "notifications:\n"
        "  - url: nosuchscheme://user:pw123@host/x\n"
        "  - url: json://127.0.0.1/x\n    events: [heals]\n"
        "  - {url: 'json://127.0.0.1/y', colour: red}\n",
    )
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    said = "\n".join(str(e) for e in err.value.errors)
    assert re.search(r"healerd.yaml:2:\d+: notifications\[0\].url: Apprise cannot send to", said)
    assert re.search(r"healerd.yaml:4:\d+: notifications\[1\].events\[0\]: 'heals' is not", said)
    assert "notifications[2].colour" in said
    assert "pw123" not in said and "user" not in said


def test_a_file_with_targets_must_not_be_readable_by_others(tmp_path: Path) -> None:
    text = "notifications:\n  - url: ntfy://ntfy.example.net/secret-topic\n"
    with pytest.raises(SettingsError) as err:
        load_settings(write_settings(tmp_path, text, 0o644))
    (e,) = err.value.errors
    assert "must not be readable by others" in str(e) and "secret-topic" not in str(e)
    assert load_settings(write_settings(tmp_path, text, 0o640)).notifications


# -- the sending thread, stepped by hand ----------------------------------------------------


class FakeSender:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.refuse = False

    def send(self, url: str, title: str, body: str, failure: bool) -> tuple[bool, str]:
        if self.refuse:
            return False, f"connection refused by {url}"
        self.sent.append((url, title, body))
        return True, "sent"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def notifier(
    targets: list[NotifyTarget], sender: FakeSender, clock: Clock, **hooks: object
) -> tuple[Notifier, dict[tuple[str, str], int]]:
    counts: dict[tuple[str, str], int] = {}

    def count(target: str, result: str) -> None:
        counts[(target, result)] = counts.get((target, result), 0) + 1

    h = Hooks(lambda: targets, count=count, host="edge-7", **hooks)  # type: ignore[arg-type]
    now = Notifier(h, sender, settle=30, monotonic=clock, wall=clock, spawn=lambda work: work())
    return now, counts


def test_a_crash_loop_goes_once_with_its_output_and_a_storm_goes_as_one_digest() -> None:
    sender, clock = FakeSender(), Clock()
    hook = NotifyTarget("json://127.0.0.1/h", "hook", DEFAULT_NOTICES | {NoticeKind.HEAL})
    n, counts = notifier(
        [hook], sender, clock, tail=lambda svc, lines: [f"{svc} line {i}" for i in range(lines)]
    )
    n.offer(change(CRASH, clock.t))
    n.step(0)
    assert sender.sent == []  # gathering
    clock.t += GATHER
    n.step(0)
    ((_, title, body),) = sender.sent
    assert title == "healerd on edge-7: db: crash loop"
    assert "reason CrashLoopBackOff" in body and "db line 9" in body
    for i in range(20):
        n.on_heal(f"s{i}", 0.3, "restarted in place")
    n.offer(change(CRASH, clock.t))  # still the same crash loop: nothing new
    n.step(0)
    clock.t += GATHER
    n.step(0)
    assert len(sender.sent) == 2
    _, title, body = sender.sent[1]
    assert title == "healerd on edge-7: 20 notices (heal x20)"
    assert counts == {("hook", "sent"): 2}


def test_targets_get_only_their_kinds_and_services_and_a_muted_service_none() -> None:
    sender, clock = FakeSender(), Clock()
    db_only = NotifyTarget("json://a/", "a", frozenset({NoticeKind.CRASH_LOOP}), frozenset({"db"}))
    n, _ = notifier([db_only], sender, clock, muted=lambda svc: svc == "noisy")
    for svc in ("db", "web", "noisy"):
        n.offer(change(CRASH, clock.t, svc=svc))
    n.offer(change(ServiceState.FAILED, clock.t, svc="db2"))
    n.step(0)
    clock.t += GATHER
    n.step(0)
    ((_, title, _),) = sender.sent
    assert title == "healerd on edge-7: db: crash loop"


def test_a_refusing_target_is_retried_with_backoff_and_nothing_is_lost() -> None:
    sender, clock = FakeSender(), Clock()
    n, counts = notifier([NotifyTarget("json://127.0.0.1:1/x", "dead")], sender, clock)
    sender.refuse = True
    n.offer(change(CRASH, clock.t))
    n.offer(change(ServiceState.FAILED, clock.t, svc="web"))
    n.step(0)
    clock.t += GATHER
    n.step(0)
    (view,) = n.targets_view()
    assert view["failed"] == 1 and view["pending"] == 1
    assert "connection refused" in str(view["last_error"])
    clock.t += RETRY_FIRST - 1
    n.step(0)
    assert counts[("dead", "failed")] == 1  # not due yet
    clock.t += 1
    n.step(0)
    assert counts[("dead", "failed")] == 2
    clock.t += RETRY_FIRST  # the backoff doubled: not yet
    n.step(0)
    assert counts[("dead", "failed")] == 2
    sender.refuse = False
    clock.t += RETRY_FIRST
    n.step(0)
    ((_, title, _),) = sender.sent
    assert "2 notices" in title
    assert n.targets_view()[0]["pending"] == 0


def test_a_full_outbox_drops_the_oldest_and_counts_it() -> None:
    sender, clock = FakeSender(), Clock()
    target = NotifyTarget("json://x/", "t", frozenset({NoticeKind.HEAL}))
    n, counts = notifier([target], sender, clock)
    sender.refuse = True
    for i in range(OUTBOX_MAX + 5):
        n.on_heal("web", 0.1, f"heal {i}")
        n.step(0)
        clock.t += GATHER
        n.step(0)  # one message each: the heal alone in its gather
    assert counts[("t", "dropped")] >= 5
    assert n.targets_view()[0]["pending"] == OUTBOX_MAX


def test_offer_never_waits_and_without_targets_takes_nothing() -> None:
    sender, clock = FakeSender(), Clock()
    n, _ = notifier([], sender, clock)
    n.offer(change(CRASH, 1))
    n.step(0)
    clock.t += 100
    n.step(0)
    assert sender.sent == []


def test_every_target_gets_the_crash_loops_output() -> None:
    sender, clock = FakeSender(), Clock()
    targets = [NotifyTarget("json://a/", "a"), NotifyTarget("json://b/", "b")]
    n, _ = notifier(targets, sender, clock, tail=lambda svc, lines: ["the last words"])
    n.offer(change(CRASH, clock.t))
    n.step(0)
    clock.t += GATHER
    n.step(0)
    assert [url for url, _, _ in sender.sent] == ["json://a/", "json://b/"]
    assert all("the last words" in body for _, _, body in sender.sent)


def test_x_healerd_notify_false_mutes_a_service_and_anything_else_is_refused() -> None:
    from healerd.config import parse_service_text

    text = (
        "services:\n  quiet:\n    image: busybox\n    x-healerd: {notify: false}\n"
        "  loud:\n    image: busybox\n"
    )
    result = parse_service_text(text, "/etc/healerd/conf.d/a.yaml")
    assert result.services is not None, result.errors
    assert not result.services["quiet"].notify and result.services["loud"].notify
    bad = parse_service_text(
        "services:\n  x:\n    image: busybox\n    x-healerd: {notify: 'no'}\n", "/e/b.yaml"
    )
    assert [e.field for e in bad.errors] == ["services.x.x-healerd.notify"]


def test_a_target_removed_by_a_reload_leaves_nothing_to_wait_for() -> None:
    sender, clock = FakeSender(), Clock()
    targets = [NotifyTarget("json://127.0.0.1:1/x", "dead")]
    n, _ = notifier(targets, sender, clock)
    sender.refuse = True
    n.offer(change(CRASH, clock.t))
    n.step(0)
    clock.t += GATHER
    n.step(0)
    assert n.targets_view()[0]["pending"] == 1
    targets.clear()  # the reload: no target any more
    clock.t += 1000
    n.step(0)
    assert n._wait() == 1.0  # no retry due: the thread sleeps, it does not spin
    assert n.targets_view() == []
