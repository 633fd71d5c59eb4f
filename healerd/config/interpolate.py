"""Compose's interpolation of `${VAR}` in a service file (issue 16), before any check.

As the Compose specification says: `$VAR` and `${VAR}`; `${VAR:-default}` (unset or
empty) and `${VAR-default}` (unset); `${VAR:?error}` and `${VAR?error}` (an error naming
file, line and field); `${VAR:+alt}` and `${VAR+alt}`; `$$` is a literal `$`; defaults
may hold further substitutions. A variable that is not set and has no default is an
empty string with a warning naming file, line, field and variable, as Compose does (a
file must run unchanged; `${VAR:?}` makes one required). Values come from the file's
env file: `<name>.env` beside `<name>.yaml` (what Compose reads from the project's
`.env`), read through the trusted open, and from healerd's own environment only for the
names healerd.yaml's `interpolate_environment` lists (those win, as the environment does
in Compose), with COMPOSE_PROJECT_NAME set to the project's name unless given
(healerd.config.projectread); the env files' own `${VAR}`s are expanded as they are read
(healerd.config.envfile). Unlike `docker compose`, which reads the whole shell
environment: healerd's environment holds what its unit gives it (credentials for a
credential helper, say), which no service file should be able to move into a
container. Only values are interpolated, never keys. A value that was a plain
(unquoted) scalar and becomes a number or a boolean is read as one, so `replicas: ${N}`
works.

No error or warning shows a variable's value: only its name. Every substitution is
recorded (a Substitution), so that views show `${NAME}` in place of its value
(healerd.config.masking).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from healerd.config.envfile import (
    MAX_INTERPOLATED,
    EnvFileError,
    Failed,
    Substituter,
    read_env_file,
)
from healerd.config.errors import ConfigError
from healerd.config.keys import At
from healerd.config.trust import FileRefused, trusted_directory
from healerd.config.yamlload import LineDict, LineList
from healerd.model import Substitution

log = logging.getLogger("healerd.config")


def project_directory(
    path: Path,
    data: object = None,
    errors: list[ConfigError] | None = None,
    file: str = "",
    *,
    strict_modes: bool = False,
) -> Path:
    """Where relative paths start: the top-level `x-healerd: {project_directory: DIR}`
    (absolute, or from the file's directory), else, for a service file that is a
    symbolic link in conf.d to a Compose file kept elsewhere (`ln -s
    /srv/iotstack/docker-compose.yml /etc/healerd/conf.d/iotstack.yaml`), the directory
    of the file it leads to, else the file's directory.

    The project directory is where env files, `.env` and bind sources are found, so
    under strict modes it must be as trusted as conf.d: it and every directory above it
    writable only by root or healerd's user (the trusted read of a linked file checked
    its directory already; a declared one is checked here)."""
    ext = data.get("x-healerd") if isinstance(data, dict) else None
    declared = ext.get("project_directory") if isinstance(ext, dict) else None
    line = ext.line_of("project_directory") if isinstance(ext, LineDict) else None
    if declared is not None:
        where = path.parent / str(declared)
        if isinstance(declared, str) and declared and where.is_dir():
            if strict_modes and (problem := untrusted_project(where)) and errors is not None:
                errors.append(ConfigError(file, line, "x-healerd.project_directory", problem))
            return where
        if errors is not None:
            reason = f"{str(declared)[:200]!r} is not a directory (absolute, or from the file's)"
            errors.append(ConfigError(file, line, "x-healerd.project_directory", reason))
    return path.resolve().parent if path.is_symlink() else path.parent


def untrusted_project(directory: Path) -> str | None:
    """Why a project directory is not trusted (strict modes), or None."""
    try:
        trusted_directory(directory, "project directory")
    except FileRefused as exc:
        return str(exc)
    except OSError as exc:
        return f"project directory {directory}: cannot be checked: {exc.strerror or exc}"
    return None


def project_env(
    path: Path,
    project_dir: Path | None = None,
    *,
    strict_modes: bool,
    environment: Collection[str] = (),
) -> tuple[dict[str, str], list[ConfigError]]:
    """The variables a service file is interpolated with: the `.env` of its project
    directory when that is not conf.d (a link, or x-healerd.project_directory); then its
    `<name>.env` in conf.d; then, over both, the variables of healerd's own environment
    named in `environment` (healerd.yaml's interpolate_environment), and no other. The
    files' `${VAR}`s are expanded from those variables and the lines before them
    (healerd.config.envfile.parse_env_text)."""
    candidates = [path.with_suffix(".env")]
    project_dir = project_directory(path) if project_dir is None else project_dir
    if project_dir != path.parent:
        candidates.insert(0, project_dir / ".env")
    values: dict[str, str] = {}
    errors: list[ConfigError] = []
    over = project_env_values(environment)
    for env_path in candidates:
        if not env_path.exists():
            continue
        try:
            values.update(
                read_env_file(env_path, strict_modes=strict_modes, over=over, earlier=values)
            )
        except EnvFileError as exc:
            errors.append(exc.error)
    values.update(over)
    return values, errors


def project_env_values(environment: Collection[str]) -> dict[str, str]:
    """The variables of healerd's own environment that interpolation may read: only
    those healerd.yaml's interpolate_environment names."""
    return {name: os.environ[name] for name in environment if name in os.environ}


_NUMBER = re.compile(r"[-+]?(?:[0-9]+|[0-9]*\.[0-9]+(?:[eE][-+]?[0-9]+)?)")


def _retyped(quoted: bool, after: str) -> Any:
    """A plain scalar that was substituted is read as a number or a boolean when its new
    text is one (3, 1.5, true, false: YAML 1.2's core forms, not 1.1's yes/on); quoted
    ones and the rest stay strings. Mappings of text (environment, labels) keep the
    text either way."""
    if quoted:
        return after
    if after in ("true", "false"):
        return after == "true"
    if _NUMBER.fullmatch(after):
        return float(after) if any(c in after for c in ".eE") else int(after)
    return after


@dataclass(frozen=True)
class Made:
    """One substitution; `number`: its field's text became a number or a boolean (shown
    as one, and masked only in that field's errors)."""

    substitution: Substitution
    number: bool = False

    @property
    def field(self) -> str:
        return self.substitution.field


def interpolate(data: object, env: Mapping[str, str], at: At) -> tuple[Made, ...]:
    """Substitute in place every string value below `data` (keys stay as written); the
    substitutions made."""
    walk = _Walk(env, _hidden(data))
    walk.value(data, at)
    return tuple(walk.found)


def _hidden(data: object) -> frozenset[int]:
    """The environment and labels of each service: shown by no view, their values need
    no masking elsewhere."""
    services = data.get("services") if isinstance(data, LineDict) else None
    if not isinstance(services, LineDict):
        return frozenset()
    return frozenset(
        id(body[key])
        for body in services.values()
        if isinstance(body, LineDict)
        for key in ("environment", "labels")
        if isinstance(body.get(key), LineDict | LineList)
    )


class _Walk:
    def __init__(self, env: Mapping[str, str], hidden: frozenset[int]) -> None:
        self.env, self.hidden = env, hidden
        self.room = [MAX_INTERPOLATED]  # a `${A}` a million times must not fill memory
        self.found: list[Made] = []
        # Each mapping and list walked: the field it was first reached at, and what was
        # substituted in it. An alias reaches it again, under another field.
        self.walked: dict[int, tuple[str, list[Made]]] = {}

    def text(self, container: object, value: str, at: At) -> str:
        """`value` substituted (Failed when it cannot be)."""
        it = Substituter(self.env, at, room=self.room)
        new = it.text(value)
        shown = id(container) not in self.hidden
        where = at.field
        if not shown and isinstance(container, LineList):  # `- NAME=value`: by its name
            where = f"{where[: where.rindex('[')]}.{new.partition('=')[0]}"
        self.found += [Made(Substitution(n, v, shown, where)) for n, v in it.used]
        return new

    def value(self, data: object, at: At) -> None:
        if not isinstance(data, LineDict | LineList):
            return
        if id(data) in self.walked:  # an alias: substituted already, now also here
            first, made = self.walked[id(data)]
            self.found += [_moved(m, first, at.field) for m in made]
            return
        start = len(self.found)
        if isinstance(data, LineDict):
            self._mapping(data, at)
        else:
            self._list(data, at)
        self.walked[id(data)] = (at.field, self.found[start:])

    def _mapping(self, data: LineDict, at: At) -> None:
        for key, value in list(data.items()):
            key_at = at.key(data, key)
            if isinstance(value, str) and "$" in value:
                self._entry(data, key, value, key_at)
            else:
                self.value(value, key_at)

    def _list(self, data: LineList, at: At) -> None:
        for index, value in enumerate(data):
            item_at = at.item(data, index)
            if isinstance(value, str) and "$" in value:
                with contextlib.suppress(Failed):
                    data[index] = self.text(data, value, item_at)
            else:
                self.value(value, item_at)

    def _entry(self, data: LineDict, key: object, value: str, at: At) -> None:
        before = len(self.found)
        try:
            new = self.text(data, value, at)
        except Failed:
            data[key] = None  # reported; its own check need not complain too
            return
        data[key] = _retyped(key in data.quoted, new) if new != value else new
        data.raw[key] = new
        data.interpolated.add(key)
        if not isinstance(data[key], str):
            self.found[before:] = [replace(m, number=True) for m in self.found[before:]]


def _moved(made: Made, first: str, field: str) -> Made:
    """`made`, found under `first`, as found under `field` (an alias of it)."""
    where = field + made.field[len(first) :]
    return replace(made, substitution=replace(made.substitution, field=where))
