"""The hand-off to the engine's restart policy at a stop, taken back at the next start."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from healerd.config import DesiredState
from healerd.core.clock import FakeClock
from healerd.core.handoff import to_hand_off
from healerd.daemon.handoff import MARKER, TAKE_BACK_TRIES
from healerd.daemon.main import Daemon, build_parser, resolve_settings
from healerd.engine import EngineError, Unsupported
from healerd.model import ContainerState
from healerd.vocabulary import Restart
from tests.unit.harness.builders import container, spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine

CALLS = LOOP_CALLS | {"identity", "set_restart_policy"}


def test_only_running_replicas_of_long_running_services_it_owns_are_handed_off() -> None:
    web, job, once, paused = (
        spec("web", 2),
        spec("job", 1, restart=Restart.parse("no")),
        spec("once", 1, restart=Restart.parse("on-failure:3")),
        spec("paused", 1),
    )
    desired = {s.name: s for s in (web, job, once, paused)}
    now = 10_000.0
    running, history = container(web, created=now - 5), container(web, ContainerState.EXITED)
    # A crash replacement carries its streak for life; it counts until it ran a window.
    streak = dataclasses.replace(container(web, created=now - 5), crash_streak=2)
    window = web.restart_policy.window
    settled = dataclasses.replace(container(web, created=now - window - 1), crash_streak=2)
    stopped_by_engine = container(web, ContainerState.EXITED)
    undeclared = container(spec("gone", 1))
    listed = [
        running,
        history,
        streak,
        settled,
        stopped_by_engine,
        undeclared,
        container(job),
        container(once),
        container(paused),
    ]
    assert to_hand_off(listed, desired, {"paused"}, now) == [running, settled]


def daemon(tmp_path: Path, engine: FakeEngine, **settings: object) -> Daemon:
    (tmp_path / "conf.d").mkdir(parents=True, exist_ok=True)
    (tmp_path / "state").mkdir(mode=0o700, exist_ok=True)
    s = resolve_settings(
        build_parser().parse_args(
            ["--config-dir", str(tmp_path), "--state-dir", str(tmp_path / "state")]
        )
    )
    clock = engine.clock or FakeClock()  # the engine's: containers' ages on one clock
    d = Daemon(dataclasses.replace(s, **settings), engine, clock)  # type: ignore[arg-type]
    d.controller.set_desired(
        DesiredState(
            services={"web": spec("web", 2)}, errors=(), hold_orphans=False, broken_files=()
        )
    )
    return d


def converge(d: Daemon) -> None:
    d.controller.enqueue_all(force=True)
    for _ in range(20):
        if not d.controller.process_once():
            break


def calls_since(engine: FakeEngine, mark: int) -> list[str]:
    return engine.calls[mark:]


def test_a_stop_hands_off_and_the_next_start_takes_back_before_it_acts(tmp_path: Path) -> None:
    engine = FakeEngine(allow=CALLS)
    first = daemon(tmp_path, engine)
    converge(first)
    ids = sorted(c.id for c in engine.running("web"))
    first.controller.shutdown()
    budget = engine.meter.stats.calls
    first._hand_off()
    assert engine.policies == {cid: "unless-stopped" for cid in ids}
    assert engine.meter.stats.calls == budget, "the hand-off took from the heal budget"
    assert (tmp_path / "state" / MARKER).exists()

    # While healerd is away one of them stops (the engine would restart it; the fake does
    # not); then healerd starts again.
    engine.kill(ids[0], exit_code=1)
    mark = len(engine.calls)
    second = daemon(tmp_path, engine)
    converge(second)
    assert engine.policies == {cid: "no" for cid in ids}
    assert not (tmp_path / "state" / MARKER).exists()
    since = calls_since(engine, mark)
    last_take_back = len(since) - 1 - since[::-1].index("set_restart_policy")
    acted = [c for c in since[:last_take_back] if c in ("create", "start", "stop", "remove")]
    assert acted == [], "healerd acted before it had taken its containers back"
    assert {"create", "start"} & set(since[last_take_back:]), "and then it healed"
    # No marker, nothing to take back: an ordinary start makes no such call.
    mark = len(engine.calls)
    third = daemon(tmp_path, engine)
    converge(third)
    assert "set_restart_policy" not in calls_since(engine, mark)


class Refusing(FakeEngine):
    def __init__(self) -> None:
        super().__init__(allow=CALLS)
        self.refuse: set[str] = set()  # ids whose update fails
        self.attempts: list[str] = []

    def set_restart_policy(self, container_id: str, policy: str) -> None:
        self.attempts.append(container_id)
        if container_id in self.refuse:
            raise EngineError("update refused")
        super().set_restart_policy(container_id, policy)


def test_nothing_is_healed_beside_the_engine_until_all_are_taken_back(tmp_path: Path) -> None:
    engine = Refusing()
    first = daemon(tmp_path, engine)
    converge(first)
    first.controller.shutdown()
    first._hand_off()
    (stubborn, victim) = engine.running("web")
    engine.kill(victim.id, exit_code=1)  # a crash while a take-back is refused
    engine.refuse = {stubborn.id}
    engine.attempts = []
    mark = len(engine.calls)
    second = daemon(tmp_path, engine)
    second.controller.enqueue_all(force=True)
    second.controller.process_once()
    assert not {"create", "start"} & set(calls_since(engine, mark))
    assert engine.policies[victim.id] == "no" and engine.policies[stubborn.id] == "unless-stopped"
    assert (tmp_path / "state" / MARKER).exists()
    engine.refuse = set()
    converge(second)  # looks again: only what is left is taken back, then healed
    assert set(engine.policies.values()) == {"no"}
    tried = engine.attempts
    assert sorted(tried[:2]) == sorted([stubborn.id, victim.id]) and tried[2:] == [stubborn.id]
    assert len(engine.running("web")) == 2
    assert not (tmp_path / "state" / MARKER).exists()


def test_a_container_the_engine_refuses_for_good_stops_healing_only_for_a_few_looks(
    tmp_path: Path,
) -> None:
    engine = Refusing()
    first = daemon(tmp_path, engine)
    converge(first)
    first._hand_off()
    (stubborn, victim) = engine.running("web")
    engine.kill(victim.id, exit_code=1)
    engine.refuse = {stubborn.id}
    second = daemon(tmp_path, engine)
    second.controller.enqueue_all(force=True)
    for _ in range(TAKE_BACK_TRIES + 5):
        second.controller.process_once()
        assert isinstance(second.clock, FakeClock)
        second.clock.advance(1.0)
    assert len(engine.running("web")) == 2, "healing went on"
    assert not (tmp_path / "state" / MARKER).exists()


class NoUpdate(FakeEngine):
    """Podman 4.3: no endpoint to change a restart policy at all."""

    def __init__(self) -> None:
        super().__init__(allow=CALLS)
        self.attempts = 0

    def set_restart_policy(self, container_id: str, policy: str) -> None:
        self.attempts += 1
        raise Unsupported("the restart hand-off: not on Podman 4.3.1 (no /containers/ID/update)")


def test_an_engine_without_a_restart_policy_update_hands_off_nothing_and_heals_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Podman's 404 for the missing endpoint once passed for a container gone: the log
    said the containers were handed off, and the next start waited TAKE_BACK_TRIES
    looks for a take-back that could never be. Now: said once, no marker left."""
    engine = NoUpdate()
    first = daemon(tmp_path, engine)
    converge(first)
    first.controller.shutdown()
    caplog.set_level(logging.INFO, logger="healerd.handoff")
    first._hand_off()
    assert "containers not handed" in caplog.text and "handed 0" not in caplog.text
    assert caplog.text.count("not on Podman 4.3.1") == 1
    assert not (tmp_path / "state" / MARKER).exists()
    (victim, _) = engine.running("web")
    engine.kill(victim.id, exit_code=1)
    engine.attempts = 0
    second = daemon(tmp_path, engine)
    second.controller.enqueue_all(force=True)
    second.controller.process_once()
    assert engine.attempts == 0 and len(engine.running("web")) == 2


def test_no_hand_off_when_off_when_another_healerd_has_the_engine_or_before_a_look(
    tmp_path: Path,
) -> None:
    engine = FakeEngine(allow=CALLS)
    off = daemon(tmp_path, engine, handoff_on_stop=False)
    converge(off)
    off._hand_off()
    assert engine.policies == {}
    refused = daemon(tmp_path, engine)
    converge(refused)
    refused.exit_code = 3  # another healerd holds the engine: not this one's to hand off
    refused._hand_off()
    never_looked = daemon(tmp_path, engine)
    assert never_looked.controller.engine_ok is None
    never_looked._hand_off()
    assert engine.policies == {} and not (tmp_path / "state" / MARKER).exists()


def test_a_paused_or_crash_looping_service_is_left_to_healerd(tmp_path: Path) -> None:
    engine = FakeEngine(allow=CALLS)
    d = daemon(tmp_path, engine)
    converge(d)
    d.controller.pause("web")
    d._hand_off()
    assert engine.policies == {}
    engine = FakeEngine(FakeClock(), allow=CALLS)
    engine.crash_images.add("crash:1")
    looping = daemon(tmp_path / "b", engine)
    looping.controller.set_desired(
        DesiredState(
            services={"c": spec("c", 1, image="crash:1")},
            errors=(),
            hold_orphans=False,
            broken_files=(),
        )
    )
    looping.controller.enqueue_all(force=True)
    clock = looping.clock
    assert isinstance(clock, FakeClock)
    for _ in range(50):
        if not looping.controller.process_once():
            clock.advance(looping.controller.queue.next_delay() or 1.0)
        if {s.name: s.state for s in looping.controller.statuses()}["c"] == "CrashLoopBackOff":
            break
    assert {s.name: s.state for s in looping.controller.statuses()}["c"] == "CrashLoopBackOff"
    looping._hand_off()
    assert engine.policies == {}


def test_a_new_host_key_takes_back_every_container_it_trusts(tmp_path: Path) -> None:
    """apt purge removes /var/lib/healerd, marker and key; a reinstall's new key trusts
    the containers it finds, which may carry the last stop's hand-off."""
    engine = FakeEngine(allow=CALLS)
    first = daemon(tmp_path, engine)
    converge(first)
    first._hand_off()
    (tmp_path / "state" / MARKER).unlink()
    again = daemon(tmp_path, engine)
    again.handoff.take_back_all()
    converge(again)
    assert set(engine.policies.values()) == {"no"}
