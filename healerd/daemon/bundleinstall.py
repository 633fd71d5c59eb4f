"""A bundle installed (healerctl bundle load, and the hook for the images directory):
checked whole, its images loaded, and only then its services switched in at once.

The order is what keeps a site safe: (1) every member's sha256 against the manifest,
before anything is used; (2) the config tree unpacked beside conf.d (under a dotted
name the daemon does not read) and read by the daemon's own loader (an error refuses
it, naming the file and line); (3) the images loaded into the engine, then every image
a service names looked up there, and built images labelled for the site
(healerd.daemon.bundlebuilt); (4) one rename. On any failure before (4), conf.d is
as it was and the reason says which.

Layout, so that a bundle's services switch as one and a new version replaces the old
whole (files added, changed or gone alike): the tree is unpacked into
`conf.d/.bundles/<name>.<random>/` (a dotted name: never read itself), and
`conf.d/<name>.bundle` is a link to it, replaced by a new link renamed over it: the
daemon reads a `*.bundle` entry like conf.d, one level deep. Data directories (bind
sources the bundle does not hold) live beside the versions, in `<name>.data`
(healerd.daemon.bundledata), so the old tree can go. The paths services hold
(`conf.d/<name>.bundle/...`: bind sources, env files, build contexts) do not change
from one version to the next, so only what changed rolls. The old tree is removed
after the switch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from healerd.config import ConfigError, DesiredStore, load_conf_dir
from healerd.config.desired import BUNDLE_SUFFIX
from healerd.daemon.bundlebuilt import relabel_built
from healerd.daemon.bundledata import data_root, keep_data
from healerd.daemon.bundlefile import (
    CONFIG,
    IMAGES,
    PIECE,
    BundleError,
    Manifest,
    members,
    open_bundle,
    read_manifest,
    sha256_of,
    verify,
)
from healerd.engine import ImageArchive, ImageLoadFailed, ImageStore
from healerd.model import ServiceSpec

STORE = ".bundles"


@dataclass(frozen=True)
class Installed:
    name: str
    link: Path  # conf.d/<name>.bundle
    tree: Path
    images: tuple[str, ...]  # what the engine said it loaded
    replaced: bool  # a previous version was there


class EngineForBundle(ImageArchive, ImageStore, Protocol):
    """What an install needs of the engine."""


def link_path(conf_d: Path, name: str) -> Path:
    return conf_d / f"{name}{BUNDLE_SUFFIX}"


def _load_images(
    tar: tarfile.TarFile,
    manifest: Manifest,
    services: Mapping[str, ServiceSpec],
    engine: EngineForBundle,
) -> list[str]:
    """The archive's images loaded, then every image a service names (the config's, not
    only the manifest's list) looked up in the engine."""
    loaded: list[str] = []
    if manifest.images:
        stream = tar.extractfile(tar.getmember(IMAGES))
        assert stream is not None
        try:
            loaded = engine.load_image(iter(lambda: stream.read(PIECE), b""))
        except ImageLoadFailed as exc:  # an engine away is no verdict (tried again)
            raise BundleError(f"{IMAGES}: the engine refused it: {exc}") from None
    missing: dict[str, list[str]] = {}
    for spec in services.values():
        if spec.image not in missing and engine.image_present(spec.image):
            continue
        missing.setdefault(spec.image, []).append(spec.name)
    if missing:
        image, names = next(iter(missing.items()))
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise BundleError(
            f"image {image} (service {', '.join(names)}) is not in the engine after the "
            f"load{more}: the bundle lacks it"
        )
    return loaded


def _unpack(tar: tarfile.TarFile, manifest: Manifest, tree: Path) -> None:
    """The config tree into `tree`, each file checked again as it is written (the archive
    may change under us between the check and now)."""
    modes = {f.path: f.mode for f in manifest.files}
    for member, expected in members(tar, manifest):
        if member.name == IMAGES:
            continue
        target = tree / member.name[len(CONFIG) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        source = tar.extractfile(member)
        assert source is not None
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(source, out)
            out.flush()
            os.fsync(out.fileno())  # on disk before the link leads to it
        os.chmod(target, modes[member.name] & 0o755)
        with target.open("rb") as written:
            if sha256_of(written)[0] != expected:
                raise BundleError(f"{member.name}: changed while it was installed")


def _checked(
    tree: Path, strict_modes: bool, environment: Collection[str]
) -> Mapping[str, ServiceSpec]:
    """The daemon's loader and merge on the unpacked tree; its first error refuses it."""
    state = DesiredStore().update(
        load_conf_dir(tree, strict_modes=strict_modes, environment=environment, bundles=False)
    )
    if state.errors:
        first: ConfigError = state.errors[0]
        more = f" (and {len(state.errors) - 1} more)" if state.errors[1:] else ""
        raise BundleError(f"config error: {first}{more}")
    return state.services


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _switch(link: Path, tree: Path) -> Path | None:
    """`link` now leads to `tree` (a new link renamed over it, after the tree's
    directories are synced: a power cut never leaves the link on a tree half on disk);
    the old tree, if any."""
    for top, _dirs, _files in os.walk(tree):
        _sync_dir(Path(top))
    _sync_dir(tree.parent)
    old = Path(os.path.realpath(link)) if link.is_symlink() else None
    if os.path.lexists(link) and old is None:
        raise BundleError(f"{link} exists and is not a bundle's link: not replaced")
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(os.path.relpath(tree, link.parent), tmp)
    os.replace(tmp, link)
    _sync_dir(link.parent)
    return old


def install_bundle(
    path: str | Path,
    conf_d: Path,
    engine: EngineForBundle,
    *,
    strict_modes: bool = True,
    environment: Collection[str] = (),
) -> Installed:
    """Install the bundle at `path` into `conf_d` (see the module docstring); BundleError
    with the reason when it is refused, and then conf.d is unchanged."""
    with open_bundle(str(path)) as tar:
        try:
            manifest = read_manifest(tar)
            verify(tar, manifest)
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise BundleError(f"{path}: the archive is damaged: {exc}") from None
        store = conf_d / STORE
        made = not store.is_dir()
        store.mkdir(mode=0o755, exist_ok=True)
        tree = Path(tempfile.mkdtemp(dir=store, prefix=f"{manifest.name}."))
        try:
            os.chmod(tree, 0o755)
            _unpack(tar, manifest, tree)
            services = _checked(tree, strict_modes, environment)
            loaded = _load_images(tar, manifest, services, engine)
            link = link_path(conf_d, manifest.name)
            relabel_built(services.values(), tree, link, engine)
            keep_data(services.values(), tree, data_root(store, manifest.name))
            old = _switch(link, tree)
        except BaseException:
            shutil.rmtree(tree, ignore_errors=True)
            if made:
                with contextlib.suppress(OSError):
                    store.rmdir()
            raise
    if old is not None and old != tree and old.parent == Path(os.path.realpath(store)):
        shutil.rmtree(old, ignore_errors=True)
    return Installed(manifest.name, link, tree, tuple(loaded), old is not None)


__all__ = ["STORE", "EngineForBundle", "Installed", "install_bundle", "link_path"]
