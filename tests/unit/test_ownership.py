"""Ownership that cannot be borrowed (issue 15, findings 7 and 8): the signature, the
trust on first use of older containers, and the loop over a signed engine."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import stat
from pathlib import Path

import pytest

from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.signing import HostKey, Signer, Unverified, sign
from healerd.core.timings import Timings
from healerd.core.wiring import build_loop
from healerd.daemon.hostkey import KEY_FILE, HostKeyError, load_or_create
from healerd.model import (
    LABEL_IMAGE,
    LABEL_RESTARTS,
    LABEL_SERVICE,
    LABEL_SIGNATURE,
    LABEL_SPEC_HASH,
    SIGNED_LABELS,
    ContainerState,
    EngineAction,
    EngineEvent,
    ObservedContainer,
)
from tests.unit.harness.builders import KEY, container, signed, spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine
from tests.unit.harness.loop import desired, drive


def test_a_signed_container_verifies_and_its_copies_do_not() -> None:
    s = spec("web")
    c = signed(container(s, created=2e9))
    assert KEY.trusts(c)
    # docker commit + run, or labels copied by hand: same labels, another name.
    assert not KEY.trusts(dataclasses.replace(c, name="web-copy"))
    # A label changed (a crash streak reset by hand, another service): no longer its own.
    labels = dict(c.owner_labels) | {LABEL_RESTARTS: "0"}
    assert not KEY.trusts(dataclasses.replace(c, owner_labels=tuple(sorted(labels.items()))))
    # Another host's key (or none at all).
    assert not HostKey(b"x" * 32, KEY.born).trusts(c)
    assert not KEY.trusts(dataclasses.replace(c, owner_labels=()))
    # An io.healerd.* label healerd does not act on (an image's) changes nothing.
    labels = dict(c.owner_labels) | {"io.healerd.note": "from an image"}
    assert KEY.trusts(dataclasses.replace(c, owner_labels=tuple(sorted(labels.items()))))


def test_containers_older_than_the_key_are_trusted_as_they_are() -> None:
    """An upgrade from a healerd without signatures (or a lost key): what existed before
    the key is recognised once, with no churn; an unsigned one made after it is not."""
    s = spec("web")
    assert KEY.trusts(container(s, created=KEY.born - 10))
    assert not KEY.trusts(container(s, created=KEY.born + 10))
    # The engine gives whole seconds: one made in the key's own second must verify.
    assert not KEY.trusts(container(s, created=float(int(KEY.born))))


def test_the_name_shows_the_spec_hash_only_salted_with_the_key() -> None:
    s = spec("web")
    tag = KEY.name_tag(s.spec_hash)
    assert len(tag) == 5 and tag != s.spec_hash[:5]
    assert tag == KEY.name_tag(s.spec_hash) != HostKey(b"x" * 32).name_tag(s.spec_hash)
    assert "k" * 8 not in repr(KEY)


def make(clock: FakeClock) -> tuple[Controller, FakeEngine, Signer, list[Unverified]]:
    engine = FakeEngine(clock, allow=LOOP_CALLS)
    told: list[Unverified] = []
    key = HostKey(b"s" * 32, born=clock.time())
    signer = sign(engine, key, clock.time, told.append)
    settings = LoopSettings(
        workers=1, parallel_actions=2, timings=Timings(backoff=Backoff(0.5, 8.0))
    )
    ctrl = build_loop(engine, clock, settings, name_tag=key.name_tag)
    return ctrl, engine, signer, told


def forge(engine: FakeEngine, like: ObservedContainer, name: str, **changes: object) -> str:
    """A container with `like`'s labels, signature and all, under another name."""
    cid = f"forged-{name}"
    engine.containers[cid] = dataclasses.replace(like, id=cid, name=name, **changes)  # type: ignore[arg-type]
    return cid


def test_the_loop_signs_what_it_makes_and_leaves_forged_containers_alone() -> None:
    clock = FakeClock()
    clock.now += 10  # the key's second is over
    ctrl, engine, signer, told = make(clock)
    web = spec("web", 2)
    ctrl.set_desired(desired(web))
    drive(ctrl, clock)
    real = engine.running("web")
    assert len(real) == 2 and all(signer.key.verifies(c) for c in real)
    assert all(c.name.split("-")[1] == signer.key.name_tag(web.spec_hash) for c in real)
    # Copies of a real one (docker commit), running, and a made-up one of an undeclared
    # service: none counts, none is touched.
    copy = forge(engine, real[0], "web-copy")
    ghost = forge(engine, real[0], "ghost-1", service="ghost", owner_labels=())
    engine.kill(real[0].id, exit_code=137)
    ctrl.on_event(EngineEvent("web", real[0].id, EngineAction.DIED))
    engine.calls.clear()
    drive(ctrl, clock)
    # A forged copy is no replica: the real one is started again in place.
    assert engine.calls.count("start") == 1 and engine.containers[real[0].id].running
    assert engine.containers[copy].state is ContainerState.RUNNING
    assert engine.containers[ghost].state is ContainerState.RUNNING
    assert len([c for c in engine.running("web") if signer.key.verifies(c)]) == 2
    # web's heal listed web alone; the next full look (the resync) sees the ghost too.
    assert sorted(u.name for u in told) == ["web-copy"]
    ctrl.enqueue_all()
    drive(ctrl, clock)
    # Told once each, however many passes saw them; and listed for healerctl status.
    assert sorted(u.name for u in told) == ["ghost-1", "web-copy"]
    assert {u.name: u.why.split(",")[0] for u in signer.unverified()} == {
        "ghost-1": "no signature",
        "web-copy": "signature does not verify (labels copied",
    }
    engine.containers.pop(copy)
    ctrl.reconcile_now("web")
    drive(ctrl, clock)
    assert [u.name for u in signer.unverified()] == ["ghost-1"]


def test_an_upgrade_adopts_the_old_containers_without_churn() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS)
    web = spec("web", 2)
    # Made by a healerd without signatures, a while ago.
    old = [container(web, created=clock.time() - 3600) for _ in range(2)]
    engine.containers.update((c.id, c) for c in old)
    clock.now += 60
    key = HostKey(b"s" * 32, born=clock.time())
    sign(engine, key, clock.time)
    ctrl = build_loop(
        engine, clock, LoopSettings(workers=1, parallel_actions=2), name_tag=key.name_tag
    )
    ctrl.set_desired(desired(web))
    drive(ctrl, clock)
    assert "create" not in engine.calls and "remove" not in engine.calls
    assert sorted(c.id for c in engine.running("web")) == sorted(c.id for c in old)


def v1_signed(c: ObservedContainer, key: HostKey) -> ObservedContainer:
    """As a healerd before issue 29 signed: no image label, the v1 message."""
    own = {LABEL_SERVICE: c.service, LABEL_SPEC_HASH: c.spec_hash}
    values = [own.get(k, "") for k in SIGNED_LABELS if k != LABEL_IMAGE]
    message = json.dumps([c.name, values], separators=(",", ":")).encode()
    mac = hmac.new(key.secret, b"owner-v1\0" + message, hashlib.sha256).hexdigest()
    return dataclasses.replace(c, owner_labels=tuple(sorted({**own, LABEL_SIGNATURE: mac}.items())))


def test_labels_replayed_on_a_container_of_another_image_do_not_verify() -> None:
    """Issue 29, L7: the signature covered the name and labels only, so a removed
    container's name and labels, on a new container of any image, verified."""
    clock = FakeClock()
    inner = eng = FakeEngine(clock, allow=LOOP_CALLS)
    key = HostKey(b"k" * 32, born=1.0)
    sign(eng, key, clock.time)
    s = spec("web", 1, "nginx:1")
    counts = {LABEL_RESTARTS: "0", "io.healerd.crash-streak": "0"}  # as the executor sets
    real = inner.containers[eng.create_and_start(s, "web-abcde-12345", counts)]
    assert dict(real.owner_labels)[LABEL_IMAGE] == "nginx:1" and key.verifies(real)
    replayed = dataclasses.replace(real, id="f" * 64, image="attacker/backdoor:1")
    assert not key.verifies(replayed)
    assert key.why_not(replayed).startswith("its image is not the one it was signed with")
    # The engine's own spellings of the same reference verify.
    for same in ("docker.io/library/nginx:1", "nginx:1"):
        assert key.verifies(dataclasses.replace(real, image=same))
    # Podman's spelling of a local image.
    assert key.verifies(dataclasses.replace(real, image="localhost/nginx:1"))
    assert not key.verifies(dataclasses.replace(real, image="nginx:2"))
    # The tag moved (or the image went): Docker lists the image ID, which the signature
    # cannot be held to (see the module's limits).
    assert key.verifies(dataclasses.replace(real, image="sha256:" + "a" * 64))
    pinned = spec("pin", 1, "nginx:1@sha256:" + "b" * 64)
    pin = inner.containers[eng.create_and_start(pinned, "pin-abcde-12345", counts)]
    assert key.verifies(pin)
    assert key.verifies(dataclasses.replace(pin, image="nginx@sha256:" + "b" * 64))
    assert not key.verifies(dataclasses.replace(pin, image="nginx:1@sha256:" + "c" * 64))


def test_an_older_healerds_signatures_count_only_for_containers_made_before_the_upgrade() -> None:
    key = HostKey(b"k" * 32, born=100.0, v1_until=5000.0)
    s = spec("web")
    before = v1_signed(container(s, created=4000.0), key)
    assert key.verifies(before), "signed by the healerd before the upgrade: still healerd's"
    after = v1_signed(container(s, created=5000.0), key)  # a v1 replay made since
    assert not key.verifies(after)
    assert key.why_not(after).startswith("an older healerd's signature")
    assert not HostKey(b"k" * 32, born=100.0).verifies(before), "a new key: v1 never counts"


# -- the key file ------------------------------------------------------------------------------


def test_the_key_is_made_once_root_only_and_kept(tmp_path: Path) -> None:
    state = tmp_path / "state"
    key = load_or_create(state, 1234.5)
    assert key.born == key.v1_until == 1234.5 and len(key.secret) == 32
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / KEY_FILE).stat().st_mode) == 0o600
    assert load_or_create(state, 9999.0) == key, "a restart keeps the key and its birth"
    assert [p.name for p in state.iterdir()] == [KEY_FILE]


def test_a_key_others_may_read_or_write_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    load_or_create(state, 1.0)
    os.chmod(state / KEY_FILE, 0o644)
    with pytest.raises(HostKeyError, match="may be read by others"):
        load_or_create(state, 2.0)
    os.chmod(state / KEY_FILE, 0o622)
    with pytest.raises(HostKeyError, match="refused"):
        load_or_create(state, 2.0)
    os.chmod(state / KEY_FILE, 0o600)
    os.chown(state / KEY_FILE, 65534, 65534)
    with pytest.raises(HostKeyError, match="refused"):
        load_or_create(state, 2.0)


def test_an_older_key_file_gets_its_upgrade_time_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    old = {"key": "ab" * 32, "born": 100.0}  # as a healerd before issue 29 wrote it
    (state / KEY_FILE).write_text(json.dumps(old))
    os.chmod(state / KEY_FILE, 0o600)
    key = load_or_create(state, 5000.0)
    assert (key.born, key.v1_until) == (100.0, 5000.0)
    assert json.loads((state / KEY_FILE).read_text())["v1_until"] == 5000.0
    assert stat.S_IMODE((state / KEY_FILE).stat().st_mode) == 0o600
    assert load_or_create(state, 9000.0) == key, "written once: a restart keeps it"
    assert sorted(p.name for p in state.iterdir()) == [KEY_FILE]
    # A key born (by this clock) in the future is said: trust on first use runs to then.
    future = load_or_create(tmp_path / "other", 1000.0)
    with caplog.at_level("WARNING"):
        load_or_create(tmp_path / "other", future.born - 3600)
    assert "after what this host's clock says is now" in caplog.text


def test_a_broken_key_file_is_kept_aside_and_a_new_key_made(tmp_path: Path) -> None:
    state = tmp_path / "state"
    old = load_or_create(state, 1.0)
    (state / KEY_FILE).write_text('{"key": "abc"')  # torn
    new = load_or_create(state, 5.0)
    assert new.born == 5.0 and new.secret != old.secret
    assert (state / f"{KEY_FILE}.broken").read_text() == '{"key": "abc"'
