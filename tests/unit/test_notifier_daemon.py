"""The notifier as the daemon wires it (issue 32): reasons masked as the API masks them,
`x-healerd: {notify: false}` and removed services through daemon_hooks, a target that
does not answer holding no other back, `notify test --url` making no label values, the
intake's drop counted, and no URL in events, status, logs or metrics."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from healerd.config import DesiredState, load_settings, parse_service_text
from healerd.config.masking import shown
from healerd.config.notifyconf import NotifyTarget, masked_url
from healerd.core.clock import FakeClock
from healerd.core.events import EventLog
from healerd.core.lifecycle import ServiceState
from healerd.core.notices import StateChange
from healerd.core.status import ServiceStatus
from healerd.daemon import notifications
from healerd.daemon.api.views import event_view, service_view
from healerd.daemon.metrics import LoopMetrics, Metrics
from healerd.daemon.notifications import (
    GATHER,
    TEST_URL_TARGET,
    WITHHELD,
    Hooks,
    Notifier,
    Watched,
    daemon_hooks,
)
from healerd.engine import LogStream
from healerd.model import ObservedContainer, ServiceSpec, Substitution
from healerd.vocabulary import EventKind
from tests.unit.harness.builders import spec
from tests.unit.harness.loop import desired, make

CRASH = ServiceState.CRASH_LOOP_BACK_OFF
PROG = ServiceState.PROGRESSING
SECRET = "hunter2-s3cret"
URL = "json://alice:t0ken-xyz@127.0.0.1:1/hook-path?key=k3y-abc"
URL_SECRETS = ("t0ken-xyz", "hook-path", "k3y-abc", "alice", URL)


class Sender:
    """Records what is sent; refuses (echoing the URL, as a careless plugin might) when
    told to."""

    def __init__(self, refuse: bool = False) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.refuse = refuse

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


class Declared:
    """What daemon_hooks reads of the controller: the declaration and the output."""

    def __init__(self, state: DesiredState) -> None:
        self.desired = state

    def logs(
        self, service: str, *, previous: bool, tail: int | None, since: float | None, until: float
    ) -> tuple[ObservedContainer | None, LogStream]:
        return None, LogStream([f"{service} starting\n{service} failed: {SECRET}\n".encode()])


def wired(
    controller: Watched,
    targets: list[NotifyTarget],
    sender: Sender,
    clock: Clock,
    counts: dict[tuple[str, str], int] | None = None,
) -> Notifier:
    def count(target: str, result: str) -> None:
        if counts is not None:
            counts[(target, result)] = counts.get((target, result), 0) + 1

    hooks = daemon_hooks(lambda: targets, lambda: controller, count)
    return Notifier(
        hooks, sender, settle=30, monotonic=clock, wall=clock, spawn=lambda work: work()
    )


def flush(n: Notifier, clock: Clock) -> None:
    n.step(0)
    clock.t += GATHER
    n.step(0)


def secret_spec(name: str = "db") -> ServiceSpec:
    return spec(name, substitutions=(Substitution("DB_PASSWORD", SECRET, True, "command"),))


# -- reasons masked as the API masks them ----------------------------------------------------


def test_a_reason_and_an_event_are_masked_as_the_api_shows_them() -> None:
    s = secret_spec()
    sender, clock = Sender(), Clock()
    n = wired(Declared(desired(s)), [NotifyTarget("json://h/", "h")], sender, clock)
    reason = f"back-off 10s restarting failed container db-1, redis --requirepass {SECRET}"
    n.offer(StateChange("db", PROG, CRASH, reason, clock.t))
    rollback = f"rolled back from sha256:b to sha256:a: exited with {SECRET}"
    log = EventLog(FakeClock(clock.t))
    log.listeners.append(n.offer)
    e = log.record(EventKind.IMAGE_ROLLBACK, "db", rollback)
    flush(n, clock)
    ((_, _, body),) = sender.sent
    assert SECRET not in body and "${DB_PASSWORD}" in body
    # The very text the API shows of the same status and event.
    api_reason = service_view(ServiceStatus("db", reason=reason), clock.t, shown(s))["reason"]
    assert api_reason in body and event_view(e, shown(s))["message"] in body


def test_a_reason_told_just_after_its_service_went_is_masked_still() -> None:
    sender, clock = Sender(), Clock()
    controller = Declared(desired(secret_spec()))
    n = wired(controller, [NotifyTarget("json://h/", "h")], sender, clock)
    n.offer(StateChange("db", PROG, CRASH, "exit code 1", clock.t))
    flush(n, clock)
    n.offer(StateChange("db", PROG, ServiceState.FAILED, f"--requirepass {SECRET}", clock.t))
    controller.desired = desired()  # removed before the notifier looked
    flush(n, clock)
    assert len(sender.sent) == 2 and SECRET not in sender.sent[1][2]
    assert "${DB_PASSWORD}" in sender.sent[1][2]


# -- x-healerd: {notify: false}, through the daemon's hooks ------------------------------------


def test_notify_false_mutes_a_service_through_the_daemon_s_wiring() -> None:
    text = (
        "services:\n  quiet:\n    image: busybox\n    x-healerd: {notify: false}\n"
        "  loud:\n    image: busybox\n"
    )
    result = parse_service_text(text, "/etc/healerd/conf.d/a.yaml")
    assert result.services is not None, result.errors
    sender, clock = Sender(), Clock()
    controller = Declared(desired(*result.services.values()))
    n = wired(controller, [NotifyTarget("json://h/", "h")], sender, clock)
    for svc in ("quiet", "loud"):
        n.offer(StateChange(svc, PROG, CRASH, "exit code 1", clock.t))
    flush(n, clock)
    ((_, title, body),) = sender.sent
    assert title.endswith("loud: crash loop") and "quiet" not in body
    # Its last state change, come just after it was removed: muted still.
    n.offer(StateChange("quiet", CRASH, ServiceState.FAILED, "exit code 1", clock.t))
    controller.desired = desired()
    flush(n, clock)
    assert len(sender.sent) == 1


# -- a service no longer declared, through the daemon's hooks -----------------------------------


def test_a_service_removed_while_crash_looping_is_told_anew_when_it_comes_back() -> None:
    sender, clock = Sender(), Clock()
    controller = Declared(desired(spec("db")))
    n = wired(controller, [NotifyTarget("json://h/", "h")], sender, clock)
    n.offer(StateChange("db", PROG, CRASH, "exit code 1", clock.t))
    flush(n, clock)
    controller.desired = desired()  # removed
    flush(n, clock)
    controller.desired = desired(spec("db"))  # back, crash-looping again at once
    n.offer(StateChange("db", PROG, CRASH, "exit code 2", clock.t))
    flush(n, clock)
    assert [t.split(": ", 1)[1] for _, t, _ in sender.sent] == ["db: crash loop"] * 2
    assert "exit code 2" in sender.sent[1][2]
    controller.desired = desired()
    flush(n, clock)
    controller.desired = desired(spec("db"))  # back, and it converges
    n.offer(StateChange("db", PROG, ServiceState.CONVERGED, "", clock.t))
    for _ in range(3):
        clock.t += 60
        flush(n, clock)
    assert len(sender.sent) == 2  # no "recovered" counting the time it was gone


# -- a target that does not answer holds no other back ------------------------------------------


class Blackhole(Sender):
    """json://dead/ hangs (as a dropped SYN does) until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.lock = threading.Lock()

    def send(self, url: str, title: str, body: str, failure: bool) -> tuple[bool, str]:
        if "dead" in url:
            self.release.wait(10)
            return False, "timed out"
        with self.lock:
            self.sent.append((url, title, body))
        return True, "sent"


def test_a_hanging_target_delays_no_other_target() -> None:
    sender, clock = Blackhole(), Clock()
    targets = [NotifyTarget("json://dead/", "dead"), NotifyTarget("json://live/", "live")]
    n = Notifier(Hooks(lambda: targets), sender, settle=30, monotonic=clock, wall=clock)
    try:
        for i in range(2):
            n.offer(StateChange(f"s{i}", PROG, CRASH, "exit code 1", clock.t))
            started = time.monotonic()
            flush(n, clock)
            assert time.monotonic() - started < 1.0  # the step never waits for a send
            deadline = time.monotonic() + 5
            while len(sender.sent) < i + 1 and time.monotonic() < deadline:
                n.step(0.05)
            assert [url for url, _, _ in sender.sent] == ["json://live/"] * (i + 1)
        views = {v["name"]: v for v in n.targets_view()}
        assert views["live"]["sent"] == 2 and views["dead"]["pending"] == 2
    finally:
        sender.release.set()


# -- healerctl notify test --url ------------------------------------------------------------------


def test_notify_test_with_a_url_counts_under_one_label_whatever_the_url() -> None:
    counts: dict[tuple[str, str], int] = {}
    sender, clock = Sender(refuse=True), Clock()
    n = wired(Declared(desired()), [], sender, clock, counts)
    for i in range(5):
        (answer,) = n.test(f"json://user:pw{i}@127.0.0.1:{9000 + i}/x{i}")
        assert answer["name"] == f"json://***@127.0.0.1:{9000 + i}/***"
        assert f"pw{i}" not in str(answer["answer"])
    assert counts == {(TEST_URL_TARGET, "failed"): 5}


# -- the intake's drop ------------------------------------------------------------------------


def test_a_full_intake_drops_and_counts_the_drop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notifications, "INTAKE_MAX", 3)
    counts: dict[tuple[str, str], int] = {}
    sender, clock = Sender(), Clock()
    n = wired(Declared(desired()), [NotifyTarget("json://h/", "h")], sender, clock, counts)
    for i in range(5):
        n.offer(StateChange(f"s{i}", PROG, CRASH, "exit code 1", clock.t))
    assert counts == {("", "dropped"): 2}
    flush(n, clock)
    ((_, title, _),) = sender.sent
    assert "3 notices" in title


# -- no URL in events, status, logs or metrics --------------------------------------------------


def _settings_with(tmp_path: Path, url: str) -> list[NotifyTarget]:
    path = tmp_path / "healerd.yaml"
    path.write_text(f"notifications:\n  - url: '{url}'\n")
    os.chmod(path, 0o600)
    os.chmod(tmp_path, 0o755)
    return list(load_settings(path).notifications)


def test_a_failed_delivery_shows_no_url_in_events_status_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    targets = _settings_with(tmp_path, URL)
    ctrl, _engine, clock = make()
    sender = Sender(refuse=True)
    n = Notifier(
        daemon_hooks(lambda: targets, lambda: ctrl, lambda t, r: None),
        sender,
        monotonic=clock.monotonic,
        wall=clock.time,
        spawn=lambda work: work(),
    )
    ctrl.events.listeners.append(n.offer)
    ctrl.state_listeners.append(n.offer)
    ctrl.events.record(EventKind.ENGINE_LOST, "", "connection refused")
    with caplog.at_level(logging.DEBUG):
        n.step(0)
        clock.advance(GATHER)
        n.step(0)
    (view,) = n.targets_view()
    assert view["failed"] == 1 and "connection refused" in str(view["last_error"])
    shown_out = [
        json.dumps([event_view(e) for e in ctrl.events.since(0)]),
        json.dumps(n.targets_view()),
        caplog.text,
    ]
    assert "not sent" in caplog.text  # the failure was logged, masked
    for text in shown_out:
        for secret in URL_SECRETS:
            assert secret not in text, (secret, text)


def test_a_failed_send_is_counted_under_the_masked_name_in_the_metrics(tmp_path: Path) -> None:
    targets = _settings_with(tmp_path, URL)
    ctrl, _engine, clock = make()
    metrics = Metrics(LoopMetrics(), ctrl)
    n = Notifier(
        daemon_hooks(lambda: targets, lambda: ctrl, metrics.notified),
        Sender(refuse=True),
        monotonic=clock.monotonic,
        wall=clock.time,
        spawn=lambda work: work(),
    )
    n.offer(StateChange("db", PROG, CRASH, "exit code 1", clock.time()))
    n.step(0)
    clock.advance(GATHER)
    n.step(0)
    text = metrics.render().decode()
    name = f"1:{masked_url(URL)}"
    assert name == "1:json://***@127.0.0.1:1/***"
    assert f'healerd_notifications_total{{result="failed",target="{name}"}} 1.0' in text
    for secret in URL_SECRETS:
        assert secret not in text


def test_a_reason_of_a_service_declared_and_gone_between_two_looks_is_withheld() -> None:
    """Never seen declared by the notifier, its values are unknown: nothing of the text
    is sent (nor its output), rather than the text unmasked."""
    sender, clock = Sender(), Clock()
    controller = Declared(desired())
    n = wired(controller, [NotifyTarget("json://h/", "h")], sender, clock)
    flush(n, clock)
    controller.desired = desired(secret_spec())
    n.offer(StateChange("db", PROG, CRASH, f"--requirepass {SECRET}", clock.t))
    controller.desired = desired()  # declared and removed before the notifier's next step
    flush(n, clock)
    ((_, _, body),) = sender.sent
    assert SECRET not in body and WITHHELD in body


def test_a_reason_told_two_declarations_after_its_service_went_is_withheld() -> None:
    """The declaration before the current one is kept, not every one ever seen."""
    sender, clock = Sender(), Clock()
    controller = Declared(desired(secret_spec()))
    n = wired(controller, [NotifyTarget("json://h/", "h")], sender, clock)
    flush(n, clock)  # seen declared
    controller.desired = desired(spec("other"))
    flush(n, clock)
    n.offer(StateChange("db", PROG, CRASH, f"--requirepass {SECRET}", clock.t))
    controller.desired = desired(spec("third"))
    flush(n, clock)
    ((_, _, body),) = sender.sent
    assert SECRET not in body and WITHHELD in body


def test_a_removed_quiet_service_stays_muted_across_a_resync_in_the_gather() -> None:
    """A resync (or a repin) makes a new declaration object of the same services: no
    news, so the removed service's declaration is still the one before."""
    quiet = spec("quiet", notify=False)
    sender, clock = Sender(), Clock()
    controller = Declared(desired(quiet))
    n = wired(controller, [NotifyTarget("json://h/", "h")], sender, clock)
    flush(n, clock)
    controller.desired = desired()  # removed
    n.offer(StateChange("quiet", CRASH, ServiceState.FAILED, "exit code 1", clock.t))
    n.step(0)
    controller.desired = desired()  # a resync's copy, within the gather
    clock.t += GATHER
    n.step(0)
    assert sender.sent == []


def test_a_removed_quiet_service_is_muted_when_its_notice_comes_in_not_when_it_goes() -> None:
    """The gathered message goes seconds later; a real change of the declaration in
    between (another service's) must not unmute what came in muted."""
    quiet = spec("quiet", notify=False)
    sender, clock = Sender(), Clock()
    controller = Declared(desired(quiet, spec("other")))
    n = wired(controller, [NotifyTarget("json://h/", "h")], sender, clock)
    flush(n, clock)
    controller.desired = desired(spec("other"))  # quiet removed
    n.offer(StateChange("quiet", CRASH, ServiceState.FAILED, "exit code 1", clock.t))
    n.step(0)
    controller.desired = desired(spec("other", replicas=2))  # a real change, in the gather
    clock.t += GATHER
    n.step(0)
    assert sender.sent == []
