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
in Compose). Unlike `docker compose`, which reads the whole shell environment: healerd's
environment holds what its unit gives it (credentials for a credential helper, say),
which no service file should be able to move into a container. Only values are
interpolated, never keys. A value that was a plain (unquoted) scalar and becomes a
number or a boolean is read as one, so `replicas: ${N}` works.

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
from typing import Any, NoReturn

from healerd.config.envfile import EnvFileError, read_env_file
from healerd.config.errors import ConfigError
from healerd.config.keys import At
from healerd.config.trust import FileRefused, trusted_directory
from healerd.config.yamlload import LineDict, LineList
from healerd.model import Substitution

log = logging.getLogger("healerd.config")

_NAME = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_OPERATORS = (":-", ":?", ":+", "-", "?", "+")


class _Failed(Exception):
    pass


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
    named in `environment` (healerd.yaml's interpolate_environment), and no other."""
    candidates = [path.with_suffix(".env")]
    project_dir = project_directory(path) if project_dir is None else project_dir
    if project_dir != path.parent:
        candidates.insert(0, project_dir / ".env")
    values: dict[str, str] = {}
    errors: list[ConfigError] = []
    for env_path in candidates:
        if not env_path.exists():
            continue
        try:
            values.update(read_env_file(env_path, strict_modes=strict_modes))
        except EnvFileError as exc:
            errors.append(exc.error)
    values.update(project_env_values(environment))
    return values, errors


def project_env_values(environment: Collection[str]) -> dict[str, str]:
    """The variables of healerd's own environment that interpolation may read: only
    those healerd.yaml's interpolate_environment names."""
    return {name: os.environ[name] for name in environment if name in os.environ}


class _Interpolator:
    def __init__(self, env: Mapping[str, str], at: At) -> None:
        self.env, self.at = env, at
        self.used: list[tuple[str, str]] = []  # (name, value) of each value put in

    def text(self, s: str) -> str:
        out: list[str] = []
        i = 0
        while i < len(s):
            j = s.find("$", i)
            if j < 0 or j == len(s) - 1:
                out.append(s[i:])
                break
            out.append(s[i:j])
            nxt = s[j + 1]
            if nxt == "$":
                out.append("$")
                i = j + 2
            elif nxt == "{":
                end = _closing(s, j + 2)
                if end < 0:
                    self._fail("a '${' is not closed by '}'")
                out.append(self._braced(s[j + 2 : end]))
                i = end + 1
            elif m := _NAME.match(s, j + 1):
                out.append(self._lookup(m.group(0)))
                i = m.end()
            else:
                out.append("$")
                i = j + 1
        return "".join(out)

    def _braced(self, inner: str) -> str:
        m = _NAME.match(inner)
        if m is None:
            self._fail(_invalid(inner))
        name, rest = m.group(0), inner[m.end() :]
        if not rest:
            return self._lookup(name)
        op = next((o for o in _OPERATORS if rest.startswith(o)), None)
        if op is None:
            self._fail(_invalid(inner))
        arg = rest[len(op) :]
        value = self.env.get(name)
        present = value is not None and (value != "" or ":" not in op)
        if op.endswith("-"):
            return self._used(name, value) if present and value is not None else self.text(arg)
        if op.endswith("+"):
            return self.text(arg) if present else ""
        if not present:  # ? and :?
            state = "empty" if value == "" else "not set"
            # The message as written: interpolating it could show another value.
            self._fail(f"required variable {name} is {state}: {arg}")
        return self._used(name, value or "")

    def _lookup(self, name: str) -> str:
        value = self.env.get(name)
        if value is None:
            # Compose's behaviour: a warning and "" (a `$` meant literally is written $$).
            self.at.warn(
                f"variable {name} is not set, an empty string is used: set it in the file's "
                f".env, give a default (${{{name}:-}}), make it required (${{{name}:?reason}}) "
                "or write $$ for a literal $"
            )
            return ""
        return self._used(name, value)

    def _used(self, name: str, value: str) -> str:
        if value:
            self.used.append((name, value))
        return value

    def _fail(self, reason: str) -> NoReturn:
        self.at.error(reason)
        raise _Failed


def _invalid(inner: str) -> str:
    return f"'${{{inner[:40]}}}' is not a valid interpolation (${{NAME}}, ${{NAME:-default}}, ...)"


def _closing(s: str, start: int) -> int:
    """The index of the '}' that closes a '${' opened before `start`, nested ones skipped."""
    depth, i = 1, start
    while i < len(s):
        if s.startswith("${", i):
            depth, i = depth + 1, i + 2
            continue
        if s[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


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
        self.found: list[Made] = []
        # Each mapping and list walked: the field it was first reached at, and what was
        # substituted in it. An alias reaches it again, under another field.
        self.walked: dict[int, tuple[str, list[Made]]] = {}

    def text(self, container: object, value: str, at: At) -> str:
        """`value` substituted (_Failed when it cannot be)."""
        it = _Interpolator(self.env, at)
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
                with contextlib.suppress(_Failed):
                    data[index] = self.text(data, value, item_at)
            else:
                self.value(value, item_at)

    def _entry(self, data: LineDict, key: object, value: str, at: At) -> None:
        before = len(self.found)
        try:
            new = self.text(data, value, at)
        except _Failed:
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
