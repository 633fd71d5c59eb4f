"""A bundle's built images made current for the site, so that healerd does not build
them again there (where the base image and the registry may be missing).

healerd builds a `build:` service again when its image's context hash label differs
from the context's (healerd.core.builds), and the hash holds the context's absolute
path: on the site that is `conf.d/<name>.bundle/...`, not the path it was built at.
Before the switch, the hash the daemon will compute there is taken from the unpacked
files (healerd.config.buildctx, `files_at`), and an image whose label differs gets it
by a build of one `FROM` line on the image itself: a new image ID with the same layers,
made offline in a second.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from healerd.config.buildctx import ContextError, context_hash
from healerd.core.builds import Need, build_need
from healerd.daemon.bundlefile import BundleError
from healerd.engine import EngineError, ImageStore
from healerd.model import BuildSpec, ServiceSpec


def _moved(path: str, tree: Path, link: Path) -> str:
    rel = os.path.relpath(path, tree)
    return path if rel.startswith("..") else str(link / rel)


def site_hash(build: BuildSpec, tree: Path, link: Path) -> str | None:
    """The context hash the daemon will read through `link`, from the files in `tree`;
    None when the Dockerfile is named by an absolute path (not known before the switch)."""
    if build.dockerfile_inline is None and os.path.isabs(build.dockerfile):
        return None
    final = dataclasses.replace(build, context=_moved(build.context, tree, link), context_hash="")
    try:
        return context_hash(final, files_at=build.context)
    except ContextError as exc:
        raise BundleError(f"build context {build.context}: {exc}") from None


def relabel_built(
    services: Iterable[ServiceSpec], tree: Path, link: Path, engine: ImageStore
) -> list[str]:
    """Every built image whose service would be built again on the site, labelled with
    the site's context hash; the images done. BundleError when the engine refuses."""
    done: list[str] = []
    for spec in services:
        if spec.build is None or (wanted := site_hash(spec.build, tree, link)) is None:
            continue
        labels = engine.image_labels(spec.image)
        if build_need(spec.pull_policy, labels, wanted, pulled=True) is not Need.BUILD:
            continue
        with tempfile.TemporaryDirectory() as empty:
            relabel = BuildSpec(empty, dockerfile_inline=f"FROM {spec.image}\n",
                                context_hash=wanted)  # fmt: skip
            try:
                engine.build_image(relabel, spec.image)
            except EngineError as exc:
                raise BundleError(f"{spec.name}: image {spec.image}: {exc}") from None
        done.append(spec.image)
    return done


__all__ = ["relabel_built", "site_hash"]
