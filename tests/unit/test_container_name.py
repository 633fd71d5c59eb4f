"""Compose's container_name (issue 16): one replica with a fixed name, taken over by each
replacement (renamed aside, new one created, old one removed), never from a container
healerd does not replace."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from healerd.config import parse_service_text
from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.executor import Executor
from healerd.core.planner import PlanContext, plan
from healerd.core.signing import HostKey, Signer, aside_of, sign
from healerd.core.timings import Timings
from healerd.core.wiring import build_loop
from healerd.model import (
    Action,
    ActionKind,
    ContainerState,
    EngineAction,
    EngineEvent,
    ObservedContainer,
    UpdateConfig,
    UpdateOrder,
)
from tests.unit.harness.builders import container, spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine
from tests.unit.harness.loop import desired, drive, make

START_FIRST = UpdateOrder.START_FIRST


def _errors(body: str) -> list[str]:
    text = "services:\n" + textwrap.indent(textwrap.dedent(body), "  ")
    return [str(e) for e in parse_service_text(text, "n.yaml", env={}).errors]


def test_the_file_side() -> None:
    ok = parse_service_text(
        "services:\n  mqtt: {image: busybox, container_name: mosquitto}\n", "n.yaml", env={}
    )
    assert ok.errors == () and ok.services is not None
    assert ok.services["mqtt"].container_name == "mosquitto"
    assert _errors("a: {image: busybox, container_name: -x}\n") == [
        "n.yaml:2:23: services.a.container_name: '-x' is not a container name "
        "([a-zA-Z0-9][a-zA-Z0-9_.-]+, <= 128)"
    ]
    found = _errors("a: {image: busybox, container_name: x1, replicas: 2}\n")
    assert len(found) == 1 and "names one container, but replicas is 2" in found[0]
    found = _errors("a: {image: b, container_name: x1}\nb: {image: b, container_name: x1}\n")
    assert found == ["n.yaml:3:17: services.b.container_name: 'x1' is also service 'a''s "
                     "container_name"]  # fmt: skip


def test_a_heal_keeps_the_name_in_place() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("mqtt", 1, container_name="mosquitto")))
    drive(ctrl, clock)
    (c,) = engine.running("mqtt")
    assert c.name == "mosquitto"
    engine.kill(c.id, exit_code=1)
    ctrl.reconcile_now("mqtt")
    drive(ctrl, clock, max_seconds=60)
    (again,) = engine.running("mqtt")
    assert again.name == "mosquitto" and again.id == c.id
    assert engine.calls.count("rename") == 0 and engine.calls.count("create") == 1


def test_a_replacement_keeps_the_name_and_removes_the_failed_one() -> None:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(spec("mqtt", 1, container_name="mosquitto")))
    drive(ctrl, clock)
    (c,) = engine.running("mqtt")
    engine.kill(c.id, exit_code=1)
    engine.unstartable[c.id] = "network 9cb4 not found"  # only a new container heals it
    ctrl.reconcile_now("mqtt")
    drive(ctrl, clock, max_seconds=60)
    (new,) = engine.running("mqtt")
    assert new.name == "mosquitto" and new.id != c.id and new.restarts == 1
    assert c.id not in engine.containers  # no history under a fixed name
    assert engine.calls.count("rename") == 1


def test_a_failed_create_gives_the_old_one_its_name_back() -> None:
    _, engine, _ = make()
    s = spec("mqtt", 1, container_name="mosquitto")
    ex = Executor(engine, 1)
    (made,) = ex.apply([Action(ActionKind.CREATE, "mqtt", "1 wanted", spec=s)])
    old = engine.containers[made.container_id or ""]
    engine.kill(old.id, exit_code=1)
    engine.fail_creates = 1
    (res,) = ex.apply([Action(ActionKind.CREATE, "mqtt", "replace", spec=s, container=old)])
    assert not res.ok
    assert engine.containers[old.id].name == "mosquitto"


def test_a_name_held_by_a_container_it_does_not_replace_is_an_error() -> None:
    _, engine, _ = make()
    s = spec("mqtt", 1, container_name="mosquitto")
    ex = Executor(engine, 1)
    (first,) = ex.apply([Action(ActionKind.CREATE, "mqtt", "1 wanted", spec=s)])
    (res,) = ex.apply([Action(ActionKind.CREATE, "mqtt", "1 wanted", spec=s)])
    assert res.error is not None and "container_name 'mosquitto' is taken" in res.error
    assert engine.containers[first.container_id or ""].name == "mosquitto"


def test_a_rollout_of_a_fixed_name_is_stop_first() -> None:
    s = spec("mqtt", 1, container_name="mosquitto", update_config=UpdateConfig(order=START_FIRST))
    old = container(dataclasses.replace(s, image="img:0"))
    p = plan("mqtt", s, [old], PlanContext(now=1000.0))
    assert [a.kind for a in p.actions] == [ActionKind.REMOVE]
    assert old.state is ContainerState.RUNNING


class _LostAfterRename(FakeEngine):
    """The engine goes away right after a rename (restarted mid-heal)."""

    drop_after_rename = False

    def rename(self, container: ObservedContainer, name: str) -> None:
        super().rename(container, name)
        if self.drop_after_rename:
            self.down, self.drop_after_rename = True, False


def _signed_loop(engine: FakeEngine, clock: FakeClock) -> tuple[Controller, Signer]:
    key = HostKey(b"s" * 32, born=clock.time())
    signer = sign(engine, key, clock.time, lambda _u: None)
    settings = LoopSettings(workers=1, timings=Timings(backoff=Backoff(0.5, 8.0)))
    return build_loop(engine, clock, settings, name_tag=key.name_tag), signer


@pytest.mark.parametrize("startable", [False, True])
def test_a_replacement_the_engine_cut_short_after_the_rename_aside_keeps_the_data(
    startable: bool,
) -> None:
    """Review: renamed aside (the signature covers the name), the old container no longer
    verified once the engine went away before the rename back: left for ever, and its
    replacement made on new volumes (the data cut off). It is healerd's still now: replaced
    on its volumes and removed, or, when it can start, started under its name again."""
    clock = FakeClock(start=1010.0)
    engine = _LostAfterRename(clock, allow=LOOP_CALLS)
    engine.image_volumes = True  # VOLUME /data, as postgres or mosquitto declare
    ctrl, signer = _signed_loop(engine, clock)
    ctrl.set_desired(desired(spec("mqtt", 1, container_name="mosquitto")))
    drive(ctrl, clock)
    (old,) = engine.running("mqtt")
    engine.kill(old.id, exit_code=1)
    engine.unstartable[old.id] = "network 9cb4 not found"  # only a new one heals it
    engine.drop_after_rename = True
    ctrl.on_event(EngineEvent("mqtt", old.id, EngineAction.DIED, exit_code=1, name=old.name))
    ctrl.process_once()
    assert engine.containers[old.id].name == f"mosquitto-replaced-{old.id[:12]}"
    engine.down = False
    if startable:
        del engine.unstartable[old.id]
    ctrl.enqueue_all()
    drive(ctrl, clock, max_seconds=60)
    (now,) = engine.running("mqtt")
    assert now.name == "mosquitto" and now.anon_volumes == old.anon_volumes
    assert list(engine.containers) == [now.id] and (now.id == old.id) is startable
    assert signer.unverified() == []


def test_only_the_own_id_makes_a_name_aside() -> None:
    c = dataclasses.replace(container(spec("mqtt", 1)), id="0123456789abcdef")
    assert aside_of(dataclasses.replace(c, name="mosquitto-replaced-0123456789ab")) == "mosquitto"
    for name in ("mosquitto-replaced-ffffffffffff", "-replaced-0123456789ab", "mosquitto"):
        assert aside_of(dataclasses.replace(c, name=name)) == ""


def test_a_copy_renamed_as_if_aside_does_not_verify_beside_its_original() -> None:
    """Review: a copy of a healerd container (its labels and image), renamed to
    `<original name>-replaced-<the copy's own id12>`, verified beside its original. A
    name aside proves a rename cut short only while nothing holds that name."""
    from healerd.model import LABEL_IMAGE

    key = HostKey(b"k" * 32, born=0.0)
    signer = Signer(key, lambda: 100.0)
    s = spec("web", 2)  # generated names, no container_name
    orig = dataclasses.replace(container(s), name="proj-web-1-ab12c", image="img:1", created=50.0)
    labels = signer.labels(s, orig.name, {LABEL_IMAGE: "img:1"})
    orig = dataclasses.replace(orig, owner_labels=tuple(sorted(labels.items())))
    copy_id = "f" * 64
    copy = dataclasses.replace(
        orig, id=copy_id, name=f"proj-web-1-ab12c-replaced-{copy_id[:12]}", created=60.0
    )
    assert key.verifies(orig)
    mine = signer.mine([orig, copy], "web")
    assert [c.id for c in mine] == [orig.id], "the copy is counted as healerd's"
    assert [u.id for u in signer.unverified()] == [copy_id]
    assert "a copy of proj-web-1-ab12c" in signer.unverified()[0].why
    assert [c.id for c in signer.mine([copy], "web")] == [copy_id], "alone: a rename cut short"
