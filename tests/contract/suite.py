"""The engine contract: one set of behaviour tests that every engine adapter passes, the
unit tests' FakeEngine among them, so that the fake the loop's tests run on behaves as
the real engine does, and a second engine is one more harness (harness.py).

`EngineContract` is not collected itself (its name does not start with Test): a test
module subclasses it with a `harness` fixture.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import pytest

from healerd.core.postmortem import rfc3339
from healerd.engine import CannotRestart, EngineError, NameConflict
from healerd.model import (
    LABEL_SERVICE,
    ContainerState,
    EngineAction,
    EngineEvent,
    Health,
    HealthcheckSpec,
    Hook,
    ObservedContainer,
    ServiceSpec,
    VolumeSpec,
)
from tests.contract.harness import Harness, created, listed


class _Owner:
    """An owner that calls only its own containers its own, and marks them."""

    def mine(self, listed: list[ObservedContainer], service: str | None) -> list[ObservedContainer]:
        return [c for c in listed if (_MARK, "yes") in c.owner_labels]

    def labels(self, spec: ServiceSpec, name: str, given: Mapping[str, str]) -> dict[str, str]:
        return {**given, _MARK: "yes"}


_MARK = "io.healerd.contract-owner"
# A container no engine ever made.
NEVER = ObservedContainer("0" * 64, "never-made", "x", "", ContainerState.EXITED, 0.0)


class EngineContract:
    # -- containers ----------------------------------------------------------------------

    def test_remove_is_idempotent(self, harness: Harness) -> None:
        c = created(harness, harness.spec("rm"))
        harness.engine.remove(c, 1)
        assert listed(harness.engine, c.id) is None
        harness.engine.remove(c, 1)  # gone already: success
        harness.engine.remove(NEVER, 1)

    def test_start_of_a_running_container_is_success(self, harness: Harness) -> None:
        c = created(harness, harness.spec("again"))
        harness.engine.start(c)
        now = listed(harness.engine, c.id)
        assert now is not None and now.state is ContainerState.RUNNING

    def test_stop_unpauses_first_and_keeps_the_container(self, harness: Harness) -> None:
        c = created(harness, harness.spec("paused"))
        harness.pause(c.id)
        paused = harness.eventually("listed paused", lambda: in_state(harness, c.id, "paused"))
        assert paused is not None
        harness.engine.stop(paused, 1)
        stopped = listed(harness.engine, c.id)
        assert stopped is not None and stopped.state is ContainerState.EXITED
        harness.engine.remove(stopped, 1)
        harness.engine.stop(stopped, 1)  # gone: success

    def test_a_taken_name_is_a_name_conflict(self, harness: Harness) -> None:
        spec = harness.spec("named")
        first = created(harness, spec, f"{spec.name}-a")
        with pytest.raises(NameConflict):
            harness.engine.create_and_start(spec, first.name, {})
        second = created(harness, spec, f"{spec.name}-b")
        with pytest.raises(NameConflict):
            harness.engine.rename(second, first.name)
        harness.engine.rename(second, f"{spec.name}-c")
        renamed = listed(harness.engine, second.id)
        assert renamed is not None and renamed.name == f"{spec.name}-c"

    def test_the_list_is_scoped_by_healerds_labels(self, harness: Harness) -> None:
        a, b = harness.spec("scope-a"), harness.spec("scope-b")
        ca, cb = created(harness, a), created(harness, b)
        foreign = harness.foreign()
        everything = {c.id: c for c in harness.engine.list_managed()}
        assert {ca.id, cb.id} <= set(everything) and foreign not in everything
        assert [c.id for c in harness.engine.list_managed(a.name)] == [ca.id]
        assert everything[ca.id].service == a.name and everything[ca.id].running
        assert (LABEL_SERVICE, a.name) in everything[ca.id].owner_labels

    def test_the_owner_sees_only_the_list_and_the_creates(self, harness: Harness) -> None:
        before = created(harness, harness.spec("unowned"))
        harness.engine.owner = _Owner()
        mine = created(harness, harness.spec("owned"))
        ids = [c.id for c in harness.engine.list_managed()]
        assert mine.id in ids and before.id not in ids

    def test_health_comes_from_the_list(self, harness: Harness) -> None:
        def checked(test: str) -> HealthcheckSpec:
            return HealthcheckSpec(test=("CMD", test), interval=0.5, timeout=2.0, retries=1)

        if not harness.reports_health:
            # Refused before anything is made, naming the key: no health that never comes.
            spec = harness.spec("unhealthchecked", healthcheck=checked("true"))
            with pytest.raises(EngineError, match="healthcheck: not on Podman"):
                harness.engine.create_and_start(spec, f"{spec.name}-1", {})
            assert [c for c in harness.engine.list_managed() if c.service == spec.name] == []
            return

        good = created(harness, harness.spec("healthy", healthcheck=checked("true")))
        bad = created(harness, harness.spec("sick", healthcheck=checked("false")))
        plain = created(harness, harness.spec("plain"))
        assert good.health is Health.STARTING and plain.health is None
        harness.run_health_checks()

        def health(cid: str) -> Health | None:
            c = listed(harness.engine, cid)
            return c.health if c is not None else None

        harness.eventually("healthy", lambda: health(good.id) is Health.HEALTHY)
        harness.eventually("unhealthy", lambda: health(bad.id) is Health.UNHEALTHY)
        assert health(plain.id) is None

    def test_a_start_whose_network_is_gone_is_cannot_restart(self, harness: Harness) -> None:
        spec = harness.network_spec("netgone")
        c = created(harness, spec)
        harness.engine.stop(c, 1)
        if harness.remove_network(spec, c.id):
            with pytest.raises(CannotRestart) as info:
                harness.engine.start(c)
            assert not info.value.gone
        # A container removed from outside cannot be started either: gone.
        harness.remove_outside(c.id)
        with pytest.raises(CannotRestart) as gone:
            harness.engine.start(c)
        assert gone.value.gone

    def test_a_create_whose_start_fails_leaves_nothing(self, harness: Harness) -> None:
        anonymous = (VolumeSpec("", "/data"),)
        spec = harness.failing_start(harness.spec("nostart", volumes=anonymous))
        volumes = harness.volumes()
        with pytest.raises(EngineError):
            harness.engine.create_and_start(spec, f"{spec.name}-1", {})
        assert [c for c in harness.engine.list_managed() if c.service == spec.name] == []
        assert harness.volumes() == volumes

    def test_remove_takes_the_anonymous_volumes(self, harness: Harness) -> None:
        c = created(harness, harness.spec("vols", volumes=(VolumeSpec("", "/data"),)))
        (volume,) = [v for v, _ in c.anon_volumes]
        assert volume in harness.volumes()
        harness.engine.remove(c, 1)
        assert volume not in harness.volumes()

    def test_volume_path_is_the_host_directory_of_a_volume(self, harness: Harness) -> None:
        c = created(harness, harness.spec("volpath", volumes=(VolumeSpec("", "/data"),)))
        (volume,) = [v for v, _ in c.anon_volumes]
        path = harness.engine.volume_path(volume)
        assert path.startswith("/") and volume in path
        with pytest.raises(EngineError, match="no such volume"):
            harness.engine.volume_path("healerd-contract-no-such-volume")

    # -- what an operator reads ------------------------------------------------------------

    def test_logs_with_tail_since_and_until(self, harness: Harness) -> None:
        c = created(harness, harness.spec("said"))
        harness.say(c.id, "one")
        harness.eventually("one", lambda: b"one" in harness.engine.logs(c.id, None, None).read())
        harness.later()
        middle = harness.now()
        harness.later()
        harness.say(c.id, "two")
        harness.say(c.id, "three")
        harness.eventually("three", lambda: b"three" in harness.engine.logs(c.id, 1, None).read())

        def logs(tail: int | None, since: float | None, until: float | None) -> list[str]:
            return harness.engine.logs(c.id, tail, since, until).read().decode().split()

        assert logs(None, None, None) == ["one", "two", "three"]
        assert logs(2, None, None) == ["two", "three"]
        assert logs(None, middle, None) == ["two", "three"]
        assert logs(None, None, middle) == ["one"]
        assert logs(1, None, middle) == []  # the tail first, then the time: as json-file
        assert logs(0, None, None) == []

    def test_death_says_how_a_run_ended_and_when_it_began(self, harness: Harness) -> None:
        c = created(harness, harness.spec("died"))
        first = harness.engine.death(c.id)
        assert first.exit_code is None and first.finished_at == "" and not first.ran_before
        assert first.started_at and not first.started_at.startswith("0001")
        harness.kill(c.id)
        dead = harness.eventually("listed exited", lambda: in_state(harness, c.id, "exited"))
        assert dead is not None
        death = harness.engine.death(c.id)
        assert death.exit_code == 137 and not death.oom_killed and death.finished_at
        assert dead.exit_code == 137  # the list says it too
        harness.later()
        harness.engine.start(dead)
        again = harness.engine.death(c.id)
        assert again.exit_code is None and again.ran_before
        assert (rfc3339(again.started_at) or 0) > (rfc3339(first.started_at) or 0)

    def test_a_hook_runs_in_a_running_container_only(self, harness: Harness) -> None:
        c = created(harness, harness.spec("hooked"))
        run = harness.engine.exec_hook(c.id, Hook(("true",), environment=(("A", "b"),)), 10)
        assert (run.exit_code, run.ok) == (0, True)
        harness.kill(c.id)
        dead = harness.eventually("listed exited", lambda: in_state(harness, c.id, "exited"))
        assert dead is not None
        with pytest.raises(EngineError):
            harness.engine.exec_hook(c.id, Hook(("true",)), 10)
        harness.engine.remove(dead, 1)
        with pytest.raises(EngineError):
            harness.engine.exec_hook(c.id, Hook(("true",)), 10)

    # -- events ------------------------------------------------------------------------------

    def test_events_are_engine_actions(self, harness: Harness) -> None:
        seen: list[EngineEvent] = []
        connected = threading.Event()
        raised: list[BaseException] = []

        def watch() -> None:
            try:
                harness.engine.watch(seen.append, connected.set)
            except BaseException as exc:  # the test says which, below
                raised.append(exc)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            assert connected.wait(10), "the stream did not connect"
            c = created(harness, harness.spec("events"))
            harness.kill(c.id)
            harness.eventually("its death", lambda: EngineAction.DIED in actions(seen, c.id))
            harness.engine.remove(c, 1)
            harness.eventually("destroyed", lambda: EngineAction.DESTROYED in actions(seen, c.id))
        finally:
            harness.engine.stop_watch()
            watcher.join(10)
        assert not watcher.is_alive(), "stop_watch did not end the stream"
        assert raised == [], "after stop_watch, watch returns: it does not raise"
        mine = [e for e in seen if e.container_id == c.id]
        assert all(isinstance(e.action, EngineAction) and e.service == c.service for e in mine)
        assert [a for a in actions(seen, c.id) if a is not EngineAction.HEALTH] == [
            EngineAction.CREATED,
            EngineAction.STARTED,
            EngineAction.KILLED,
            EngineAction.DIED,
            EngineAction.DESTROYED,
        ]
        kill = next(e for e in mine if e.action is EngineAction.KILLED)
        die = next(e for e in mine if e.action is EngineAction.DIED)
        assert kill.signal == (9 if harness.kill_signals else None)
        assert die.exit_code == 137 and die.name == c.name


def in_state(h: Harness, container_id: str, state: str) -> ObservedContainer | None:
    c = listed(h.engine, container_id)
    return c if c is not None and c.state is ContainerState(state) else None


def actions(events: list[EngineEvent], container_id: str) -> list[EngineAction]:
    return [e.action for e in list(events) if e.container_id == container_id]
