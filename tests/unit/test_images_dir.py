"""The images directory (issue 35, point 1): which files count, when a file is complete,
the book of archives by digest, an archive read and checked, the loader's decisions on a
fake engine, the image list of `healerctl images`."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

from healerd.cli import healerctl
from healerd.core.clock import FakeClock
from healerd.core.events import EventLog
from healerd.core.imagefiles import (
    Archive,
    ArchiveBook,
    FileState,
    Verdict,
    declared_loaded,
    is_archive_name,
    settled,
)
from healerd.core.persist import MemoryStore
from healerd.daemon.api.server import ApiOptions, ApiServer
from healerd.daemon.imagearchive import (
    ArchiveChanged,
    CorruptArchive,
    inspect_archive,
    load_archive,
)
from healerd.daemon.imagesdir import SETTLE, ImagesDir
from healerd.daemon.imageview import Known, images_payload
from healerd.daemon.inotify import IN_CLOSE_WRITE, IN_CREATE, IN_MODIFY
from healerd.engine import LocalImage
from healerd.engine.docker.images import loaded_names
from tests.unit.harness.api import FakeDaemon, call
from tests.unit.harness.fake_engine import FakeEngine

TAG = "site/app:1"


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def saved(tag: str = TAG, *, layer: bytes = b"layer", drop: str = "", oci: bool = False) -> bytes:
    """A tar shaped as `docker save` writes it: manifest.json, the config named by its
    sha256, a layer; `oci`: the config and a manifest as blobs (Docker 25+)."""
    config = json.dumps({"architecture": "amd64", "rootfs": {"diff_ids": []}}).encode()
    cid = hashlib.sha256(config).hexdigest()
    config_name = f"blobs/sha256/{cid}" if oci else f"{cid}.json"
    entry = {"Config": config_name, "RepoTags": [tag], "Layers": ["l1/layer.tar"]}
    files = {
        config_name: config,
        "l1/layer.tar": layer,
        "manifest.json": json.dumps([entry]).encode(),
    }
    if oci:
        manifest = json.dumps({"config": {"digest": f"sha256:{cid}"}, "layers": []}).encode()
        files[f"blobs/sha256/{hashlib.sha256(manifest).hexdigest()}"] = manifest
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            if name != drop:
                _add(tar, name, data)
    return buf.getvalue()


def image_id(data: bytes) -> str:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        fh = tar.extractfile("manifest.json")
        assert fh is not None
        config = json.loads(fh.read())[0]["Config"]
    return "sha256:" + str(config).removesuffix(".json").rsplit("/", 1)[-1]


# -- which files, when complete, the book ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "counts"),
    [
        ("app.tar", True),
        ("app.tar.gz", True),
        ("app.tar.zst", True),
        (".app.tar.XyZ12", False),  # rsync's temporary name
        (".app.tar", False),
        ("app.tar.part", False),
        ("app.tgz", False),
        ("app.zip", False),
        (".tar", False),
    ],
)
def test_which_files_count_as_archives(name: str, counts: bool) -> None:
    assert is_archive_name(name) is counts


def test_a_file_settles_when_unchanged_for_the_settle_time() -> None:
    a = FileState(10, 1, 2, 3)
    assert settled(a, 100.0, a, 100.0 + SETTLE, SETTLE)
    assert not settled(a, 100.0, a, 100.0 + SETTLE / 2, SETTLE)
    assert not settled(a, 100.0, FileState(11, 1, 2, 3), 200.0, SETTLE)
    assert not settled(None, 100.0, a, 200.0, SETTLE)


def test_the_book_says_load_once_and_refused_until_the_bytes_change() -> None:
    book = ArchiveBook()
    assert book.verdict("sha256:a") is Verdict.LOAD
    book.note(Archive("sha256:a", "a.tar", 1.0, images=("sha256:i",), tags=(TAG,), stamp="s"))
    book.note(Archive("sha256:b", "b.tar", 2.0, error="truncated"))
    assert book.verdict("sha256:a") is Verdict.LOADED
    assert book.verdict("sha256:b") is Verdict.REFUSED
    assert book.verdict("sha256:c") is Verdict.LOAD  # the same name, other bytes
    again = ArchiveBook.of(json.loads(json.dumps(book.saved())))
    assert again.records == book.records
    assert again.loaded_ids() == {"sha256:i"}
    assert [a.file for a in again.refused({"sha256:b"})] == ["b.tar"]
    assert again.refused(set()) == []


def test_the_book_knows_a_file_by_name_and_stamp_and_follows_a_rename() -> None:
    state = FileState(5, 6, 7, 8)
    book = ArchiveBook({"sha256:a": Archive("sha256:a", "a.tar", 1.0, stamp=state.stamp)})
    assert book.known("a.tar", state) == "sha256:a"
    assert book.known("a.tar", dataclasses.replace(state, mtime_ns=9)) is None
    assert book.known("b.tar", state) is None
    assert book.renamed("sha256:a", "b.tar", state)
    assert not book.renamed("sha256:a", "b.tar", state)
    assert book.known("b.tar", state) == "sha256:a"


def test_a_broken_state_file_is_an_empty_book() -> None:
    broken: list[object] = [None, [], {"archives": "x"}, {"archives": [{"digest": "md5:x"}]}]
    for data in broken:
        assert ArchiveBook.of(data).records == {}


def test_loaded_images_a_declared_service_names_are_kept_by_id() -> None:
    book = ArchiveBook()
    book.note(Archive("sha256:a", "a.tar", 1.0, images=("sha256:1",), tags=("busybox:latest",)))
    book.note(Archive("sha256:b", "b.tar", 1.0, images=("sha256:2",), tags=("site/app:2",)))
    book.note(Archive("sha256:c", "c.tar", 1.0, images=("sha256:3",), error="bad"))
    assert declared_loaded(book, ["docker.io/library/busybox"]) == {"sha256:1"}
    assert declared_loaded(book, ["site/app:1"]) == frozenset()


def test_what_a_load_says_it_loaded() -> None:
    said = [
        {"stream": "Loaded image: site/app:1\n"},
        {"stream": "Loaded image ID: sha256:abc\n"},
        {"stream": "Loaded image: site/app:1\n"},
        {"status": "Loading layer"},
    ]
    assert loaded_names(said) == ["site/app:1", "sha256:abc"]


# -- an archive read --------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> Path:
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", ["app.tar", "app.tar.gz", "app.tar.zst"])
def test_an_archive_is_read_whole_plain_or_compressed(tmp_path: Path, name: str) -> None:
    data = saved()
    path = _write(tmp_path / name, data)
    facts = inspect_archive(path)
    assert facts.digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert facts.size == path.stat().st_size
    assert facts.images == (image_id(data),) and facts.tags == (TAG,)
    engine = FakeEngine(allow={"load_image"})
    engine.images = set()
    engine.loadable[data] = (TAG,)
    assert load_archive(engine, path) == [TAG]  # the decompressed tar reached the engine
    assert engine.images == {TAG}
    assert load_archive(engine, path, facts.digest) == [TAG]
    with pytest.raises(ArchiveChanged, match="changed while it was loaded"):
        load_archive(engine, path, "sha256:" + "0" * 64)  # replaced after it was read


@pytest.mark.parametrize(
    ("name", "data", "why"),
    [
        ("cut.tar", saved()[:1500], "cut short"),
        ("cut2.tar", saved()[:1536], "unexpected end of data"),
        ("cut3.tar", saved()[:1300], "cut short"),
        ("cut.tar.gz", gzip.compress(saved())[:300], "not a whole image archive"),
        ("junk.tar", b"not a tar at all", "not a whole image archive"),
        ("empty.tar", b"", "not a whole image archive"),
        ("plain.tar", b"\0" * 1024, "no manifest.json"),
        ("nolayer.tar", saved(drop="l1/layer.tar"), "l1/layer.tar is missing"),
    ],
)
def test_a_corrupt_archive_is_refused_with_its_reason(
    tmp_path: Path, name: str, data: bytes, why: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(CorruptArchive, match=why):
        inspect_archive(path)


def test_a_config_not_named_by_its_digest_is_refused(tmp_path: Path) -> None:
    data = saved()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: tar.extractfile(m) for m in tar.getmembers()}
        files = {n: fh.read() for n, fh in members.items() if fh is not None}
    config = next(n for n in files if n.endswith(".json") and n != "manifest.json")
    files[config] = files[config] + b" "
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for n, d in files.items():
            _add(tar, n, d)
    path = tmp_path / "x.tar"
    path.write_bytes(buf.getvalue())
    with pytest.raises(CorruptArchive, match="does not match its digest"):
        inspect_archive(path)


def test_an_oci_archive_records_the_manifest_digests_it_proves(tmp_path: Path) -> None:
    data = saved(oci=True)
    facts = inspect_archive(_write(tmp_path / "oci.tar", data))
    (digest, led), *rest = facts.manifests
    assert not rest and led == image_id(data) and digest.startswith("sha256:")
    assert inspect_archive(_write(tmp_path / "old.tar", saved())).manifests == ()


# -- the loader on a fake engine --------------------------------------------------------------


class Loader:
    def __init__(self, directory: Path, store: MemoryStore, engine: FakeEngine) -> None:
        self.clock = FakeClock()
        self.events = EventLog(self.clock)
        self.retries = 0
        self.dir = ImagesDir(
            directory,
            engine,
            self.clock,
            self.events,
            store,
            on_loaded=self._retry,
            strict=False,
        )

    def _retry(self) -> None:
        self.retries += 1

    def look(self) -> None:
        """Two looks SETTLE apart: what an untouched file needs to be read."""
        self.dir.scan()
        self.clock.advance(SETTLE)
        self.dir.scan()

    def kinds(self) -> list[str]:
        return [e.kind.value for e in self.events.since()]


@pytest.fixture
def engine() -> Iterator[FakeEngine]:
    e = FakeEngine(allow={"load_image"})
    e.images = set()
    yield e


def test_an_archive_is_loaded_once_and_not_again_after_a_restart(
    tmp_path: Path, engine: FakeEngine
) -> None:
    data = saved()
    engine.loadable[data] = (TAG,)
    _write(tmp_path / "app.tar.gz", data)
    store = MemoryStore()
    first = Loader(tmp_path, store, engine)
    first.look()
    first.look()
    assert engine.calls.count("load_image") == 1 and engine.images == {TAG}
    assert first.kinds() == ["image-loaded"] and first.retries == 1
    (archive,) = first.dir.book().loaded()
    assert archive.file == "app.tar.gz" and archive.tags == (TAG,)
    assert archive.images == (image_id(data),)
    again = Loader(tmp_path, store, engine)  # a restart: the state file, no new load
    again.look()
    assert engine.calls.count("load_image") == 1 and again.kinds() == []
    os.rename(tmp_path / "app.tar.gz", tmp_path / "renamed.tar.gz")
    again.look()
    again.look()
    assert engine.calls.count("load_image") == 1
    assert [a.file for a in again.dir.book().loaded()] == ["renamed.tar.gz"]


def test_a_file_being_written_is_never_read_until_its_writer_closes_it(
    tmp_path: Path, engine: FakeEngine
) -> None:
    data = saved()
    engine.loadable[data] = (TAG,)
    loader = Loader(tmp_path, MemoryStore(), engine)
    path = tmp_path / "app.tar"
    path.write_bytes(data[:1024])
    loader.dir.on_event("app.tar", IN_CREATE)
    loader.dir.on_event("app.tar", IN_MODIFY)
    for _ in range(5):  # a writer pausing far longer than SETTLE: still held
        loader.look()
    assert "load_image" not in engine.calls and loader.kinds() == []
    path.write_bytes(data)
    loader.dir.on_event("app.tar", IN_CLOSE_WRITE)
    loader.look()
    assert engine.calls.count("load_image") == 1 and loader.kinds() == ["image-loaded"]


def test_a_file_that_changes_between_looks_is_not_read(tmp_path: Path, engine: FakeEngine) -> None:
    data = saved()
    engine.loadable[data] = (TAG,)
    loader = Loader(tmp_path, MemoryStore(), engine)
    path = tmp_path / "app.tar"
    path.write_bytes(data[:1024])
    loader.dir.scan()
    loader.clock.advance(SETTLE)
    path.write_bytes(data[:2048])  # grew: no inotify here, the settle rule holds it
    loader.dir.scan()
    assert "load_image" not in engine.calls and loader.kinds() == []
    path.write_bytes(data)
    loader.look()
    loader.look()
    assert engine.calls.count("load_image") == 1


def test_a_corrupt_archive_is_refused_left_in_place_and_read_again_once_changed(
    tmp_path: Path, engine: FakeEngine
) -> None:
    data = saved()
    engine.loadable[data] = (TAG,)
    store = MemoryStore()
    loader = Loader(tmp_path, store, engine)
    path = tmp_path / "app.tar"
    path.write_bytes(data[:1500])
    loader.look()
    loader.look()
    assert loader.kinds() == ["image-load-refused"] and "load_image" not in engine.calls
    (refused,) = loader.dir.refused_here()
    assert refused.file == "app.tar" and "cut short" in refused.error
    assert path.exists()
    assert Loader(tmp_path, store, engine).dir.book().verdict(refused.digest) is Verdict.REFUSED
    path.write_bytes(data)
    loader.look()
    assert engine.calls.count("load_image") == 1 and loader.dir.refused_here() == []


def test_an_archive_the_engine_refuses_is_refused_with_the_engines_reason(
    tmp_path: Path, engine: FakeEngine
) -> None:
    loader = Loader(tmp_path, MemoryStore(), engine)
    _write(tmp_path / "app.tar", saved())  # not loadable: the fake engine says EOF
    loader.look()
    loader.look()
    (refused,) = loader.dir.refused_here()
    assert refused.error == "unexpected EOF" and loader.kinds() == ["image-load-refused"]


def test_an_engine_away_is_no_verdict(tmp_path: Path, engine: FakeEngine) -> None:
    data = saved()
    engine.loadable[data] = (TAG,)
    loader = Loader(tmp_path, MemoryStore(), engine)
    _write(tmp_path / "app.tar", data)
    engine.down = True
    loader.look()
    assert loader.kinds() == [] and loader.dir.book().records == {}
    engine.down = False
    loader.look()
    assert loader.kinds() == ["image-loaded"]


def test_a_symbolic_link_is_not_followed(tmp_path: Path, engine: FakeEngine) -> None:
    data = saved()
    engine.loadable[data] = (TAG,)
    elsewhere = _write(tmp_path / "elsewhere.bin", data)
    inside = tmp_path / "images"
    inside.mkdir()
    (inside / "app.tar").symlink_to(elsewhere)
    loader = Loader(inside, MemoryStore(), engine)
    loader.look()
    loader.look()
    assert "load_image" not in engine.calls and loader.kinds() == []


def test_an_untrusted_archive_is_not_read(tmp_path: Path, engine: FakeEngine) -> None:
    data = saved()
    engine.loadable[data] = (TAG,)
    loader = Loader(tmp_path, MemoryStore(), engine)
    loader.dir._strict = True
    path = _write(tmp_path / "app.tar", data)
    path.chmod(0o666)
    loader.look()
    loader.look()
    assert "load_image" not in engine.calls
    assert loader.kinds() == ["image-load-refused"]  # said once, not at every look
    (untrusted,) = loader.dir.refused_here()
    assert untrusted.file == "app.tar" and "refused" in untrusted.error


# -- healerctl images --------------------------------------------------------------------------


def _image(iid: str, *tags: str, size: int = 100) -> LocalImage:
    return LocalImage(id=iid, tags=tags, digests=(), created=0.0, size=size)


def test_the_image_list_says_what_healerd_knows_of_each_image() -> None:
    book = ArchiveBook()
    book.note(Archive("sha256:f", "app.tar", 50.0, images=("sha256:1",), tags=(TAG,)))
    book.note(Archive("sha256:g", "bad.tar", 60.0, error="truncated"))
    known = Known(
        declared={"app": TAG, "web": "nginx:1", "db": "postgres:16"},
        pinned={"web": "nginx:1@sha256:" + "c" * 64},
        book=book,
        pulled_refs=frozenset({"nginx:1", "site/built:1"}),
        pulled_ids=frozenset({"sha256:4"}),
        built_refs=frozenset({"site/built:1"}),
    )
    images = [
        _image("sha256:1", TAG, size=10),
        _image("sha256:2", "nginx:1", size=300),
        _image("sha256:3", "someone/else:1", size=999),
        _image("sha256:4", size=5),
        _image("sha256:5", "site/built:1", size=1),
    ]
    refused = book.refused({"sha256:g"})
    data = images_payload(images, known, refused, "/var/lib/healerd/images")
    rows = {r["id"]: r for r in data["images"]}
    assert [r["id"] for r in data["images"]] == ["sha256:2", "sha256:1", "sha256:4", "sha256:5"]
    assert (rows := {r["id"]: r for r in data["images"]})["sha256:5"]["built"] is True
    assert rows["sha256:5"]["pulled"] is False, "built here, not pulled"
    assert rows["sha256:2"]["built"] is False
    assert rows["sha256:1"]["services"] == ["app"] and rows["sha256:1"]["pulled"] is False
    assert rows["sha256:1"]["loaded"] == {
        "file": "app.tar",
        "at": 50.0,
        "digest": "sha256:f",
        "manifests": [],
    }
    assert rows["sha256:2"]["services"] == ["web"] and rows["sha256:2"]["pulled"] is True
    assert rows["sha256:4"]["pulled"] is True and rows["sha256:4"]["services"] == []
    assert data["missing"] == [{"reference": "postgres:16", "services": ["db"]}]
    assert [(r["file"], r["error"]) for r in data["refused"]] == [("bad.tar", "truncated")]


def test_the_api_and_healerctl_show_the_list(tmp_path: Path) -> None:
    d = FakeDaemon(tmp_path / "healerd.sock")
    d.images.image_list = {
        "images": [
            {
                "id": "sha256:" + "1" * 64,
                "tags": [TAG],
                "digests": [],
                "size": 2 * 2**20,
                "created": 0.0,
                "services": ["app"],
                "pinned": [],
                "loaded": {"file": "app.tar", "at": 0.0, "digest": "sha256:f", "manifests": []},
                "pulled": False,
            }
        ],
        "missing": [{"reference": "postgres:16", "services": ["db"]}],
        "images_dir": "/images",
        "refused": [{"file": "bad.tar", "digest": "sha256:g", "at": 0.0, "size": 1, "error": "x"}],
    }
    server = ApiServer(d, ApiOptions(request_deadline=2.0))
    server.start()
    try:
        code, data = call(d.settings.socket_path, "GET", "/v1/images")
        assert code == 200 and data["images"][0]["services"] == ["app"]
        code, data = call(d.settings.socket_path, "GET", "/v1/images?service=web")
        assert code == 200 and data["images"] == [] and data["missing"] == []
        assert call(d.settings.socket_path, "POST", "/v1/images")[0] == 405
        out, err = io.StringIO(), io.StringIO()
        assert healerctl.main(["--socket", str(d.settings.socket_path), "images"], out, err) == 0
    finally:
        server.stop()
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["IMAGE", "ID", "SIZE", "DECLARED", "BY", "PINNED", "BY", "SOURCE"]
    assert lines[1].startswith(TAG) and "app" in lines[1] and "loaded from app.tar" in lines[1]
    assert "missing: postgres:16 (declared by db)" in lines
    assert "refused: /images/bad.tar: x" in lines


def test_healerctl_images_says_built_for_an_image_healerd_built() -> None:
    from healerd.cli.images_verb import rows

    built = {"id": "sha256:" + "5" * 64, "tags": ["site/built:1"], "digests": [], "size": 1}
    said = rows([{**built, "services": ["app"], "pinned": [], "pulled": False, "built": True}], 0.0)
    assert "built here" in [str(cell) for cell in said[0]]
