"""`include`: other Compose projects whose services, networks, volumes, secrets and
configs are added to this one (compose-spec 14-include.md).

Short syntax, a list of paths; long syntax, mappings of `path` (one file, or several
merged), `project_directory` (default: the first file's directory) and `env_file`
(default: that directory's `.env`). Relative paths start at the including project's
directory. Each included project is read as a project of its own (its relative paths
from its project directory, its own variables), then its resources are added. A name
declared both here and by an included project (or by two of them) is an error unless
both declarations are the same: the rule of Compose until v2.40 (compose-go v2.10 now
merges the including file's declaration onto the included one instead); healerd keeps
the stricter rule, so a name is never silently changed by a file elsewhere. Cycles are
refused.
"""

from __future__ import annotations

import contextvars
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any

from healerd.config.errors import describe
from healerd.config.keys import At, named_at
from healerd.config.mergedata import empty_dict, put
from healerd.config.relpaths import absolutize
from healerd.config.yamlload import LineDict, LineList

# (paths merged in order, project directory, env files or [] for its .env) -> the
# included project read, interpolated and merged, its own include and extends
# resolved; None when it cannot be read (it reports its own errors).
LoadProject = Callable[[list[Path], Path, list[Path]], LineDict | None]
SECTIONS = ("services", "networks", "volumes", "secrets", "configs")
_KEYS = ("path", "project_directory", "env_file")
# The files whose include is being resolved, outermost first (a nested resolve_include
# runs inside load_project): how a cycle is seen.
_CHAIN: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "healerd_include_chain", default=()
)


def _path(directory: Path, text: str) -> Path:
    return Path(posixpath.normpath(directory / posixpath.expanduser(text)))


def _paths(value: Any, at: At, directory: Path) -> list[Path] | None:
    """A path or a list of paths (at least one), from `directory`."""
    items = list(value) if isinstance(value, LineList) else [value]
    if not items or not all(isinstance(v, str) and v for v in items):
        at.error(f"must be a path or a list of paths, not {describe(value)}")
        return None
    return [_path(directory, v) for v in items]


def _entry(item: Any, at: At, directory: Path) -> tuple[list[Path], Path, list[Path]] | None:
    """(files, project directory, env files) of one include entry."""
    if isinstance(item, str) and item:
        path = _path(directory, item)
        return [path], path.parent, []
    if not isinstance(item, LineDict):
        at.error(f"must be a path or a mapping with path, not {describe(item)}")
        return None
    for key in item:
        if key not in _KEYS:
            at.key(item, key).error("unknown key: include takes path, project_directory, env_file")
    if item.get("path") is None:
        at.here("path").error("is required: the Compose file (or files) to include")
        return None
    paths = _paths(item["path"], at.key(item, "path"), directory)
    if paths is None:
        return None
    project = paths[0].parent
    if item.get("project_directory") is not None:
        value = item["project_directory"]
        if not isinstance(value, str) or not value:
            at.key(item, "project_directory").error(f"must be a path, not {describe(value)}")
            return None
        project = _path(directory, value)
    env_files: list[Path] = []
    if item.get("env_file") is not None:
        found = _paths(item["env_file"], at.key(item, "env_file"), directory)
        if found is None:
            return None
        env_files = [p for p in found if str(p) != "/dev/null"]
    return paths, project, env_files


def _add(data: LineDict, imported: LineDict, at: At, origin: str) -> None:
    """The included resources added to `data`, refusing a name declared in both."""
    for section in SECTIONS:
        theirs = imported.get(section)
        if not isinstance(theirs, LineDict) or not theirs:
            continue
        mine = data.get(section)
        if mine is None:
            mine = empty_dict(theirs)
            mine.file = data.file
            put(data, imported, section, mine)
        if not isinstance(mine, LineDict):
            continue  # the document check reports it
        for name, body in theirs.items():
            if name not in mine:
                put(mine, theirs, name, body)
            elif mine[name] != body:
                line = theirs.line_of(name)
                where = f"{theirs.file_of(name) or origin}:{line}" if line else origin
                at.key(data, section).key(mine, name).error(
                    f"is also declared by the included {where}: Compose refuses a name "
                    "declared both here and in an included project (rename one)"
                )


def resolve_include(
    data: Any,
    path: Path,
    at: At,
    load_project: LoadProject,
    project_directory: Path | None = None,
) -> None:
    """Adds, in place, what `data`'s include names (then drops `include`); errors go to
    `at`. Relative paths start at `project_directory` (default: the context's base
    directory, else the file's)."""
    if not isinstance(data, LineDict) or "include" not in data:
        return
    include_at = at.key(data, "include")
    include = data.pop("include")
    data.tags.pop("include", None)
    if include is None:
        return
    if not isinstance(include, LineList):
        include_at.error(f"must be a list of paths or of mappings, not {describe(include)}")
        return
    directory = project_directory or at.context.base_dir or path.parent
    chain = (*_CHAIN.get(), posixpath.abspath(path))
    for index, item in enumerate(include):
        item_at = include_at.item(include, index)
        entry = _entry(item, item_at, directory)
        if entry is None:
            continue
        paths, project, env_files = entry
        if posixpath.abspath(paths[0]) in chain:
            steps = " -> ".join([*chain, posixpath.abspath(paths[0])])
            item_at.error(f"is a cycle: {steps}")
            continue
        token = _CHAIN.set(chain)
        named = item_at.key(item, "path") if isinstance(item, LineDict) else item_at
        try:
            with named_at(named):
                imported = load_project(paths, project, env_files)
        finally:
            _CHAIN.reset(token)
        if isinstance(imported, LineDict):
            absolutize(imported, project)
            _add(data, imported, at, str(paths[0]))
