"""The `env_file` key's check: the paths of a service's env files, each read now.

Both of Compose's syntaxes (compose-go's types.EnvFile, Compose 2.24+), mixed in one
list as Compose allows:

    env_file: app.env                 # a path, or a list of paths
    env_file:
      - path: ./default.env
        required: true                # the default: a missing file is an error
      - path: ./override.env
        required: false               # a missing file is skipped

`required: false` skips a file that does not exist when the service file is loaded, as
compose-go's loadEnvFile does (a file that appears later applies at the next reload or
resync); one that exists is read and checked like any other, and is then needed when a
container is created, since a container only gets the values checked at load
(healerd.config.envfile.effective_environment). `format` is refused, naming the field:
its one value, `raw` (the `docker run --env-file` reading, registered by the docker
CLI), would have to travel with the path to every later read, which keeps paths only.

Only paths are kept: the values are secrets, read when containers are created
(healerd.config.envfile). Errors show the file and line, never a value.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from healerd.config.envfile import MAX_ENV_FILES, EnvFileError, read_env_file, remember_strict
from healerd.config.errors import describe, unknown_key_reason
from healerd.config.keys import At
from healerd.config.yamlload import LineDict, LineList

_LONG_KEYS = ("path", "required")
_WARNED: set[tuple[str, str]] = set()  # (env file, name): told once, not every reload


def env_files(value: object, at: At) -> tuple[str, ...]:
    """The `env_file` key's check: its files' absolute paths, each read (and, under
    strict modes, checked) now; a missing file that is not required is left out."""
    entries: list[tuple[object, At]]
    if isinstance(value, LineList):
        if len(value) > MAX_ENV_FILES:
            at.error(f"names {len(value)} files; a service may name at most {MAX_ENV_FILES}")
            return ()
        entries = [(item, at.item(value, index)) for index, item in enumerate(value)]
    elif isinstance(value, str) and value:
        entries = [(value, at)]
    else:  # a mapping only as a list's item, as in Compose
        at.error(f"must be a path or a list of paths, not {describe(value)}")
        return ()
    paths: list[str] = []
    seen: set[str] = set()
    for item, item_at in entries:
        entry = _entry(item, item_at)
        if entry is None:
            continue
        written, required, path_at = entry
        path = _absolute(written, at.context.base_dir)
        if str(path) in seen:
            path_at.error(f"{written!r} is listed twice")
            continue
        seen.add(str(path))
        if required or os.path.lexists(path):
            paths.append(str(path))
            _read(path, path_at)
    return tuple(paths)


def _entry(item: object, at: At) -> tuple[str, bool, At] | None:
    """(the path as written, whether it is required, where its file is reported) of one
    entry, a path or a mapping; None when it is reported."""
    if isinstance(item, str) and item:
        return item, True, at
    if not isinstance(item, LineDict):
        at.error(f"must be a path, or a mapping with path and required, not {describe(item)}")
        return None
    for key in item:
        if key not in (*_LONG_KEYS, "format"):
            at.key(item, key).error(unknown_key_reason(key, _LONG_KEYS))
    if item.get("format") is not None:
        at.key(item, "format").error(
            "is not supported: healerd reads env files in Compose's own format only "
            "(`raw`, the `docker run --env-file` reading, is not): remove format"
        )
        return None
    path, required = item.get("path"), item.get("required")
    if not isinstance(path, str) or not path:
        where = at.here("path") if path is None else at.key(item, "path")
        where.error("is required: the env file's path" if path is None else "must be a path")
        return None
    if required is not None and not isinstance(required, bool):
        at.key(item, "required").error(f"must be true or false, not {describe(required)}")
        return None
    return path, required is not False, at.key(item, "path")


def _absolute(written: str, base: Path | None) -> Path:
    path = Path(written)
    if base is not None and not path.is_absolute():
        path = base / path
    return Path(posixpath.normpath(path.absolute()))


def _read(path: Path, at: At) -> None:
    """Reads the file as a container's creation will: its errors reported; a warning for
    each name alone that the project's variables set, which `docker compose` would pass
    and healerd leaves out (it reads env files without the project's variables), once."""
    strict = at.context.strict_modes
    remember_strict(str(path), strict)
    left_out: list[tuple[int, str]] = []
    try:
        read_env_file(path, strict_modes=strict, left_out=left_out)
    except EnvFileError as exc:
        error = exc.error
        at.error(error.reason if exc.refused else f"{error.where}: {error.reason}")
        return
    for line, name in left_out:
        if name in at.context.variables and (str(path), name) not in _WARNED:
            _WARNED.add((str(path), name))
            at.warn(
                f"{path}:{line}: {name} alone is left out: healerd reads env files without "
                f"the project's variables (docker compose would give it the project's "
                f"{name}); to pass that, name it in the service's environment: [{name}]"
            )
