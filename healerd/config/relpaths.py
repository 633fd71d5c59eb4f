"""Relative paths of a file read from another directory, made absolute.

Each Compose file's relative paths start at its own directory when it is extended from,
or included into, a project elsewhere (compose-go's paths.ResolveRelativePaths;
docker-compose 1.29.2 resolves an extended file's paths the same way), while healerd's
checks start every relative path at the project directory. Rewriting them before the
merge keeps what each file meant. `~` is left alone: it means the same anywhere.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from healerd.config.yamlload import LineDict, LineList

# Build contexts that are no directory (docker-compose 1.29.2's DOCKER_VALID_URL_PREFIXES).
_REMOTE = ("http://", "https://", "git://", "github.com/", "git@")


def _joined(directory: str, path: str, *, dotted_only: bool = False) -> str:
    """`path` from `directory`, unless absolute, `~`-relative or (with `dotted_only`,
    for a short-syntax volume, where `name:/x` is a volume) not starting with a dot."""
    if not path or path.startswith(("/", "~")) or (dotted_only and not path.startswith(".")):
        return path
    return posixpath.normpath(posixpath.join(directory, path))


def _set(mapping: LineDict, key: str, value: str) -> None:
    if mapping.get(key) != value:
        mapping[key] = value
        if key in mapping.raw:
            mapping.raw[key] = value


def _path_key(mapping: Any, key: str, directory: str) -> None:
    if isinstance(mapping, LineDict) and isinstance(mapping.get(key), str):
        _set(mapping, key, _joined(directory, mapping[key]))


def _paths(container: Any, key: str, directory: str) -> None:
    """A key holding a path, a list of paths, or a list of mappings with a `path`."""
    value = container.get(key) if isinstance(container, LineDict) else None
    if isinstance(value, str):
        _path_key(container, key, directory)
    elif isinstance(value, LineList):
        for index, item in enumerate(value):
            if isinstance(item, str):
                value[index] = _joined(directory, item)
            else:
                _path_key(item, "path", directory)


def _volume(item: Any, directory: str) -> Any:
    if isinstance(item, str):
        source, sep, rest = item.partition(":")
        if sep and source.startswith("."):
            return f"{_joined(directory, source)}:{rest}"
        return item
    if isinstance(item, LineDict) and item.get("type") == "bind":
        _path_key(item, "source", directory)
    return item


def _build(service: LineDict, directory: str) -> None:
    build = service.get("build")
    if isinstance(build, str) and not build.startswith(_REMOTE):
        _set(service, "build", _joined(directory, build))
    elif isinstance(build, LineDict):
        context = build.get("context")
        if isinstance(context, str) and not context.startswith(_REMOTE):
            _set(build, "context", _joined(directory, context))


def _service(service: Any, directory: str) -> None:
    if not isinstance(service, LineDict):
        return
    _paths(service, "env_file", directory)
    volumes = service.get("volumes")
    if isinstance(volumes, LineList):
        for index, item in enumerate(volumes):
            volumes[index] = _volume(item, directory)
    _build(service, directory)
    _path_key(service.get("extends"), "file", directory)


def _include(data: LineDict, directory: str) -> None:
    include = data.get("include")
    if not isinstance(include, LineList):
        return
    for index, item in enumerate(include):
        if isinstance(item, str):
            include[index] = _joined(directory, item)
        elif isinstance(item, LineDict):
            for key in ("path", "env_file"):
                _paths(item, key, directory)
            _path_key(item, "project_directory", directory)


def _top_level(data: LineDict, directory: str) -> None:
    for section in ("secrets", "configs"):
        declared = data.get(section)
        if isinstance(declared, LineDict):
            for body in declared.values():
                _path_key(body, "file", directory)
    volumes = data.get("volumes")
    for body in volumes.values() if isinstance(volumes, LineDict) else ():
        options = body.get("driver_opts") if isinstance(body, LineDict) else None
        if isinstance(options, LineDict) and "bind" in str(options.get("o", "")).split(","):
            _path_key(options, "device", directory)


def absolutize(data: Any, directory: Path | str) -> None:
    """Rewrites, in place, the relative paths of a document read from `directory`:
    env_file entries, bind sources (short syntax starting with a dot, long syntax
    `type: bind`), build contexts, `extends.file`, top-level secrets' and configs'
    `file`, a local volume's bind `device`, and include's paths, project_directory and
    env_file."""
    if not isinstance(data, LineDict):
        return
    where = str(directory)
    services = data.get("services")
    for service in services.values() if isinstance(services, LineDict) else ():
        _service(service, where)
    _top_level(data, where)
    _include(data, where)
