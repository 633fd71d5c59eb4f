"""When an update may happen (issue 33): auto_update notify, update_delay, update_window,
update_lock, an operator's update now, pin, unpin and rollback, and what the status
says after. A FakeClock whose wall time the tests set: no sleeps."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from healerd.config.servicefile import parse_service_text
from healerd.config.updatedefaults import update_defaults
from healerd.config.updatekeys import UpdateDefaults, parse_window
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller
from healerd.core.persist import MemoryStore
from healerd.core.updates import UpdateRefused, pinned_ref
from healerd.core.updatewindows import next_open, window_open
from healerd.core.wiring import build_loop
from healerd.engine.api import HookRun
from healerd.model import Hook, ServiceSpec
from healerd.model.updatepolicy import UpdatePolicy
from healerd.vocabulary import AutoUpdate
from tests.unit.harness.fake_engine import FakeEngine
from tests.unit.harness.loop import drive
from tests.unit.harness.updates import TAG, V1, V2, V3, V4, desired, follower, images, make, reason

LOCK = "/run/lock/app.update"


def local(y: int, mo: int, d: int, h: int, mi: int = 0) -> float:
    return time.mktime((y, mo, d, h, mi, 0, 0, 0, -1))


SAT_3AM = local(2026, 12, 5, 3)  # a Saturday
FRI_NOON = local(2026, 12, 4, 12)


def at_wall(clock: FakeClock, wall: float) -> None:
    clock.wall_offset = wall - clock.now


def kinds(ctrl: Controller, kind: str) -> int:
    return sum(e.kind == kind for e in ctrl.events.since(0))


def started(**kw: Any) -> tuple[Controller, FakeEngine, FakeClock]:
    ctrl, engine, clock = make()
    ctrl.set_desired(desired(follower(**kw)))
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    return ctrl, engine, clock


def test_windows_are_read_in_local_time_and_may_cross_midnight() -> None:
    weekend = parse_window("Sat,Sun 02:00-05:00")
    assert window_open((weekend,), SAT_3AM) and not window_open((weekend,), FRI_NOON)
    assert not window_open((weekend,), local(2026, 12, 5, 5))  # the end is not in it
    night = parse_window("Mon-Fri 22:00-04:00")
    assert window_open((night,), local(2026, 12, 4, 23))  # Friday night
    assert window_open((night,), local(2026, 12, 5, 1))  # Saturday 01:00: Friday's night
    assert not window_open((night,), local(2026, 12, 6, 1))  # Sunday 01:00: no
    assert parse_window("Fri..Mon 00:00-24:00").days == frozenset({4, 5, 6, 0})
    assert next_open((weekend,), FRI_NOON) == local(2026, 12, 5, 2)
    assert window_open((), FRI_NOON) and window_open(None, FRI_NOON)
    for bad in ("Sat", "Caturday 01:00-02:00", "25:00-26:00", "03:00-03:00"):
        with pytest.raises(ValueError):
            parse_window(bad)


def parse(body: str) -> tuple[ServiceSpec | None, list[str]]:
    text = f"services:\n  app:\n    image: {TAG}\n    x-healerd:\n{body}"
    result = parse_service_text(text, "app.yaml", env={})
    return (result.services or {}).get("app"), [str(e) for e in result.errors]


def test_the_keys_are_read_with_file_line_and_field() -> None:
    s, errors = parse(
        "      auto_update: notify\n      update_window: [Sat 02:00-05:00, 'Sun 03:00-04:00']\n"
        "      update_delay: 24h\n      update_lock: /run/lock/app.update\n"
    )
    assert not errors and s is not None, errors
    assert s.auto_update is AutoUpdate.NOTIFY
    policy = s.update_policy
    assert policy.delay == 86400 and policy.lock == LOCK and len(policy.windows or ()) == 2
    _, errors = parse("      update_window: 'Sat 2am'\n      update_lock: relative/path\n")
    assert len(errors) == 2
    assert errors[0].startswith("app.yaml:5") and "x-healerd.update_window" in errors[0]
    assert "app.yaml:6" in errors[1] and "absolute path" in errors[1]


def test_healerd_yaml_defaults_apply_where_the_service_says_nothing() -> None:
    weekend = (parse_window("Sat,Sun 02:00-05:00"),)
    defaults = UpdateDefaults(AutoUpdate.NOTIFY, UpdatePolicy(weekend, 3600.0, ""))
    plain = follower(auto_update=AutoUpdate.NEVER)
    own = follower(auto_update=AutoUpdate.DISABLED, update_policy=UpdatePolicy(delay=60.0))
    own = dataclasses.replace(own, name="own")
    state = update_defaults(desired(plain, own), defaults)
    a, b = state.services["app"], state.services["own"]
    assert a.auto_update is AutoUpdate.NOTIFY and a.update_policy.windows == weekend
    assert b.auto_update is AutoUpdate.DISABLED and b.update_policy.delay == 60.0
    assert b.update_policy.windows == weekend


def test_notify_tells_once_and_rolls_nothing_until_the_operator_says_update() -> None:
    ctrl, engine, clock = started(auto_update=AutoUpdate.NOTIFY)
    engine.registry[TAG] = V2
    pulls = engine.calls.count("pull")
    assert ctrl.check_updates() == [] and ctrl.check_updates() == []
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2 and engine.calls.count("pull") == pulls
    assert kinds(ctrl, "image-update-available") == 1, "said once per digest"
    assert "moved to 222222222222" in reason(ctrl) and "healerctl update app" in reason(ctrl)
    ctrl.updates.allow("app")  # healerctl update app: now
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2


def test_update_check_only_looks_even_for_a_service_that_follows() -> None:
    ctrl, engine, _ = started()
    engine.registry[TAG] = V2
    ctrl.updates.allow("app", look=True)
    assert ctrl.check_updates() == []
    assert kinds(ctrl, "image-update-available") == 1
    assert ctrl.check_updates() == ["app"], "the next scheduled check rolls it out"


def test_a_digest_is_taken_only_after_the_delay_and_a_bad_push_fixed_meanwhile_never_runs() -> None:
    ctrl, engine, clock = started(update_policy=UpdatePolicy(delay=3600.0))
    engine.registry[TAG] = V2  # a bad push
    assert ctrl.check_updates() == []
    drive(ctrl, clock)
    assert "waits for update_delay" in reason(ctrl) and kinds(ctrl, "image-update-held") == 1
    clock.advance(1800)
    engine.registry[TAG] = V3  # fixed within the delay: the count starts again
    assert ctrl.check_updates() == []
    clock.advance(1800)
    assert ctrl.check_updates() == [], "V3 was seen only 30 minutes ago"
    clock.advance(1801)
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V3)] * 2
    assert engine.calls.count("pull") == 1, "V2 was never pulled"


def test_the_delays_count_survives_a_restart() -> None:
    store = MemoryStore()
    ctrl, engine, clock = make()
    ctrl.updates.use_store(store)
    spec = follower(update_policy=UpdatePolicy(delay=3600.0))
    ctrl.set_desired(desired(spec))
    drive(ctrl, clock)
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == []
    clock.advance(3601)
    again = build_loop(engine, clock, ctrl.parts.settings)
    again.updates.use_store(store)
    again.set_desired(desired(spec))
    drive(again, clock)
    assert again.check_updates() == ["app"]


def test_a_window_holds_an_update_and_healerctl_update_does_not_wait_for_it() -> None:
    weekend = (parse_window("Sat,Sun 02:00-05:00"),)
    ctrl, engine, clock = started(update_policy=UpdatePolicy(windows=weekend))
    at_wall(clock, FRI_NOON)
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == []
    drive(ctrl, clock)
    assert "waits for its update window (Sat,Sun 02:00-05:00); next opens Sat 02:00" in reason(ctrl)
    at_wall(clock, SAT_3AM)
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    at_wall(clock, FRI_NOON + 7 * 86400)
    engine.registry[TAG] = V3
    assert ctrl.check_updates() == []
    ctrl.updates.allow("app")
    assert ctrl.check_updates() == ["app"]


def test_a_rollback_never_waits_for_the_window() -> None:
    weekend = (parse_window("Sat 02:00-05:00"),)
    ctrl, engine, clock = started(update_policy=UpdatePolicy(windows=weekend))
    at_wall(clock, SAT_3AM)
    engine.crash_images.add(pinned_ref(TAG, V2))
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    at_wall(clock, SAT_3AM + 3 * 3600)  # the window closes while the trial runs
    drive(ctrl, clock)
    assert kinds(ctrl, "image-rollback") == 1
    assert images(engine) == [pinned_ref(TAG, V1)] * 2


def test_the_applications_lock_holds_the_update_until_it_is_gone_even_for_the_operator() -> None:
    ctrl, engine, clock = started(update_policy=UpdatePolicy(lock=LOCK))
    holder = min((c for c in engine.containers.values() if c.running), key=lambda c: c.name)
    engine.files[(holder.id, LOCK)] = SAT_3AM
    engine.registry[TAG] = V2
    ctrl.updates.allow("app")  # now: not past the lock
    assert ctrl.check_updates() == []
    drive(ctrl, clock)
    note = reason(ctrl)
    assert f"held by {holder.name}: {LOCK} exists there since Sat 03:00" in note, note
    del engine.files[(holder.id, LOCK)]
    assert ctrl.check_updates() == ["app"]


def test_a_lock_in_a_stopped_container_holds_nothing() -> None:
    ctrl, engine, _ = started(update_policy=UpdatePolicy(lock=LOCK))
    holder = min((c for c in engine.containers.values() if c.running), key=lambda c: c.name)
    engine.files[(holder.id, LOCK)] = SAT_3AM
    engine.kill(holder.id, exit_code=137)  # a stale lock: its holder is gone
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]


def test_pre_update_hooks_postpone_the_update() -> None:
    ctrl, engine, clock = started()
    answers = ["exited with code 3: backup running", ""]
    ctrl.updates.use_pre_update(lambda spec: answers.pop(0))
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == []
    drive(ctrl, clock)
    assert "postponed by pre_update (exited with code 3: backup running)" in reason(ctrl)
    assert ctrl.check_updates() == ["app"], "tried again at the next check"


def test_the_services_own_pre_update_hooks_run_in_its_oldest_container() -> None:
    backup = Hook(command=("backup", "--quick"))
    ctrl, engine, clock = started(pre_update=(backup,))
    engine.hook_answers["backup"] = HookRun(3, "a backup is running")
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == []
    drive(ctrl, clock)
    assert "postponed by pre_update" in reason(ctrl) and "3" in reason(ctrl)
    oldest = min(
        (c for c in engine.containers.values() if c.running), key=lambda c: (c.created, c.name)
    )
    assert engine.hooks_run[-1][:2] == (oldest.id, backup)
    del engine.hook_answers["backup"]
    assert ctrl.check_updates() == ["app"]


def test_a_pin_holds_the_service_on_its_digest_until_unpin() -> None:
    store = MemoryStore()
    ctrl, engine, clock = make()
    ctrl.updates.use_store(store)
    ctrl.set_desired(desired(follower()))
    drive(ctrl, clock)
    ctrl.updates.set_pin("app", TAG, V3)
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V3)] * 2
    engine.registry[TAG] = V4
    assert ctrl.check_updates() == [] and engine.calls.count("registry_digest") == 0
    assert "pinned to 333333333333" in reason(ctrl)
    # A restart keeps the pin.
    again = build_loop(engine, clock, ctrl.parts.settings)
    again.updates.use_store(store)
    again.set_desired(desired(follower()))
    drive(again, clock)
    assert again.check_updates() == [] and again.updates.pinned("app") == V3
    again.updates.set_pin("app", TAG, "")
    assert again.check_updates() == ["app"]
    drive(again, clock)
    assert images(engine) == [pinned_ref(TAG, V4)] * 2
    assert kinds(ctrl, "image-pinned") == 1 and kinds(again, "image-unpinned") == 1


def test_rollback_goes_back_to_the_digest_before_and_says_so_when_converged() -> None:
    ctrl, engine, clock = started()
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V2)] * 2
    said = ctrl.updates.rollback_now("app")
    assert "rolled back to 111111111111 by healerctl rollback" in said
    drive(ctrl, clock)
    assert images(engine) == [pinned_ref(TAG, V1)] * 2
    assert ctrl.check_updates() == [], "the digest rolled back from is not tried again"
    assert "rolled back to 111111111111" in reason(ctrl)
    assert [h.what for h in ctrl.updates.history("app")] == ["updated", "rolled back"]
    clock.advance(25 * 3600)  # a day later (a resync's pass) the status no longer says it
    ctrl.reconcile_now("app")
    drive(ctrl, clock)
    assert "rolled back" not in reason(ctrl)


def test_an_automatic_rollback_is_on_the_converged_status_line() -> None:
    ctrl, engine, clock = started()
    engine.crash_images.add(pinned_ref(TAG, V2))
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
    drive(ctrl, clock)
    said = ctrl.updates.said("app")
    assert said is not None and said.text.startswith("rolled back to 111111111111: 222222222222")
    assert "exited with code" in said.text


def test_rollback_without_an_earlier_digest_is_refused() -> None:
    ctrl, _, _ = started()
    with pytest.raises(UpdateRefused, match="ran no digest before"):
        ctrl.updates.rollback_now("app")


def test_the_operators_update_now_outlives_a_check_the_lock_held() -> None:
    weekend = (parse_window("Sat 02:00-05:00"),)
    ctrl, engine, clock = started(update_policy=UpdatePolicy(windows=weekend, lock=LOCK))
    at_wall(clock, FRI_NOON)
    holder = min((c for c in engine.containers.values() if c.running), key=lambda c: c.name)
    engine.files[(holder.id, LOCK)] = FRI_NOON
    engine.registry[TAG] = V2
    ctrl.updates.allow("app")  # healerctl update app: now, not past the lock
    assert ctrl.check_updates() == []
    del engine.files[(holder.id, LOCK)]
    assert ctrl.check_updates() == ["app"], "still now: the window closed does not matter"


def test_a_lock_file_older_than_the_containers_run_is_stale() -> None:
    ctrl, engine, _ = started(update_policy=UpdatePolicy(lock=LOCK))
    holder = min((c for c in engine.containers.values() if c.running), key=lambda c: c.name)
    engine.containers[holder.id] = dataclasses.replace(holder, started=SAT_3AM)
    engine.files[(holder.id, LOCK)] = SAT_3AM - 3600  # left by the run before a restart
    engine.registry[TAG] = V2
    assert ctrl.check_updates() == ["app"]
