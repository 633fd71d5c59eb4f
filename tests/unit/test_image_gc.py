"""Image garbage collection (issue 17, point 4): which images may go, and in what order.

The choice is pure (healerd.core.imagegc.for_space / for_trim); the collector is driven
against the FakeEngine's image store. The settings come from healerd.yaml's `image_gc:`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.config import Settings, SettingsError, check_settings, load_settings
from healerd.config.imagegc import ImageGcSettings
from healerd.core.clock import FakeClock
from healerd.core.events import EventLog
from healerd.core.imagegc import (
    ImageCollector,
    Inventory,
    bytes_to_free,
    for_space,
    for_trim,
    names,
    parse_ref,
    repositories,
)
from healerd.core.persist import MemoryStore
from healerd.engine import LocalImage
from tests.unit.harness.fake_engine import IMAGE_GC_CALLS, FakeEngine
from tests.unit.harness.files import trusted_tmp_dir

REG = "127.0.0.1:5000"
APP = f"{REG}/app"
MB = 2**20


def digest(n: int) -> str:
    return "sha256:" + f"{n:x}".rjust(64, "0")


def image(
    n: int,
    *,
    tags: tuple[str, ...] = (),
    repo: str | None = APP,
    created: float | None = None,
    size: int = 10 * MB,
) -> LocalImage:
    """Image n, as the engine lists it after a pull of `repo`: its digest reference (n),
    and any tags."""
    digests = (f"{repo}@{digest(n)}",) if repo else ()
    return LocalImage(
        id=f"sha256:{n:064d}",
        tags=tags,
        digests=digests,
        created=float(n if created is None else created),
        size=size,
    )


def inventory(*images: LocalImage, **kw: object) -> Inventory:
    """By default every image was first seen unused at 0 and healerd pulled each."""
    kw.setdefault("in_use", frozenset())
    kw.setdefault("mine", frozenset(i.id for i in images))
    unused = kw.pop("unused_since", None)
    if unused is None:
        unused = {i.id: 0.0 for i in images}
    return Inventory(images=images, unused_since=unused, **kw)  # type: ignore[arg-type]


def ids(images: list[LocalImage]) -> list[str]:
    return [i.id for i in images]


# --- references -----------------------------------------------------------------------


def test_references_are_compared_as_the_engine_lists_them() -> None:
    assert parse_ref("docker.io/library/busybox:1").repository == "busybox"
    assert parse_ref("busybox").repository == "busybox"
    assert parse_ref("docker.io/grafana/grafana:10").repository == "grafana/grafana"
    assert parse_ref(f"{APP}:stable@{digest(1)}") == parse_ref(f"{APP}:stable@{digest(1)}")
    ref = parse_ref(f"{APP}:stable@{digest(1)}")
    assert (ref.repository, ref.tag, ref.digest) == (APP, "stable", digest(1))
    assert parse_ref("localhost:5000/a").repository == "localhost:5000/a"
    img = image(1, tags=(f"{APP}:stable",))
    assert repositories(img) == {APP}
    assert names(img, f"{APP}:stable")
    assert names(img, f"{APP}@{digest(1)}")
    assert names(img, f"{APP}:other@{digest(1)}")  # a digest decides, as in the engine
    assert not names(img, f"{APP}:stable@{digest(2)}")
    assert not names(img, f"{APP}:other")
    assert names(image(2, tags=("busybox:latest",), repo=None), "docker.io/library/busybox")
    assert names(img, img.id)


def test_kubelet_thresholds() -> None:
    total = 1000
    assert bytes_to_free(total, free=200, high=85, low=80) == 0  # 80% used: below high
    assert bytes_to_free(total, free=150, high=85, low=80) == 50  # 85%: down to 80%
    assert bytes_to_free(total, free=50, high=85, low=80) == 150
    assert bytes_to_free(0, 0, 85, 80) == 0
    assert bytes_to_free(total, free=990, high=1, low=0) == 10  # low thresholds: all of it


# --- for_space: the threshold run ------------------------------------------------------------


def test_oldest_first_until_enough_is_freed() -> None:
    imgs = [image(n, size=10 * MB) for n in (1, 2, 3, 4, 5)]
    current = image(6, tags=(f"{APP}:stable",))
    inv = inventory(
        *imgs,
        current,
        in_use={current.id},
        declared={f"{APP}:stable"},
        unused_since={i.id: float(10 - n) for n, i in enumerate(imgs, 1)},
    )
    # Unused since 10 - n: image 5 is the oldest, image 1 fell unused last (the
    # previous one, kept for rollback). 15 MiB takes two images of 10.
    assert ids(for_space(inv, 15 * MB, now=100.0, min_age=0.0)) == [imgs[4].id, imgs[3].id]
    everything = for_space(inv, 10**12, now=100.0, min_age=0.0)
    assert ids(everything) == [i.id for i in reversed(imgs[1:])]
    assert current.id not in ids(everything)
    assert len(everything) == 4


def test_ties_in_unused_time_go_by_build_time() -> None:
    imgs = [image(n, created=100.0 - n) for n in (1, 2, 3)]
    inv = inventory(*imgs, declared=set(), pulled={f"{APP}:stable"})
    # Not declared: no previous to keep; image 3 was built first.
    assert ids(for_space(inv, 10**12, now=1.0, min_age=0.0)) == [imgs[2].id, imgs[1].id, imgs[0].id]


def test_nothing_below_min_age() -> None:
    young, old = image(1), image(2)
    inv = inventory(
        young, old, pulled={f"{APP}:x"}, declared=set(), unused_since={young.id: 90.0, old.id: 0.0}
    )
    assert ids(for_space(inv, 10**12, now=100.0, min_age=60.0)) == [old.id]
    assert ids(for_space(inv, 10**12, now=100.0, min_age=5.0)) == [old.id, young.id]
    never_seen = inventory(young, pulled={f"{APP}:x"}, declared=set(), unused_since={})
    assert for_space(never_seen, 10**12, now=100.0, min_age=0.0) == []


def test_nothing_when_nothing_to_free() -> None:
    inv = inventory(image(1), pulled={f"{APP}:x"}, declared=set())
    assert for_space(inv, 0, now=1.0, min_age=0.0) == []


def test_an_image_a_container_uses_is_never_removed() -> None:
    used = image(1)  # an old digest of a declared repository, used by anyone's container
    inv = inventory(used, image(2), image(3), declared={f"{APP}@{digest(3)}"}, in_use={used.id})
    assert used.id not in ids(for_space(inv, 10**12, now=1.0, min_age=0.0))
    assert used.id not in ids(for_trim(inv, APP, keep=(), now=1.0, min_age=0.0))


def test_foreign_repositories_are_never_removed() -> None:
    foreign = image(1, repo="example.org/other")
    hand_built = image(2, repo=None)  # dangling, built or loaded by hand: no repository
    both = LocalImage(
        "sha256:" + "3" * 64,
        tags=("someone/else:1",),
        digests=(f"{APP}@{digest(3)}",),
        created=3.0,
        size=MB,
    )
    ours = image(4)
    mine = {foreign.id, both.id, ours.id}  # healerd never pulled nor built the hand-built one
    inv = inventory(foreign, hand_built, both, ours, declared=set(), pulled={f"{APP}:1"}, mine=mine)
    assert ids(for_space(inv, 10**12, now=1.0, min_age=0.0)) == [ours.id]
    assert ids(for_trim(inv, APP, keep=(), now=1.0, min_age=0.0)) == [ours.id]
    # trim's repository counts as healerd's, but only that one.
    assert ids(for_trim(inv, "example.org/other", (), now=1.0, min_age=0.0)) == [foreign.id]


def test_declared_and_protected_images_are_kept() -> None:
    by_tag = image(1, tags=(f"{APP}:stable",))
    by_digest = image(2, repo="example.org/pinned")
    protected_current, protected_previous = image(3), image(4)
    old = image(5)
    inv = inventory(
        by_tag,
        by_digest,
        protected_current,
        protected_previous,
        old,
        declared={f"{APP}:stable", f"example.org/pinned@{digest(2)}"},
        protected={f"{APP}:stable@{digest(3)}", f"{APP}@{digest(4)}"},
    )
    # The protected previous is the rollback image: the heuristic keeps nothing more.
    assert ids(for_space(inv, 10**12, now=1.0, min_age=0.0)) == [old.id]
    assert ids(for_trim(inv, APP, keep=(), now=1.0, min_age=0.0)) == [old.id]


def test_the_previous_image_of_each_declared_repository_is_kept() -> None:
    current = image(9, tags=(f"{APP}:v9",))
    older = [image(n, tags=(f"{APP}:v{n}",)) for n in (1, 2, 3)]
    other = [image(10 + n, repo="example.org/web") for n in (1, 2)]
    inv = inventory(
        current,
        *older,
        *other,
        declared={f"{APP}:v9", "example.org/web:latest"},
        in_use={current.id},
        unused_since={i.id: float(n) for n, i in enumerate([*older, *other])},
    )
    gone = ids(for_space(inv, 10**12, now=100.0, min_age=0.0))
    # v3 fell unused last: kept. example.org/web has no current image, and keeps the
    # newer of its two as its previous one.
    assert gone == [older[0].id, older[1].id, other[0].id]


def test_trim_keeps_what_it_is_told_and_ignores_thresholds() -> None:
    imgs = [image(n) for n in (1, 2, 3, 4, 5)]
    inv = inventory(*imgs, declared={f"{APP}:stable"}, in_use={imgs[4].id})
    keep = (f"{APP}@{digest(5)}", f"{APP}:stable@{digest(4)}")
    trimmed = for_trim(inv, f"{APP}:stable", keep, now=120.0, min_age=120.0)
    assert ids(trimmed) == [i.id for i in imgs[:3]]


def test_trim_removes_only_images_healerd_pulled_and_respects_min_age() -> None:
    """Issue 29, L6: trim took every unused image of the updated repository, whoever
    pulled it (an operator's debug build, another project's candidate), at once after
    an update, with no min_age. Now only images healerd pulled, unused for min_age."""
    current = image(1, tags=(f"{APP}:stable",))
    older_of_ours = image(2)
    operators = image(3, tags=(f"{APP}:debug-build",))  # pulled by hand, kept for later
    other_project = image(4, tags=(f"{APP}:v2-candidate",))
    young = image(5)  # ours, fell unused a moment ago
    inv = inventory(
        current,
        older_of_ours,
        operators,
        other_project,
        young,
        in_use={current.id},
        declared={f"{APP}:stable@{digest(1)}"},
        mine={current.id, older_of_ours.id, young.id},
        unused_since={
            older_of_ours.id: 0.0,
            operators.id: 0.0,
            other_project.id: 0.0,
            young.id: 100.0,
        },
    )
    keep = [f"{APP}:stable@{digest(1)}"]
    assert ids(for_trim(inv, APP, keep, now=150.0, min_age=120.0)) == [older_of_ours.id]
    assert ids(for_trim(inv, APP, keep, now=220.0, min_age=120.0)) == [
        older_of_ours.id,
        young.id,
    ]
    # Never seen unused (a restart a moment ago): not trimmed yet.
    fresh = dataclasses.replace(inv, unused_since={})
    assert for_trim(fresh, APP, keep, now=1e9, min_age=0.0) == []
    # A threshold run, under a full disk, still takes any unused image of a declared
    # repository (kubelet's rule), oldest first and after min_age.
    assert set(ids(for_space(inv, 10**12, now=150.0, min_age=120.0))) <= {
        older_of_ours.id,
        operators.id,
        other_project.id,
    }


# --- the collector, against the fake engine --------------------------------------------------


class Disk:
    def __init__(self, total: int, free: int) -> None:
        self.total, self.free = total, free

    def __call__(self) -> tuple[int, int] | None:
        return self.total, self.free


def collector(
    engine: FakeEngine,
    clock: FakeClock,
    disk: Disk,
    declared: dict[str, str] | None,
    settings: ImageGcSettings | None = None,
    store: MemoryStore | None = None,
) -> tuple[ImageCollector, EventLog, list[int]]:
    events = EventLog(clock)
    freed: list[int] = []
    gc = ImageCollector(
        engine,
        clock,
        events,
        settings=lambda: settings or ImageGcSettings(),
        declared=lambda: declared,
        disk=disk,
        on_removed=freed.append,
        store=store,
    )
    return gc, events, freed


def store(engine: FakeEngine, *images: LocalImage) -> None:
    engine.local_images = {i.id: i for i in images}


def test_collector_waits_for_min_age_and_the_high_threshold() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=IMAGE_GC_CALLS)
    current = image(9, tags=(f"{APP}:stable",))
    old = [image(n, size=100) for n in (1, 2, 3)]
    store(engine, current, *old)
    engine.foreign_image_users = {current.id}
    disk = Disk(total=1000, free=100)  # 90% full
    gc, events, freed = collector(engine, clock, disk, {"app": f"{APP}:stable"})
    assert gc.collect() == []  # first seen unused now: min_age (2m) not yet passed
    clock.advance(121)
    disk.free = 200  # 80%: below 85%
    assert gc.collect() == []
    disk.free = 100
    removed = gc.collect()
    # 10% over 80% is 100 bytes: one image does it. Oldest of equal unused times by
    # build time; image 3 is the newest, kept as the previous.
    assert ids(removed) == [old[0].id]
    assert engine.removed_images == [old[0].id]
    assert freed == [100] and gc.removed == 1 and gc.freed == 100
    (event,) = events.since()
    assert event.kind == "image-removed" and event.service == "app"
    assert f"{APP}@{digest(1)}" in event.message and "100 B" in event.message
    assert "90% full" in event.message and "85%" in event.message


def test_collector_skips_a_removal_the_engine_refuses() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=IMAGE_GC_CALLS)
    imgs = [image(n) for n in (1, 2)]
    store(engine, *imgs)
    gc, events, _ = collector(engine, clock, Disk(1000, 0), {}, ImageGcSettings(min_age=0.0))
    gc.note_pull(f"{APP}:stable")
    # A container appears between the look and the removal: the engine says no.
    real = engine.remove_image

    def refuse_first(image_id: str) -> bool:
        if image_id == imgs[0].id:
            return False
        return real(image_id)

    engine.remove_image = refuse_first  # type: ignore[method-assign]
    assert ids(gc.collect()) == [imgs[1].id]
    assert [e.kind for e in events.since()] == ["image-removed"]


def test_collector_removes_nothing_while_the_declaration_is_unknown_or_off() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=IMAGE_GC_CALLS)
    store(engine, image(1), image(2))
    gc, _, _ = collector(engine, clock, Disk(1000, 0), None, ImageGcSettings(min_age=0.0))
    gc.note_pull(f"{APP}:x")
    assert gc.collect() == [] and gc.trim(APP, ()) == []
    assert engine.calls == []
    off = ImageGcSettings(enabled=False, min_age=0.0)
    gc2, _, _ = collector(engine, clock, Disk(1000, 0), {}, off)
    gc2.note_pull(f"{APP}:x")
    assert gc2.collect() == [] and gc2.trim(APP, ()) == []
    assert engine.calls == []


def test_trim_after_five_updates_keeps_current_and_previous() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=IMAGE_GC_CALLS)
    quick = ImageGcSettings(min_age=0.0)
    gc, events, _ = collector(engine, clock, Disk(1000, 999), {"app": f"{APP}:stable"}, quick)
    gc.protect(lambda: {f"{APP}:stable@{digest(current)}", f"{APP}@{digest(current - 1)}"})
    current = 0
    for n in range(1, 6):
        current = n
        # The update: the new digest pulled (it takes the tag), the old one now unused.
        for i in list(engine.local_images.values()):
            engine.local_images[i.id] = dataclasses.replace(i, tags=())
        new = image(n, tags=(f"{APP}:stable",))
        engine.local_images[new.id] = new
        engine.foreign_image_users = {new.id}
        gc.note_pull(f"{APP}@{digest(n)}")
        clock.advance(1)
        gc.trim(f"{APP}:stable", (f"{APP}@{digest(n)}", f"{APP}@{digest(n - 1)}"))
    assert sorted(engine.local_images) == sorted([image(4).id, image(5).id])
    assert len([e for e in events.since() if e.kind == "image-removed"]) == 3
    assert all("after the update of" in e.message for e in events.since())


def test_the_images_healerd_pulled_are_remembered_across_a_restart() -> None:
    """Issue 29, L6: what trim may remove is known by image ID, kept in a store (the
    daemon's is a file in state_dir): a restarted healerd, which has pulled nothing yet,
    trims the images the last one pulled, and never an image it did not pull."""
    clock = FakeClock()
    engine = FakeEngine(clock, allow=IMAGE_GC_CALLS)
    ours, theirs, current = image(1), image(2), image(3, tags=(f"{APP}:stable",))
    store(engine, ours, theirs, current)
    engine.foreign_image_users = {current.id}
    memory = MemoryStore()
    quick = ImageGcSettings(min_age=0.0)
    first, _, _ = collector(engine, clock, Disk(1000, 999), {"app": f"{APP}:stable"}, quick, memory)
    first.note_pull(f"{APP}@{digest(1)}")
    first.note_pull(f"{APP}:stable")
    assert first.collect() == []  # a look: the IDs are noted and saved
    assert memory.data == {"pulled_image_ids": sorted([ours.id, current.id])}
    again, _, _ = collector(engine, clock, Disk(1000, 999), {"app": f"{APP}:stable"}, quick, memory)
    assert ids(again.trim(APP, [f"{APP}:stable"])) == [ours.id]
    assert sorted(engine.local_images) == sorted([theirs.id, current.id])
    # An ID the engine no longer lists is forgotten at the next look.
    assert again.collect() == []
    assert memory.data == {"pulled_image_ids": [current.id]}
    # A broken store is no memory at all, not an error.
    broken, _, _ = collector(
        engine, clock, Disk(1000, 999), {}, quick, MemoryStore({"pulled_image_ids": "x"})
    )
    assert broken.trim(APP, ()) == []


def test_run_stops_with_its_event() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=IMAGE_GC_CALLS)
    gc, _, _ = collector(engine, clock, Disk(1000, 999), {})
    stop = threading.Event()
    stop.set()
    gc.run(stop)  # returns at once
    assert engine.calls == []


# --- settings -------------------------------------------------------------------------------


@pytest.fixture
def trusted() -> Iterator[Path]:
    with trusted_tmp_dir() as path:
        yield path


def load(dir: Path, text: str) -> Settings:
    path = dir / "healerd.yaml"
    path.write_text(text)
    return load_settings(path)


def test_settings_defaults_are_kubelets() -> None:
    gc = Settings().image_gc
    assert (gc.enabled, gc.high_threshold_percent, gc.low_threshold_percent) == (True, 85, 80)
    assert (gc.min_age, gc.interval) == (120.0, 300.0)


def test_settings_section(trusted: Path) -> None:
    s = load(
        trusted,
        "image_gc:\n  high_threshold_percent: 90\n  low_threshold_percent: 50\n"
        "  min_age: 0s\n  interval: 1m\n  x-note: ignored\n",
    )
    assert s.image_gc == ImageGcSettings(True, 90, 50, 0.0, 60.0)
    assert load(trusted, "image_gc:\n  enabled: false\n").image_gc.enabled is False
    assert load(trusted, "image_gc: {}\n").image_gc == ImageGcSettings()


def test_settings_errors_name_the_key(trusted: Path) -> None:
    cases = {
        "image_gc:\n  low_threshold_percent: 85\n": ("image_gc.low_threshold_percent", "below"),
        "image_gc:\n  high_threshold_percent: 70\n": ("image_gc.high_threshold_percent", "below"),
        "image_gc:\n  high_threshold_percent: 101\n": (
            "image_gc.high_threshold_percent",
            "1 to 100",
        ),
        "image_gc:\n  min_age: -1\n": ("image_gc.min_age", "negative"),
        "image_gc:\n  interval: 0.5\n": ("image_gc.interval", "at least 1s"),
        "image_gc:\n  enabled: 1\n": ("image_gc.enabled", "true or false"),
        "image_gc:\n  high_threshold: 90\n": ("image_gc.high_threshold", "did you mean"),
        "image_gc: 85\n": ("image_gc", "mapping"),
    }
    for text, (field, words) in cases.items():
        with pytest.raises(SettingsError) as info:
            load(trusted, text)
        ((line, got, reason),) = [(e.line, e.field, e.reason) for e in info.value.errors]
        assert got == field and words in reason, (text, got, reason)
        assert line is not None and line >= 1


def test_check_settings_checks_the_section() -> None:
    bad = dataclasses.replace(
        Settings(), image_gc=ImageGcSettings(high_threshold_percent=50, low_threshold_percent=60)
    )
    (error,) = check_settings(bad)
    assert error.field == "image_gc.low_threshold_percent"
    assert check_settings(Settings()) == []


def test_metrics_count_images_and_bytes() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from healerd.daemon.metrics import ImageGcMetrics

    metrics = ImageGcMetrics()
    registry = CollectorRegistry()
    for counter in metrics.counters:
        registry.register(counter)
    metrics.on_removed(3 * MB)
    metrics.on_removed(MB)
    text = generate_latest(registry).decode()
    assert "healerd_images_removed_total 2.0" in text
    assert "healerd_image_bytes_freed_total 4.194304e+06" in text


def test_trim_reports_an_engine_error_instead_of_raising() -> None:
    clock = FakeClock()
    engine = FakeEngine(clock, allow=IMAGE_GC_CALLS)
    store(engine, image(1))
    engine.down = True
    gc, events, _ = collector(engine, clock, Disk(1000, 0), {"app": f"{APP}:stable"})
    assert gc.trim(APP, ()) == []
    assert events.since() == []


def test_a_built_image_a_declared_service_names_is_kept() -> None:
    """issue 34: `<project>-<service>` (a build's tag, no registry digest) stays while
    declared, even unused (replicas 0)."""
    built = image(1, tags=("shop-app:latest",), repo=None)
    inv = inventory(built, declared={"shop-app"})
    assert built.id not in ids(for_space(inv, 10**12, now=1.0, min_age=0.0))
    assert built.id not in ids(for_trim(inv, "shop-app", keep=(), now=1.0, min_age=0.0))


def test_a_build_a_rebuild_replaced_goes_once_unused_and_a_hand_built_one_stays() -> None:
    """A rebuild moves the service's tag to a new image: the one it replaced is left in
    no repository. healerd built it (its ID is `mine`), so a threshold run may remove it
    once unused for min_age; an image in no repository healerd never made stays."""
    current = image(3, tags=("shop-app:latest",), repo=None)
    replaced = image(2, repo=None)  # healerd's earlier build of shop-app
    hand_built = image(1, repo=None)
    inv = inventory(
        hand_built, replaced, current, declared={"shop-app"}, mine={replaced.id, current.id}
    )
    assert ids(for_space(inv, 10**12, now=1.0, min_age=0.0)) == [replaced.id]
    assert ids(for_space(inv, 10**12, now=1.0, min_age=5.0)) == []
    used = dataclasses.replace(inv, in_use={replaced.id})
    assert ids(for_space(used, 10**12, now=1.0, min_age=0.0)) == []


def test_what_healerd_builds_counts_as_its_own_for_image_gc() -> None:
    """The executor's references for image GC (`pulled`) hold the tags it built, so the
    IDs they name are `mine` (and kept across restarts); a failed build adds nothing."""
    from healerd.core.executor import Executor
    from healerd.engine import ImageBuildFailed
    from healerd.model.build import BuildSpec

    engine = FakeEngine(allow={"build_image"})
    engine.build_failures["shop-bad:latest"] = "no such file"
    ex = Executor(engine, 1)
    ex.build(BuildSpec(context="/srv/shop"), "shop-app:latest")
    with pytest.raises(ImageBuildFailed):
        ex.build(BuildSpec(context="/srv/shop"), "shop-bad:latest")
    assert ex.pulled() == {"shop-app:latest"}
