"""A bundle's data directories kept out of its versions, so that a new version never
takes a stack's data with the old tree.

A bind source that is a directory under a bundled entry (`./data:/var/lib/app`) is data,
not configuration: it is not bundled, and on the site the engine would make it inside
the version's tree (the path leads there through `conf.d/<name>.bundle`), which the
next version's install removes. So each such path of the new tree is a link to
`conf.d/.bundles/<name>.data/<path>`, one directory per bundle that no version
owns: the engine follows the link when it mounts, and every version reaches the same
data. A directory the bundle itself holds at that path (bundled files in it) stays as
it is: it is configuration, and is replaced with its version.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from healerd.model import ServiceSpec


def data_root(store: Path, name: str) -> Path:
    return store / f"{name}.data"


def _under(path: str, tree: Path) -> str | None:
    rel = os.path.relpath(path, tree)
    return None if rel.startswith("..") or rel == "." else rel


def keep_data(services: Iterable[ServiceSpec], tree: Path, data: Path) -> list[str]:
    """Links in `tree` for every directory bind source under it that the bundle does not
    hold, each to its place under `data` (made when missing); the paths linked."""
    linked: list[str] = []
    for spec in services:
        for volume in spec.volumes:
            if not volume.source.startswith("/") or (rel := _under(volume.source, tree)) is None:
                continue
            inside = tree / rel
            if os.path.lexists(inside):
                continue  # bundled files (or a link made for another service)
            target = data / rel
            target.mkdir(parents=True, exist_ok=True, mode=0o755)
            inside.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            os.symlink(os.path.relpath(target, inside.parent), inside)
            linked.append(rel)
    return linked


__all__ = ["data_root", "keep_data"]
