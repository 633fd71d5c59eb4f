"""Volume snapshots (issue 33): the store in state_dir/snapshots takes, restores, lists
and prunes copies of a service's volumes; never a partial one, never a volume left
empty by a failed restore, never a copy that does not fit."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from healerd.daemon import volumecopy
from healerd.daemon.snapshots import (
    MANIFEST,
    NoRoom,
    Snapshot,
    SnapshotError,
    SnapshotStore,
    cp_a,
    disk_bytes,
)
from healerd.daemon.volumecopy import REMOVALS, Removals, flushed
from tests.unit.harness.volumes import tree, volume

FROM, TO = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def room(free: int) -> SimpleNamespace:
    return SimpleNamespace(free=free)


@pytest.fixture
def store(tmp_path: Path) -> SnapshotStore:
    return SnapshotStore(tmp_path / "state" / "snapshots", sync=lambda _: None)


def test_a_snapshot_is_an_exact_copy_with_its_manifest(
    tmp_path: Path, store: SnapshotStore
) -> None:
    data = volume(tmp_path / "vol" / "_data")
    snap = store.take("db", {"app_pgdata": str(data)}, from_digest=FROM, to_digest=TO)
    assert tree(snap.path / "volumes" / "app_pgdata") == tree(data)
    manifest = json.loads((snap.path / MANIFEST).read_text())
    assert manifest["service"] == "db" and manifest["id"] == snap.id
    assert (manifest["from_digest"], manifest["to_digest"]) == (FROM, TO)
    assert manifest["volumes"] == [{"name": "app_pgdata", "bytes": disk_bytes(data)}]
    assert snap.size == disk_bytes(data) > 6000
    for path in (store.root, store.root / "db", snap.path):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert sorted(p.name for p in (store.root / "db").iterdir()) == [snap.id]
    # The hard link stays one file in the copy.
    copy = snap.path / "volumes" / "app_pgdata"
    assert os.stat(copy / "hardlink").st_ino == os.stat(copy / "PG_VERSION").st_ino


def test_restore_brings_back_exactly_what_was_taken(tmp_path: Path, store: SnapshotStore) -> None:
    data = volume(tmp_path / "vol" / "_data")
    os.setxattr(data / "conf", "user.label", b"kept")
    before = tree(data)
    snap = store.take("db", {"app_pgdata": str(data)}, from_digest=FROM, to_digest=TO)
    # The new image's run: a file deleted, one changed, one added, a mode changed.
    (data / "PG_VERSION").unlink()
    (data / "base" / "1").write_bytes(b"migrated\n")
    (data / "base" / "2").write_bytes(b"new table\n")
    (data / "new-dir").mkdir()
    os.chmod(data, 0o700)
    os.setxattr(data / "conf", "user.label", b"changed")
    store.restore(snap, {"app_pgdata": str(data)})
    assert tree(data) == before
    assert os.getxattr(data / "conf", "user.label") == b"kept"
    # Nothing is left beside the volume's data either, once the old entries are deleted.
    REMOVALS.wait()
    assert sorted(p.name for p in data.parent.iterdir()) == ["_data"]


def test_a_failed_restore_leaves_every_volume_as_it_was(tmp_path: Path) -> None:
    a, b = volume(tmp_path / "a" / "_data"), volume(tmp_path / "b" / "_data")
    good = SnapshotStore(tmp_path / "snapshots", sync=lambda _: None)
    snap = good.take("db", {"va": str(a), "vb": str(b)}, from_digest=FROM, to_digest=TO)
    (a / "after-update").write_text("kept when the restore fails\n")
    (b / "after-update").write_text("kept too\n")
    now_a, now_b = tree(a), tree(b)
    copies: list[Path] = []

    def second_fails(source: Path, target: Path) -> None:
        copies.append(target)
        cp_a(source, target)
        if len(copies) == 2:
            raise SnapshotError("disk gone")

    failing = SnapshotStore(tmp_path / "snapshots", copy=second_fails, sync=lambda _: None)
    with pytest.raises(SnapshotError, match="disk gone"):
        failing.restore(snap, {"va": str(a), "vb": str(b)})
    assert copies == [a, b]
    assert (tree(a), tree(b)) == (now_a, now_b)
    assert sorted(p.name for p in a.parent.iterdir()) == ["_data"]


def test_no_partial_snapshot_after_a_failing_copy(tmp_path: Path) -> None:
    data = volume(tmp_path / "vol" / "_data")
    other = volume(tmp_path / "other" / "_data")

    def fails_on_other(source: Path, target: Path) -> None:
        cp_a(source, target)
        if source == other:
            raise SnapshotError("copy failed: No space left on device")

    store = SnapshotStore(tmp_path / "snapshots", copy=fails_on_other, sync=lambda _: None)
    with pytest.raises(SnapshotError, match="No space left"):
        store.take("db", {"v1": str(data), "v2": str(other)}, from_digest=FROM, to_digest=TO)
    assert store.list() == []
    assert list((tmp_path / "snapshots" / "db").iterdir()) == []


def test_a_crash_mid_copy_is_never_listed_and_is_swept(
    tmp_path: Path, store: SnapshotStore
) -> None:
    data = volume(tmp_path / "vol" / "_data")
    left = store.root / "db" / ".tmp-20250101T000000Z-abcdef"
    (left / "volumes" / "v").mkdir(parents=True)
    assert store.list() == []
    snap = store.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    REMOVALS.wait()
    assert sorted(p.name for p in (store.root / "db").iterdir()) == [snap.id]


def test_a_copy_that_does_not_fit_is_refused_before_copying(tmp_path: Path) -> None:
    data = volume(tmp_path / "vol" / "_data")
    with open(data / "big", "wb") as f:
        f.write(os.urandom(1 << 20))
    copies: list[Path] = []
    store = SnapshotStore(
        tmp_path / "state" / "snapshots",
        copy=lambda s, t: copies.append(t),
        disk_usage=lambda _: room(20 << 20),
        sync=lambda _: None,
    )
    with pytest.raises(NoRoom) as err:
        store.take("db", {"pgdata": str(data)}, from_digest=FROM, to_digest=TO)
    assert copies == []
    assert str(err.value) == (
        f"snapshot of pgdata needs 1.0 MiB (and 64.0 MiB to spare), 20.0 MiB free on "
        f"{store.root / 'db'}"
    )
    assert store.list() == []


def test_a_restore_that_does_not_fit_touches_nothing(tmp_path: Path) -> None:
    data = volume(tmp_path / "vol" / "_data")
    snap = SnapshotStore(tmp_path / "s", sync=lambda _: None).take(
        "db", {"v": str(data)}, from_digest=FROM, to_digest=TO
    )
    (data / "new").write_text("x")
    now = tree(data)
    tight = SnapshotStore(tmp_path / "s", disk_usage=lambda _: room(1 << 20))
    with pytest.raises(NoRoom, match=r"restore of snapshot .* needs"):
        tight.restore(snap, {"v": str(data)})
    assert tree(data) == now


def test_list_is_newest_first_with_sizes_and_prune_keeps_n(tmp_path: Path) -> None:
    data = volume(tmp_path / "vol" / "_data")
    times = iter([1000.0, 2000.0, 3000.0, 500.0])
    store = SnapshotStore(tmp_path / "s", clock=lambda: next(times), sync=lambda _: None)
    taken = [
        store.take(svc, {"v": str(data)}, from_digest=FROM, to_digest=f"sha256:{n}")
        for n, svc in enumerate(["db", "db", "db", "web"])
    ]
    assert [s.created for s in store.list()] == [3000.0, 2000.0, 1000.0, 500.0]
    assert [s.id for s in store.list("db")] == [taken[2].id, taken[1].id, taken[0].id]
    assert all(s.size == disk_bytes(data) for s in store.list())
    assert store.before("db", "sha256:1") == taken[1]
    assert store.before("db", "sha256:9") is None
    assert store.prune("db", 2) == [taken[0].id]
    assert [s.id for s in store.list("db")] == [taken[2].id, taken[1].id]
    assert not taken[0].path.exists()
    REMOVALS.wait()  # its files are deleted in the background
    assert sorted(p.name for p in (store.root / "db").iterdir()) == sorted(
        [taken[2].id, taken[1].id]
    )
    assert [s.id for s in store.list("web")] == [taken[3].id]
    # A restarted daemon (a new store on the same root) finds them: the directory is the record.
    assert SnapshotStore(tmp_path / "s").list() == store.list()


def test_a_broken_manifest_is_left_out(tmp_path: Path, store: SnapshotStore) -> None:
    data = volume(tmp_path / "vol" / "_data")
    snap = store.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    first = store.settling
    good = store.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    for settling in (first, store.settling):  # their rewrites of the manifests as synced
        assert settling is not None
        settling.join(10)
    (snap.path / MANIFEST).write_text("{not json")
    assert store.list() == [good]


def test_a_broken_snapshot_is_warned_about_once_not_at_every_list(
    tmp_path: Path, store: SnapshotStore, caplog: pytest.LogCaptureFixture
) -> None:
    data = volume(tmp_path / "vol" / "_data")
    snap = store.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    assert store.settling is not None
    store.settling.join(10)  # its rewrite of the manifest as synced (a race in CI)
    (snap.path / MANIFEST).write_text("{not json")
    with caplog.at_level(logging.DEBUG, logger="healerd.snapshots"):
        for _ in range(3):
            assert store.list() == []
    said = [r for r in caplog.records if "not listed" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG]


@pytest.mark.parametrize("service", ["../etc", "a/b", ".hidden", "", "x" * 51])
def test_a_service_name_never_makes_a_path(store: SnapshotStore, service: str) -> None:
    with pytest.raises(SnapshotError, match="not a service name"):
        store.take(service, {"v": "/nonexistent"}, from_digest=FROM, to_digest=TO)
    with pytest.raises(SnapshotError, match="not a service name"):
        store.list(service)


@pytest.mark.parametrize(
    ("volumes", "reason"),
    [
        ({"../v": "/x"}, "not a volume name"),
        ({"v": "relative/_data"}, "not an absolute path"),
        ({"v": "/nonexistent/_data"}, "No such file"),
        ({}, "no volume to copy"),
    ],
)
def test_bad_volumes_are_refused(
    store: SnapshotStore, volumes: dict[str, str], reason: str
) -> None:
    with pytest.raises(SnapshotError, match=reason):
        store.take("db", volumes, from_digest=FROM, to_digest=TO)


def test_a_symlinked_mount_point_or_root_is_refused(tmp_path: Path) -> None:
    data = volume(tmp_path / "vol" / "_data")
    (tmp_path / "link").symlink_to(data)
    store = SnapshotStore(tmp_path / "s", sync=lambda _: None)
    with pytest.raises(SnapshotError, match="is not a directory"):
        store.take("db", {"v": str(tmp_path / "link")}, from_digest=FROM, to_digest=TO)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "s2").symlink_to(tmp_path / "elsewhere")
    linked = SnapshotStore(tmp_path / "s2", sync=lambda _: None)
    with pytest.raises(SnapshotError, match="is not a directory"):
        linked.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_the_api_view_has_no_path(tmp_path: Path) -> None:
    s = Snapshot("db", "20250101T000000Z-abcdef", 1.0, FROM, TO, (("v", 10), ("w", 5)), tmp_path)
    assert s.view() == {
        "service": "db",
        "id": "20250101T000000Z-abcdef",
        "created": 1.0,
        "from_digest": FROM,
        "to_digest": TO,
        "volumes": [{"name": "v", "bytes": 10}, {"name": "w", "bytes": 5}],
        "bytes": 15,
    }


@pytest.mark.parametrize(
    ("attrs", "reason"),
    [
        ({"Driver": "local", "Options": None, "Mountpoint": "/v/x/_data"}, None),
        ({"Driver": "local", "Options": {"type": "nfs"}, "Mountpoint": "/v"}, "options type"),
        ({"Driver": "rexray", "Options": {}, "Mountpoint": "/v"}, "driver rexray"),
        ({"Driver": "local", "Options": {}, "Mountpoint": ""}, "no mount point"),
    ],
)
def test_the_engine_gives_a_host_directory_only_for_a_plain_local_volume(
    attrs: dict[str, object], reason: str | None
) -> None:
    from healerd.engine import EngineError
    from healerd.engine.docker.project import host_directory

    if reason is None:
        assert host_directory("x", attrs) == "/v/x/_data"
    else:
        with pytest.raises(EngineError, match=reason):
            host_directory("x", attrs)


class Recorded(Removals):
    """Removals that only record what they are handed (and what was still pending)."""

    def __init__(self, pending: bool = False) -> None:
        super().__init__()
        self.handed: list[Path] = []
        self.waited = 0
        self._pending = pending

    def later(self, path: Path, *, leftover: bool = False) -> None:
        self.handed.append(path)

    def pending(self) -> bool:
        return self._pending

    def wait(self) -> None:
        self.waited += 1
        self._pending = False


def test_what_a_restore_replaced_is_deleted_after_it_returns_outside_the_volume(
    tmp_path: Path,
) -> None:
    data = volume(tmp_path / "vol" / "_data")
    removals = Recorded()
    store = SnapshotStore(tmp_path / "s", sync=lambda _: None, removals=removals)
    before = tree(data)
    snap = store.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    (data / "v2-table").write_text("migrated\n")
    replaced = tree(data)
    store.restore(snap, {"v": str(data)})
    # The volume holds the snapshot at once; what it held waits beside it, not in it.
    assert tree(data) == before
    [trash] = removals.handed
    assert trash.parent == data.parent and trash.name.startswith(".healerd-drop-_data-")
    assert sorted(p.name for p in data.parent.iterdir()) == sorted(["_data", trash.name])
    assert {k: v for k, v in tree(trash).items() if k != "."} == {
        k: v for k, v in replaced.items() if k != "."
    }
    # Real removals delete it, in a thread of their own.
    real = Removals()
    real.later(trash)
    real.wait()
    assert sorted(p.name for p in data.parent.iterdir()) == ["_data"]


def test_a_deletion_a_crash_cut_short_is_swept_at_the_next_restore_or_take(
    tmp_path: Path,
) -> None:
    data = volume(tmp_path / "vol" / "_data")
    store = SnapshotStore(tmp_path / "s", sync=lambda _: None)
    snap = store.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    before = tree(data)
    for name in (".healerd-drop-_data-0badf00d", ".healerd-drop-_data-deadbeef"):
        (data.parent / name / "base").mkdir(parents=True)
        (data.parent / name / "base" / "1").write_text("half deleted\n")
    other = tmp_path / "vol" / ".healerd-drop-other-0badf00d"  # another volume's: kept
    other.mkdir()
    (data / "after").write_text("x")
    store.restore(snap, {"v": str(data)})
    REMOVALS.wait()
    assert tree(data) == before
    assert sorted(p.name for p in data.parent.iterdir()) == sorted(["_data", other.name])
    (data.parent / ".healerd-drop-_data-cafe0000").mkdir()
    (store.root / "db" / ".gone-20250101T000000Z-abcdef" / "volumes").mkdir(parents=True)
    last = store.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    REMOVALS.wait()
    assert sorted(p.name for p in data.parent.iterdir()) == sorted(["_data", other.name])
    assert sorted(p.name for p in (store.root / "db").iterdir()) == sorted([snap.id, last.id])


def test_entries_moved_aside_inside_the_volume_are_deleted_before_restore_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import healerd.daemon.volumecopy as volumecopy

    data = volume(tmp_path / "vol" / "_data")
    removals = Recorded()
    store = SnapshotStore(tmp_path / "s", sync=lambda _: None, removals=removals)
    snap = store.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    before = tree(data)
    (data / "after").write_text("x")
    # The volume's parent on another filesystem: the entries go aside inside the volume.
    monkeypatch.setattr(volumecopy, "same_filesystem", lambda a, b: False)
    store.restore(snap, {"v": str(data)})
    assert tree(data) == before
    assert removals.handed == []
    assert sorted(p.name for p in data.parent.iterdir()) == ["_data"]


def test_a_copy_short_of_room_waits_for_the_pending_removals_first(tmp_path: Path) -> None:
    data = volume(tmp_path / "vol" / "_data")
    removals = Recorded(pending=True)
    store = SnapshotStore(
        tmp_path / "s",
        sync=lambda _: None,
        removals=removals,
        disk_usage=lambda _: room(1 << 30 if removals.waited else 1 << 20),
    )
    store.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    assert removals.waited == 1
    # Nothing pending and still short: refused without waiting.
    tight = SnapshotStore(
        tmp_path / "s", sync=lambda _: None, removals=removals, disk_usage=lambda _: room(0)
    )
    with pytest.raises(NoRoom):
        tight.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    assert removals.waited == 1


def test_a_snapshot_is_usable_at_once_and_synced_off_the_updates_downtime(
    tmp_path: Path,
) -> None:
    """The sync before a snapshot counts runs in a thread after take returns (the update
    waits for the copy, not for the disk); until it is done the manifest names the boot,
    and after a reboot such a snapshot is never used (its files may be empty)."""
    release, synced = threading.Event(), threading.Event()

    def slow_sync(path: Path) -> None:
        release.wait(10)
        synced.set()

    data = volume(tmp_path / "vol")
    store = SnapshotStore(tmp_path / "snaps", sync=slow_sync, boot_id=lambda: "boot-1")
    snap = store.take("db", {"db_data": str(data)}, from_digest="sha256:1", to_digest="sha256:2")
    assert not synced.is_set(), "take waited for the sync"
    assert store.list("db") == [snap], "usable at once, on this boot"
    manifest = json.loads((snap.path / "manifest.json").read_text())
    assert manifest["unsynced_boot"] == "boot-1"
    rebooted = SnapshotStore(tmp_path / "snaps", sync=slow_sync, boot_id=lambda: "boot-2")
    assert rebooted.list("db") == [], "not on disk when the host went down: never used"
    release.set()
    assert store.settling is not None
    store.settling.join(10)
    assert "unsynced_boot" not in json.loads((snap.path / "manifest.json").read_text())
    assert rebooted.list("db") == [snap], "synced: trusted after a reboot"


def test_a_flushed_copy_syncs_its_target_while_it_copies(tmp_path: Path) -> None:
    """A restore's copy is written to disk while it runs (its sync before the service
    starts then finds little left): the copy here waits for a sync of its target."""
    synced: list[Path] = []
    seen = threading.Event()

    def sync(path: Path) -> None:
        synced.append(path)
        seen.set()

    def slow_copy(source: Path, target: Path) -> None:
        assert seen.wait(5.0), "no sync while the copy ran"
        cp_a(source, target)

    source, target = volume(tmp_path / "src"), tmp_path / "dst"
    target.mkdir()
    flushed(slow_copy, sync)(source, target)
    assert synced and set(synced) == {target}
    assert tree(target) == tree(source)
    count = len(synced)
    seen.clear()
    assert not seen.wait(0.5)  # the syncs stopped with the copy
    assert len(synced) == count


def test_a_failed_sync_during_a_flushed_copy_fails_nothing(tmp_path: Path) -> None:
    calls: list[Path] = []

    def broken(path: Path) -> None:
        calls.append(path)
        raise SnapshotError("sync of it failed")

    def slow_copy(source: Path, target: Path) -> None:
        deadline = time.monotonic() + 5.0
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        cp_a(source, target)

    source, target = volume(tmp_path / "src"), tmp_path / "dst"
    target.mkdir()
    flushed(slow_copy, broken)(source, target)
    assert calls == [target]  # tried once, then left to the sync after the copy
    assert tree(target) == tree(source)


class CountedRuns:
    """subprocess.Popen, with each cp's sources recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sources: list[list[str]] = []
        real = subprocess.Popen

        def popen(args: list[str], **kw: Any) -> Any:
            self.sources.append(list(args[args.index("--") + 1 : -1]))
            return real(args, **kw)

        monkeypatch.setattr(subprocess, "Popen", popen)


def test_a_copy_runs_a_cp_per_group_of_about_equal_bytes_and_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = volume(tmp_path / "v")
    os.unlink(data / "hardlink")  # no hard links: the entries may go to two cps
    (data / "big").write_bytes(os.urandom(1 << 20))
    os.setxattr(data, "user.healerd", b"kept")
    os.utime(data, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    runs = CountedRuns(monkeypatch)
    target = tmp_path / "copy"
    target.mkdir()
    volumecopy.cp_a(data, target, workers=2)
    groups = sorted(sorted(os.path.basename(a) for a in g) for g in runs.sources)
    assert groups == [["PG_VERSION", "base", "conf", "current"], ["big"]]
    assert tree(target) == tree(data)
    st, copied = os.lstat(data), os.lstat(target)
    assert (copied.st_mtime_ns, copied.st_mode, copied.st_uid) == (
        st.st_mtime_ns,
        st.st_mode,
        st.st_uid,
    )
    assert os.getxattr(target, "user.healerd") == b"kept"


def test_a_tree_with_hard_links_is_copied_by_one_cp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = volume(tmp_path / "v")  # PG_VERSION and hardlink: one file
    runs = CountedRuns(monkeypatch)
    target = tmp_path / "copy"
    target.mkdir()
    volumecopy.cp_a(data, target, workers=2)
    assert runs.sources == [[f"{data}/."]]
    assert tree(target) == tree(data)
    assert os.lstat(target / "hardlink").st_ino == os.lstat(target / "PG_VERSION").st_ino


def test_a_failing_cp_of_a_group_fails_the_copy_with_its_reason(tmp_path: Path) -> None:
    data = volume(tmp_path / "v")
    os.unlink(data / "hardlink")
    target = tmp_path / "copy"
    target.mkdir()
    (target / "conf").mkdir()  # a file cannot replace a directory
    (target / "conf" / "x").write_text("x")
    with pytest.raises(SnapshotError, match=r"copy of .* failed: cp: cannot overwrite directory"):
        volumecopy.cp_a(data, target, workers=2)


def test_a_directory_that_holds_most_of_a_volume_is_opened_up_for_the_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database's volume: nearly everything under base/16384 (its tables). The groups
    are made of the tables, and every directory opened up for them gets back its own
    owner, mode, times and xattrs, as one cp -a gives them."""
    data = volume(tmp_path / "v")
    os.unlink(data / "hardlink")
    tables = data / "base" / "16384"
    tables.mkdir(mode=0o700)
    for n in range(4):
        (tables / f"{1259 + n}").write_bytes(os.urandom(256 << 10))
    os.setxattr(data / "base", "user.healerd", b"base")
    for d in (tables, data / "base", data):
        os.utime(d, ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    runs = CountedRuns(monkeypatch)
    target = tmp_path / "copy"
    target.mkdir()
    volumecopy.cp_a(data, target, workers=2)
    tables_in = sorted(len([a for a in g if a.startswith("base/16384/")]) for g in runs.sources)
    assert tables_in == [2, 2], runs.sources
    assert tree(target) == tree(data)
    for rel in ("base/16384", "base", "."):
        st, copied = os.lstat(data / rel), os.lstat(target / rel)
        assert (copied.st_mtime_ns, copied.st_mode, copied.st_uid, copied.st_gid) == (
            st.st_mtime_ns,
            st.st_mode,
            st.st_uid,
            st.st_gid,
        ), rel
    assert os.getxattr(target / "base", "user.healerd") == b"base"


def test_an_empty_volume_and_one_without_a_second_group_are_one_cp(tmp_path: Path) -> None:
    empty, target = tmp_path / "empty", tmp_path / "copy"
    empty.mkdir(mode=0o750)
    target.mkdir()
    assert volumecopy.Groups.of(empty, 2) is None
    volumecopy.cp_a(empty, target, workers=2)
    assert tree(target) == tree(empty)
    (empty / "only").write_text("one file: nothing to go beside it\n")
    assert volumecopy.Groups.of(empty, 2) is None
    assert volumecopy.Groups.of(empty, 1) is None


def test_a_snapshot_a_power_cut_caught_unsynced_goes_at_the_next_prune(tmp_path: Path) -> None:
    """Never used after the reboot (its files may be empty), and no longer kept for
    ever: the service's next prune removes it, whatever snapshot_keep says; a synced one
    and one a restore's journal names stay."""

    def never(path: Path) -> None:
        raise SnapshotError("the power went")

    data = volume(tmp_path / "vol")
    root = tmp_path / "snaps"
    before = SnapshotStore(root, sync=never, boot_id=lambda: "boot-1")
    lost = before.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    first = before.settling
    named = before.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    synced = SnapshotStore(root, sync=lambda _: None)
    kept = synced.take("db", {"v": str(data)}, from_digest=FROM, to_digest=TO)
    for thread in (first, before.settling, synced.settling):  # each take's sync
        assert thread is not None
        thread.join(10)
    (root / "db" / "restoring.json").write_text(
        json.dumps(
            {
                "version": 1,
                "service": "db",
                "snapshot": named.id,
                "state": "failed",
                "reason": "x",
                "volumes": [],
            }
        )
    )
    after = SnapshotStore(root, sync=lambda _: None, boot_id=lambda: "boot-2")
    assert after.list("db") == [kept]
    assert after.prune("db", 5) == [lost.id]
    REMOVALS.wait()
    assert sorted(p.name for p in (root / "db").iterdir()) == sorted(
        [named.id, kept.id, "restoring.json"]
    )
