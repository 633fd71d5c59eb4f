"""Bundles for air-gapped sites (issue 35 point 2), without an engine: what `healerctl
bundle create` writes (manifest, layout, mode), what it refuses (a broken config by
file:line, a missing image, a file outside its entry), and `bundle load`'s install:
checked whole, images loaded and present, then one switch of conf.d/NAME.bundle that a
second version replaces whole; on any failure conf.d is unchanged."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pytest

from healerd.cli import bundle_verb, healerctl
from healerd.cli.bundle.collect import collect
from healerd.cli.bundle.create import write_bundle
from healerd.config import DesiredStore, load_conf_dir
from healerd.daemon.bundlefile import BundleError, is_bundle, parse_manifest
from healerd.daemon.bundleinstall import STORE, install_bundle
from healerd.daemon.projectwatch import ProjectFiles
from healerd.engine import EngineUnavailable, ImageLoadFailed, LocalImage
from healerd.model import BuildSpec


class FakeArchiveEngine:
    """Images by reference; an archive is the references, one a line."""

    def __init__(self, present: Sequence[str] = ()) -> None:
        self.present = set(present)
        self.drop_on_load: set[str] = set()  # loaded, but gone at once (a test's fault)
        self.loads = 0
        self.built: list[tuple[str, BuildSpec]] = []

    def image_present(self, image: str) -> bool:
        return image in self.present

    def list_images(self) -> list[LocalImage]:
        return [
            LocalImage(id=f"sha256:{abs(hash(r)):x}", tags=(r,), digests=(), created=0, size=1)
            for r in sorted(self.present)
        ]

    def save_images(self, refs: Sequence[str]) -> Iterator[bytes]:
        for ref in refs:
            yield f"{ref}\n".encode()

    def load_image(self, chunks: Iterable[bytes]) -> list[str]:
        self.loads += 1
        refs = b"".join(chunks).decode().split()
        if any(not r or "\0" in r for r in refs):
            raise ImageLoadFailed("load images: unexpected EOF")  # as the adapter says it
        self.present |= set(refs) - self.drop_on_load
        return refs

    # The rest of ImageStore, unused by bundles.
    def image_size_hint(self, image: str) -> int | None:
        return None

    def pull(self, image: str, auth: object = None) -> None:
        raise AssertionError("a bundle never pulls")

    def image_labels(self, image: str) -> dict[str, str] | None:
        return {} if image in self.present else None

    def build_image(self, build: BuildSpec, tag: str, *, no_cache: bool = False) -> None:
        self.built.append((tag, build))  # only the relabel of a built image

    def local_digests(self, image: str) -> tuple[str, ...]:
        return ()

    def images_in_use(self) -> set[str]:
        return set()

    def remove_image(self, image_id: str) -> bool:
        return False


def site(tmp_path: Path, web_image: str = "site/web:1") -> Path:
    conf_d = tmp_path / "src" / "conf.d"
    (conf_d / "stack").mkdir(parents=True)
    (conf_d / "web.yaml").write_text(
        f"services:\n  web:\n    image: {web_image}\n    env_file: web.env\n"
    )
    (conf_d / "web.env").write_text("TOKEN=s3cret\n")
    (conf_d / "web.env").chmod(0o600)
    (conf_d / "stack" / "compose.yaml").write_text(
        "services:\n  app:\n    image: site/app:${TAG}\n"
        "    volumes: ['./app.conf:/etc/app.conf:ro', './data:/data']\n"
    )
    (conf_d / "stack" / ".env").write_text("TAG=2\n")
    (conf_d / "stack" / "app.conf").write_text("mode=edge\n")
    (conf_d / "stack" / "data").mkdir()
    (conf_d / "stack" / "data" / "big.db").write_text("not configuration\n")
    return conf_d


def make(tmp_path: Path, conf_d: Path, engine: FakeArchiveEngine, name: str = "site") -> Path:
    out = tmp_path / f"{name}.tar"
    contents = collect([conf_d])
    assert not contents.errors, contents.errors
    write_bundle(contents, name, out, engine)
    return out


def names(tar_path: Path) -> list[str]:
    with tarfile.open(tar_path) as tar:
        return tar.getnames()


def test_create_writes_manifest_config_and_images_private(tmp_path: Path) -> None:
    engine = FakeArchiveEngine(["site/web:1", "site/app:2"])
    out = make(tmp_path, site(tmp_path), engine)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    members = names(out)
    assert members[0] == "manifest.json" and members[-1] == "images.tar"
    assert sorted(members[1:-1]) == [
        "config/stack/.env",
        "config/stack/app.conf",
        "config/stack/compose.yaml",
        "config/web.env",
        "config/web.yaml",
    ]  # the bind-mounted directory ./data is data: not bundled
    with tarfile.open(out) as tar:
        stream = tar.extractfile("manifest.json")
        assert stream is not None
        manifest = parse_manifest(stream.read())
    assert manifest.name == "site" and manifest.format == 1 and manifest.created
    assert {i.ref: i.services for i in manifest.images} == {
        "site/app:2": ("app",),
        "site/web:1": ("web",),
    }
    assert all(i.id.startswith("sha256:") for i in manifest.images)
    assert any("web.env holds env file (secret values)" in n for n in manifest.notes)
    assert any("directory" in n and "data" in n for n in manifest.notes)
    assert [f.mode for f in manifest.files if f.path == "config/web.env"] == [0o600]


def test_create_refuses_a_broken_config_naming_file_and_line(tmp_path: Path) -> None:
    conf_d = site(tmp_path)
    (conf_d / "web.yaml").write_text("services:\n  web:\n    image: x\n    restart: sometimes\n")
    contents = collect([conf_d])
    assert any(f"{conf_d / 'web.yaml'}:4" in e for e in contents.errors), contents.errors


def test_create_refuses_an_image_missing_locally_naming_it(tmp_path: Path) -> None:
    conf_d = site(tmp_path)
    out = tmp_path / "site.tar"
    with pytest.raises(BundleError, match=r"image site/app:2 \(service app\) is not in"):
        write_bundle(collect([conf_d]), "site", out, FakeArchiveEngine(["site/web:1"]))
    assert not out.exists() and os.listdir(tmp_path) == ["src"]


def test_create_refuses_a_file_outside_its_entry(tmp_path: Path) -> None:
    conf_d = site(tmp_path)
    (tmp_path / "src" / "shared.env").write_text("A=1\n")
    (conf_d / "web.yaml").write_text(
        "services:\n  web:\n    image: x\n    env_file: ../shared.env\n"
    )
    errors = collect([conf_d]).errors
    assert any("shared.env" in e and "is outside" in e for e in errors), errors


def test_the_cli_writes_the_bundle_and_says_what_is_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeArchiveEngine(["site/web:1", "site/app:2"])
    monkeypatch.setattr(bundle_verb, "_engine", lambda settings: engine)
    out, err = io.StringIO(), io.StringIO()
    target = tmp_path / "edge-7.tar"
    code = healerctl.main(
        ["bundle", "create", "--config-dir", str(tmp_path / "none"), "-o", str(target),
         str(site(tmp_path))], out, err,
    )  # fmt: skip
    assert code == 0, err.getvalue()
    assert "bundle edge-7: 2 entr(ies), 5 file(s), 2 image(s)" in out.getvalue()
    assert "note:" in err.getvalue()


def installed(conf_d: Path) -> dict[str, str]:
    state = DesiredStore().update(load_conf_dir(conf_d, strict_modes=False))
    assert not state.errors, state.errors
    return {n: s.source_file for n, s in state.services.items()}


def target(tmp_path: Path) -> Path:
    conf_d = tmp_path / "dst" / "conf.d"
    conf_d.mkdir(parents=True, exist_ok=True)
    (conf_d / "local.yaml").write_text("services:\n  local:\n    image: busybox\n")
    return conf_d


def test_load_installs_the_services_as_one_bundle_entry(tmp_path: Path) -> None:
    bundle = make(tmp_path, site(tmp_path), FakeArchiveEngine(["site/web:1", "site/app:2"]))
    conf_d, engine = target(tmp_path), FakeArchiveEngine()
    done = install_bundle(bundle, conf_d, engine, strict_modes=False)
    assert engine.present == {"site/web:1", "site/app:2"} and not done.replaced
    link = conf_d / "site.bundle"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert installed(conf_d) == {
        "local": str(conf_d / "local.yaml"),
        "web": str(link / "web.yaml"),
        "app": str(link / "stack"),
    }
    assert (link / "web.env").read_text() == "TOKEN=s3cret\n"
    assert stat.S_IMODE((link / "web.env").stat().st_mode) == 0o600


def test_a_second_version_replaces_the_first_whole(tmp_path: Path) -> None:
    conf_d_src = site(tmp_path)
    engine = FakeArchiveEngine(["site/web:1", "site/app:2", "site/web:2"])
    first = make(tmp_path, conf_d_src, engine)
    conf_d = target(tmp_path)
    install_bundle(first, conf_d, FakeArchiveEngine(), strict_modes=False)
    (conf_d_src / "web.yaml").write_text("services:\n  web2:\n    image: site/web:2\n")
    (conf_d_src / "web.env").unlink()
    second = make(tmp_path, conf_d_src, engine, name="site")
    done = install_bundle(second, conf_d, FakeArchiveEngine(), strict_modes=False)
    assert done.replaced
    assert sorted(installed(conf_d)) == ["app", "local", "web2"]
    assert not (conf_d / "site.bundle" / "web.env").exists()
    # The old tree is gone; the data directories stay apart.
    assert sorted(os.listdir(conf_d / STORE)) == sorted([done.tree.name, "site.data"])


def snapshot(conf_d: Path) -> list[tuple[str, str]]:
    return sorted(
        (str(p.relative_to(conf_d)), os.readlink(p) if p.is_symlink() else "")
        for p in conf_d.rglob("*")
    )


def tampered(bundle: Path, member: str) -> Path:
    with tarfile.open(bundle) as tar:
        info = tar.getmember(member)
        offset = info.offset_data
    data = bytearray(bundle.read_bytes())
    data[offset] ^= 0x01
    out = bundle.with_name("tampered.tar")
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("member", ["config/web.yaml", "images.tar", "manifest.json"])
def test_one_byte_changed_is_refused_with_nothing_changed(tmp_path: Path, member: str) -> None:
    bundle = make(tmp_path, site(tmp_path), FakeArchiveEngine(["site/web:1", "site/app:2"]))
    conf_d, engine = target(tmp_path), FakeArchiveEngine()
    before = snapshot(conf_d)
    with pytest.raises(BundleError) as caught:
        install_bundle(tampered(bundle, member), conf_d, engine, strict_modes=False)
    assert snapshot(conf_d) == before and engine.loads == 0
    assert member in str(caught.value) or "manifest" in str(caught.value)


def test_a_cut_archive_is_refused(tmp_path: Path) -> None:
    bundle = make(tmp_path, site(tmp_path), FakeArchiveEngine(["site/web:1", "site/app:2"]))
    cut = tmp_path / "cut.tar"
    cut.write_bytes(bundle.read_bytes()[:1500])
    conf_d = target(tmp_path)
    before = snapshot(conf_d)
    with pytest.raises(BundleError):
        install_bundle(cut, conf_d, FakeArchiveEngine(), strict_modes=False)
    assert snapshot(conf_d) == before


def test_an_image_missing_after_the_load_refuses_the_bundle_whole(tmp_path: Path) -> None:
    engine_src = FakeArchiveEngine(["site/web:1", "site/app:2", "site/web:2"])
    conf_d_src = site(tmp_path)
    conf_d = target(tmp_path)
    install_bundle(make(tmp_path, conf_d_src, engine_src), conf_d, FakeArchiveEngine(),
                   strict_modes=False)  # fmt: skip
    before = snapshot(conf_d)
    (conf_d_src / "web.yaml").write_text("services:\n  web:\n    image: site/web:2\n")
    engine = FakeArchiveEngine()
    engine.drop_on_load = {"site/web:2"}
    with pytest.raises(BundleError, match=r"image site/web:2 \(service web\) is not in the engine"):
        install_bundle(make(tmp_path, conf_d_src, engine_src), conf_d, engine, strict_modes=False)
    assert snapshot(conf_d) == before
    assert installed(conf_d)["web"] == str(conf_d / "site.bundle" / "web.yaml")


def test_a_config_error_in_the_bundle_is_refused_naming_the_file(tmp_path: Path) -> None:
    bundle = make(tmp_path, site(tmp_path), FakeArchiveEngine(["site/web:1", "site/app:2"]))
    # Rewrite the bundle with a broken file and a manifest that matches it: a bundle
    # made by hand, or by a healerd with other checks.
    broken = tmp_path / "broken.tar"
    with tarfile.open(bundle) as src, tarfile.open(broken, "w") as dst:
        stream = src.extractfile("manifest.json")
        assert stream is not None
        raw = json.loads(stream.read())
        text = b"services:\n  web:\n    image: site/web:1\n    restart: sometimes\n"
        for f in raw["files"]:
            if f["path"] == "config/web.yaml":
                f["sha256"], f["size"] = hashlib.sha256(text).hexdigest(), len(text)
        for info in src.getmembers():
            data = json.dumps(raw).encode() if info.name == "manifest.json" else None
            if info.name == "config/web.yaml":
                data = text
            if data is not None:
                info.size = len(data)
                dst.addfile(info, io.BytesIO(data))
            else:
                dst.addfile(info, src.extractfile(info))
    conf_d, engine = target(tmp_path), FakeArchiveEngine()
    before = snapshot(conf_d)
    with pytest.raises(BundleError, match=r"config error: .*web.yaml:4"):
        install_bundle(broken, conf_d, engine, strict_modes=False)
    assert snapshot(conf_d) == before and engine.loads == 0


@pytest.mark.parametrize(
    "path", ["config/../../etc/passwd", "/etc/passwd", "config/a/../b", "images.tar", "config/"]
)
def test_a_manifest_path_leaving_the_tree_is_refused(path: str) -> None:
    raw = {"format": 1, "name": "x", "files": [{"path": path, "sha256": "0", "size": 0,
                                                  "mode": 420}]}  # fmt: skip
    with pytest.raises(BundleError, match="manifest"):
        parse_manifest(json.dumps(raw).encode())


def test_an_unknown_format_or_odd_name_is_refused() -> None:
    with pytest.raises(BundleError, match="format 2"):
        parse_manifest(b'{"format": 2, "name": "x"}')
    with pytest.raises(BundleError, match="name"):
        parse_manifest(b'{"format": 1, "name": "../x"}')


def test_a_member_not_in_the_manifest_or_a_link_is_refused(tmp_path: Path) -> None:
    bundle = make(tmp_path, site(tmp_path), FakeArchiveEngine(["site/web:1", "site/app:2"]))
    for extra in ("file", "link"):
        changed = tmp_path / f"{extra}.tar"
        changed.write_bytes(bundle.read_bytes())
        with tarfile.open(changed, "a") as tar:
            info = tarfile.TarInfo("config/extra.yaml")
            if extra == "link":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
                tar.addfile(info)
            else:
                info.size = 3
                tar.addfile(info, io.BytesIO(b"x: "))
        conf_d = target(tmp_path)
        with pytest.raises(BundleError, match=r"config/extra\.yaml"):
            install_bundle(changed, conf_d, FakeArchiveEngine(), strict_modes=False)
        assert not (conf_d / "site.bundle").exists()


def test_conf_d_reads_a_bundle_entry_one_level_deep(tmp_path: Path) -> None:
    conf_d = tmp_path / "conf.d"
    tree = conf_d / ".bundles" / "b.1"
    (tree / "inner.bundle").mkdir(parents=True)
    (tree / "compose.yaml").write_text("services:\n  a:\n    image: x\n")  # a file, not a project
    (tree / "inner.bundle" / "c.yaml").write_text("services:\n  c:\n    image: x\n")
    (conf_d / "b.bundle").symlink_to(".bundles/b.1")
    assert installed(conf_d) == {"a": str(conf_d / "b.bundle" / "compose.yaml")}


def test_a_built_image_is_labelled_with_the_context_hash_the_site_computes(tmp_path: Path) -> None:
    """The hash holds the context's path, which differs on the site: the install labels
    the image with the hash the daemon reads through conf.d/NAME.bundle, so that the site
    does not build it again (without its base image or a registry)."""
    conf_d_src = tmp_path / "src" / "conf.d"
    (conf_d_src / "stack" / "app").mkdir(parents=True)
    (conf_d_src / "stack" / "app" / "Dockerfile").write_text("FROM base\n")
    (conf_d_src / "stack" / "app" / "run.sh").write_text("echo\n")
    (conf_d_src / "stack" / "compose.yaml").write_text(
        "services:\n  app:\n    build: ./app\n    image: site/built:1\n"
    )
    bundle = make(tmp_path, conf_d_src, FakeArchiveEngine(["site/built:1"]))
    assert "config/stack/app/run.sh" in names(bundle)
    conf_d, engine = target(tmp_path), FakeArchiveEngine()
    install_bundle(bundle, conf_d, engine, strict_modes=False)
    state = DesiredStore().update(load_conf_dir(conf_d, strict_modes=False))
    build = state.services["app"].build
    assert build is not None and build.context == str(conf_d / "site.bundle" / "stack" / "app")
    [(tag, relabel)] = engine.built
    assert tag == "site/built:1" and relabel.context_hash == build.context_hash
    assert relabel.dockerfile_inline == "FROM site/built:1\n"


def test_a_linked_project_is_bundled_under_its_targets_name(tmp_path: Path) -> None:
    """A project's Compose name comes from its directory (the link's target): the bundle
    keeps that name, so the stack keeps its networks and volumes on the site."""
    stacks = tmp_path / "opt" / "nextcloud"
    stacks.mkdir(parents=True)
    (stacks / "compose.yaml").write_text("services:\n  cloud:\n    image: site/cloud:1\n")
    conf_d = tmp_path / "src" / "conf.d"
    conf_d.mkdir(parents=True)
    (conf_d / "nc").symlink_to(stacks)
    contents = collect([conf_d])
    assert contents.entries == ["nextcloud"] and list(contents.files) == [
        "config/nextcloud/compose.yaml"
    ]


def test_a_bundle_is_told_from_an_image_archive(tmp_path: Path) -> None:
    """Both hold a manifest.json; the images directory takes both (is_bundle), and
    `bundle load` of docker save's archive says what it is."""
    saved = tmp_path / "image.tar"
    with tarfile.open(saved, "w") as tar:
        data = b'[{"Config": "c.json", "RepoTags": ["x:1"], "Layers": []}]'
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    bundle = make(tmp_path, site(tmp_path), FakeArchiveEngine(["site/web:1", "site/app:2"]))
    assert is_bundle(str(bundle)) and not is_bundle(str(saved))
    assert not is_bundle(str(tmp_path / "missing.tar"))
    with pytest.raises(BundleError, match="docker save's"):
        install_bundle(saved, target(tmp_path), FakeArchiveEngine(), strict_modes=False)


def test_the_watcher_takes_a_bundle_link_swapped_in_conf_d(tmp_path: Path) -> None:
    files = ProjectFiles(tmp_path)
    assert files.relevant(tmp_path, "site.bundle", False)
    assert not files.relevant(tmp_path, ".site.bundle.12.tmp", False)


def test_data_directories_outlive_a_new_version(tmp_path: Path) -> None:
    """A bind-mounted directory the bundle does not hold (./data) is data: it lives in
    conf.d/.bundles/NAME.data, reached through a link in each version, so the next
    version's install, which removes the old tree, keeps it."""
    conf_d_src = site(tmp_path)
    engine = FakeArchiveEngine(["site/web:1", "site/app:2"])
    conf_d = target(tmp_path)
    install_bundle(make(tmp_path, conf_d_src, engine), conf_d, FakeArchiveEngine(),
                   strict_modes=False)  # fmt: skip
    data = conf_d / "site.bundle" / "stack" / "data"
    assert data.is_symlink() and data.is_dir()
    (data / "db").write_text("rows\n")  # as the engine's container would write it
    (conf_d_src / "stack" / "app.conf").write_text("mode=v2\n")
    install_bundle(make(tmp_path, conf_d_src, engine), conf_d, FakeArchiveEngine(),
                   strict_modes=False)  # fmt: skip
    assert (conf_d / "site.bundle" / "stack" / "app.conf").read_text() == "mode=v2\n"
    assert (data / "db").read_text() == "rows\n"
    assert len(os.listdir(conf_d / STORE)) == 2  # the new tree and the data


def test_a_data_link_beside_a_service_file_is_not_read_as_a_project(tmp_path: Path) -> None:
    conf_d_src = tmp_path / "src" / "conf.d"
    conf_d_src.mkdir(parents=True)
    (conf_d_src / "db.yaml").write_text(
        "services:\n  db:\n    image: site/db:1\n    volumes: ['./data:/data']\n"
    )
    bundle = make(tmp_path, conf_d_src, FakeArchiveEngine(["site/db:1"]))
    conf_d = target(tmp_path)
    install_bundle(bundle, conf_d, FakeArchiveEngine(), strict_modes=False)
    assert (conf_d / "site.bundle" / "data").is_symlink()
    assert sorted(installed(conf_d)) == ["db", "local"]


def test_a_bundle_link_leading_nowhere_keeps_its_files_last_good_state(tmp_path: Path) -> None:
    bundle = make(tmp_path, site(tmp_path), FakeArchiveEngine(["site/web:1", "site/app:2"]))
    conf_d = target(tmp_path)
    done = install_bundle(bundle, conf_d, FakeArchiveEngine(), strict_modes=False)
    store = DesiredStore()
    store.update(load_conf_dir(conf_d, strict_modes=False))
    shutil.rmtree(done.tree)
    state = store.update(load_conf_dir(conf_d, strict_modes=False, known=store.known()))
    assert sorted(state.services) == ["app", "local", "web"]
    assert state.errors and "leads to no directory" in str(state.errors[0])


def test_a_bundle_dropped_while_the_engine_is_away_is_installed_once_it_is_back(
    tmp_path: Path,
) -> None:
    """Review: the engine away at the load was taken for its refusal, kept in the images
    directory's memory: the bundle was never installed, across restarts too."""
    import types

    from healerd.core.clock import FakeClock
    from healerd.core.events import EventLog
    from healerd.core.persist import MemoryStore
    from healerd.daemon.imagesdir import SETTLE, ImagesDir
    from healerd.daemon.imagework import ImageWork

    class AwayFirst(FakeArchiveEngine):
        away = True

        def load_image(self, chunks: Iterable[bytes]) -> list[str]:
            if self.away:
                raise EngineUnavailable("engine unreachable: connection refused")
            return super().load_image(chunks)

    bundle = make(tmp_path, site(tmp_path), FakeArchiveEngine(["site/web:1", "site/app:2"]))
    (images := tmp_path / "images").mkdir()
    (images / "site.tar").write_bytes(bundle.read_bytes())
    (state := tmp_path / "state").mkdir()
    engine, clock = AwayFirst(), FakeClock()
    settings = types.SimpleNamespace(
        state_dir=state, strict_modes=False, interpolate_environment=()
    )
    work = types.SimpleNamespace(_settings=lambda: settings, _engine=engine, reload=lambda: None)
    d = ImagesDir(
        images,
        engine,
        clock,
        EventLog(clock),
        MemoryStore(),
        lambda: None,
        strict=False,
        bundle=lambda p: ImageWork._install_bundle(work, p),  # type: ignore[arg-type]
    )
    d.scan()
    clock.advance(SETTLE)
    d.scan()
    assert engine.loads == 0 and d.refused_here() == []
    engine.away = False
    d.scan()
    assert engine.loads == 1 and d.refused_here() == []
    assert (state / "bundles").is_dir()
