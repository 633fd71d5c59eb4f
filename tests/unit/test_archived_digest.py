"""A digest-pinned service runs from an archive in images_dir that carries its manifest
(issue 35, point 1): Docker's own image store keeps no digest for a loaded image, so the
digest healerd hashed in the archive stands for it; the container is created from the
image's ID, no registry is asked, and image GC and `healerctl images` count the image as
the service's."""

from __future__ import annotations

from typing import Any

from healerd.core.backoff import Backoff
from healerd.core.clock import FakeClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.imagefiles import Archive, ArchiveBook, declared_loaded
from healerd.core.timings import Timings
from healerd.core.wiring import build_loop
from healerd.daemon.imagearchive import _manifests
from healerd.daemon.imageview import Known, images_payload
from healerd.engine import LocalImage
from healerd.model import EngineAction, EngineEvent
from healerd.vocabulary import AutoUpdate
from tests.unit.harness.builders import spec
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine
from tests.unit.harness.loop import desired, drive, state

DIGEST = "sha256:" + "d" * 64
OTHER = "sha256:" + "e" * 64
IMAGE_ID = "sha256:" + "1" * 64
PINNED = f"edge.example.net/site/app@{DIGEST}"


def book() -> ArchiveBook:
    b = ArchiveBook()
    b.note(Archive("sha256:a", "app.tar", 1.0, images=(IMAGE_ID,), manifests={DIGEST: IMAGE_ID}))
    b.note(Archive("sha256:b", "bad.tar", 2.0, error="corrupt", manifests={OTHER: "sha256:9"}))
    return b


def test_the_book_proves_a_pinned_digest_by_the_manifest_an_archive_carried() -> None:
    b = book()
    assert b.proven_id(PINNED) == IMAGE_ID
    assert b.proven_id(f"other/repo:1@{DIGEST}") == IMAGE_ID  # content, wherever stored
    assert b.proven_id("edge.example.net/site/app:1") is None  # a tag proves nothing
    assert b.proven_id(f"site/app@{OTHER}") is None  # only a refused archive had it
    assert declared_loaded(b, [PINNED]) == {IMAGE_ID}
    assert declared_loaded(b, [f"site/app@{OTHER}"]) == frozenset()


def make(archived: dict[str, str]) -> tuple[Controller, FakeEngine, FakeClock]:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=LOOP_CALLS | {"pull"})
    engine.images = {IMAGE_ID}  # loaded from the archive: the engine knows no digest of it
    settings = LoopSettings(
        workers=2,
        parallel_actions=4,
        timings=Timings(backoff=Backoff(0.5, 8.0), pull_backoff=Backoff(2.0, 8.0)),
    )
    ctrl = build_loop(engine, clock, settings)
    ctrl.images.archived = archived.get
    return ctrl, engine, clock


def test_a_digest_only_an_archive_proved_runs_from_its_image_id_without_a_pull() -> None:
    ctrl, engine, clock = make({PINNED: IMAGE_ID})
    app = spec("app", 2, image=PINNED)
    ctrl.set_desired(desired(app))
    drive(ctrl, clock)
    running = engine.running("app")
    assert len(running) == 2 and state(ctrl, "app") == "Converged"
    assert {c.image for c in running} == {IMAGE_ID}
    assert {c.spec_hash for c in running} == {app.spec_hash}
    assert "pull" not in engine.calls
    engine.kill(running[0].id)  # a heal in place, then one by a create: the same image
    gone = engine.containers.pop(running[1].id)  # docker rm -f
    ctrl.on_event(EngineEvent("app", gone.id, EngineAction.DESTROYED, name=gone.name))
    drive(ctrl, clock, max_seconds=30)
    now = engine.running("app")
    assert len(now) == 2 and {c.image for c in now} == {IMAGE_ID}
    assert gone.id not in {c.id for c in now} and "pull" not in engine.calls


def test_without_the_archives_proof_the_digest_is_pulled_and_its_failure_said() -> None:
    ctrl, engine, clock = make({})
    ctrl.set_desired(desired(spec("app", 1, image=PINNED)))
    drive(ctrl, clock, max_seconds=5)
    assert not engine.running("app") and "pull" in engine.calls
    (st,) = [s for s in ctrl.statuses() if s.name == "app"]
    assert f"cannot pull {PINNED}" in st.reason


def test_the_image_list_names_the_service_of_a_digest_an_archive_proved() -> None:
    image = LocalImage(IMAGE_ID, (), (), 1.0, 100)
    known = Known({"app": PINNED}, {}, book(), frozenset(), frozenset())
    payload = images_payload([image], known, [], "/var/lib/healerd/images")
    (row,) = payload["images"]
    assert row["services"] == ["app"] and row["loaded"]["manifests"] == [DIGEST]
    assert payload["missing"] == []
    gone = images_payload([], known, [], "/var/lib/healerd/images")
    assert gone["missing"] == [{"reference": PINNED, "services": ["app"]}]


def test_a_followed_tags_pin_is_never_created_by_id() -> None:
    """The updater reads a following service's digest from the reference the engine
    lists for its containers: an archive never makes it create one by ID."""
    ctrl, engine, clock = make({PINNED: IMAGE_ID})
    ctrl.set_desired(desired(spec("app", 1, image=PINNED, auto_update=AutoUpdate.REGISTRY)))
    drive(ctrl, clock, max_seconds=5)
    assert not engine.running("app") and "pull" in engine.calls


def test_an_index_of_several_loaded_platforms_proves_none_of_them() -> None:
    def manifest(config: str) -> dict[str, object]:
        return {"config": {"digest": config}, "layers": []}

    docs: dict[str, Any] = {
        "sha256:m1": manifest("sha256:c1"),
        "sha256:m2": manifest("sha256:c2"),
        "sha256:one": {"manifests": [{"digest": "sha256:m1"}, {"digest": "sha256:mX"}]},
        "sha256:two": {"manifests": [{"digest": "sha256:m1"}, {"digest": "sha256:m2"}]},
    }
    found = dict(_manifests(docs, {"sha256:c1", "sha256:c2"}))
    assert found == {"sha256:m1": "sha256:c1", "sha256:m2": "sha256:c2", "sha256:one": "sha256:c1"}
