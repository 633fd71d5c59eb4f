"""Reading the files of a Compose project: each through the trust checks, interpolated
with its variables, its `include` and `extends` resolved, several merged in order
(healerd.config.projectdir for a project directory; healerd.config.servicefile for a
single file's include and extends).

What Compose takes from the project's variables besides `${VAR}` is here too:

- compose-go (loader.projectName) sets COMPOSE_PROJECT_NAME to the project's name before
  it interpolates, so `container_name: ${COMPOSE_PROJECT_NAME}-web` works: the name is
  resolved first (the last `name:` of the files, itself interpolated, else the default
  name), then set for the rest (with_project_name). A value the user set wins.
- `environment: [FOO]` or `{FOO: }`, and the same in `build.args`, take FOO's value from
  the variables, and leave FOO out when it is not set (compose-go's ResolveEnvironment
  and MappingWithEquals.Resolve; resolve_unset). Done on the merged document, as Compose
  does, so that an override's bare `FOO` replaces a base file's `FOO=x` before it is
  resolved. Each value put in is recorded like a `${FOO}` (a Made), so that errors and
  exports treat it as one (export writes `${FOO}` back, never the value). No value is
  ever reported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from healerd.config.envfile import EnvFileError, Failed, Substituter, read_env_file
from healerd.config.errors import ConfigError, missing_file
from healerd.config.extends import resolve_extends
from healerd.config.include import LoadProject, resolve_include
from healerd.config.interpolate import Made, interpolate
from healerd.config.keys import At, Context
from healerd.config.merge import merge_documents, strip_tags
from healerd.config.pairs import ENV_NAME_RE, LEFT_OUT
from healerd.config.relpaths import absolutize
from healerd.config.yamlload import LineDict, LineList, load_yaml_bytes, read_config_file
from healerd.model import Substitution

DOTENV = ".env"
PROJECT_NAME_VARIABLE = "COMPOSE_PROJECT_NAME"
# Nested include and extends files: deeper is a loop the checks missed, or a mistake.
MAX_DEPTH = 10


class ProjectReader:
    """Reads the files of one project, each through the trust checks, interpolated with
    its variables; collects errors, substitutions and the files read."""

    def __init__(self, context: Context, errors: list[ConfigError]) -> None:
        self.context = context
        self.errors = errors
        self.made: list[Made] = []
        self.sources: list[str] = []
        self.preread: dict[str, Any] = {}  # file -> parsed, not yet interpolated

    def env(self, directory: Path, files: list[Path], over: Mapping[str, str]) -> dict[str, str]:
        """Variables from `files` (those that exist), with `over` winning; their `${VAR}`s
        expanded from `over` and the lines before them, as compose-go's dotenv does."""
        values: dict[str, str] = {}
        strict = self.context.strict_modes
        for path in files:
            if not path.is_file():
                continue
            self.sources.append(str(path))
            try:
                values.update(read_env_file(path, strict_modes=strict, over=over, earlier=values))
            except EnvFileError as exc:
                self.errors.append(exc.error)
        return values | dict(over)

    def document(
        self, path: Path, env: Mapping[str, str], depth: int = 0, *, resolve: bool = True
    ) -> LineDict | None:
        """One Compose file, interpolated, its include and extends resolved (unless it is
        read for a service another file extends: resolve_extends follows that chain, and
        names a cycle across files)."""
        file = str(path)
        data = self.preread.pop(file) if file in self.preread else self.parsed(path)
        if data is None:
            return None
        at = At(self.errors, file, "", None, None, self.context)
        self.made.extend(interpolate(data, env, at))
        if not isinstance(data, LineDict):
            return data  # type: ignore[no-any-return]  # reported by the document check
        if not resolve:
            return data
        if depth >= MAX_DEPTH:
            at.error(f"include and extends nested more than {MAX_DEPTH} deep")
            return data
        resolve_include(data, path, at, self.included(env, depth))
        resolve_extends(data, path, at, lambda other: self.extended(other, env, depth))
        return data

    def parsed(self, path: Path) -> Any:
        """One Compose file read through the trust checks and parsed, not interpolated
        (None when it cannot be: reported). `preread` keeps it for `document`, so that
        the project's name can be found in its files before they are interpolated."""
        file = str(path)
        self.sources.append(file)
        raw, errors = read_config_file(
            path, file, "file", strict=self.context.strict_modes, follow_symlink=True
        )
        if raw is None and not errors:
            errors = [missing_file(file)]
        if raw is None:
            self.errors.extend(errors)
            return None
        if not raw:
            reason = "empty (still being written?): the project keeps its last good state"
            self.errors.append(ConfigError(file, None, "file", reason))
            return None
        data, errors = load_yaml_bytes(raw, file)
        self.errors.extend(errors)
        if errors:
            return None
        return LineDict() if data is None else data  # comments only: declares nothing

    def preread_all(self, paths: list[Path]) -> list[object]:
        """`paths` parsed now (parsed), kept for `document` to interpolate later."""
        self.preread.update({str(p): self.parsed(p) for p in paths})
        return [self.preread[str(p)] for p in paths]

    def extended(self, other: Path, env: Mapping[str, str], depth: int) -> LineDict | None:
        return self.document(other, env, depth + 1, resolve=False)  # it absolutizes

    def included(self, env: Mapping[str, str], depth: int) -> LoadProject:
        def load(paths: list[Path], directory: Path, env_files: list[Path]) -> LineDict | None:
            own = self.env(directory, env_files or [directory / DOTENV], env)
            data = self.merged(paths, own, depth + 1, directory)
            at = At(self.errors, str(paths[0]), "", None, None, self.context)
            self.made.extend(resolve_unset(data, own, at))  # with its own variables
            return data

        return load

    def merged(
        self, paths: list[Path], env: Mapping[str, str], depth: int, directory: Path | None = None
    ) -> LineDict | None:
        """`paths` read and merged in order; None when one cannot be read."""
        docs = [self.document(p, env, depth) for p in paths]
        if any(d is None for d in docs) or not docs:
            return None
        merged: LineDict | None = None
        for path, doc in zip(paths, docs, strict=True):
            assert doc is not None
            if directory is not None:
                absolutize(doc, directory)
            if merged is None or not isinstance(doc, LineDict) or not isinstance(merged, LineDict):
                merged = doc
                continue
            merged = merge_documents(
                merged, doc, At(self.errors, str(path), "", None, None, self.context)
            )
        if merged is not None:
            strip_tags(merged)
        return merged


def with_project_name(
    env: Mapping[str, str], docs: Iterable[object], default: str
) -> dict[str, str]:
    """`env` with COMPOSE_PROJECT_NAME, unless the user set it: the last non-empty `name:`
    of `docs` interpolated with `env` (quietly: the real interpolation reports on it),
    else `default`."""
    if env.get(PROJECT_NAME_VARIABLE):
        return dict(env)
    written = None
    for doc in docs:
        value = doc.get("name") if isinstance(doc, LineDict) else None
        if isinstance(value, str) and value:
            written = value
    name = default
    if written is not None:
        with contextlib.suppress(Failed):  # reported when the document is interpolated
            name = Substituter(env, At([], "", "name", None), quiet=True).text(written) or default
    return {**env, PROJECT_NAME_VARIABLE: name}


def resolve_unset(data: object, env: Mapping[str, str], at: At) -> tuple[Made, ...]:
    """Each service's environment variables and build args named without a value, set
    from `env` or left out (in place); the values put in."""
    services = data.get("services") if isinstance(data, LineDict) else None
    if not isinstance(data, LineDict) or not isinstance(services, LineDict):
        return ()
    made: list[Made] = []
    services_at = at.key(data, "services")
    seen: dict[int, list[tuple[str, str]]] = {}  # a list or mapping an alias shares
    for name, body in services.items():
        if not isinstance(body, LineDict):
            continue
        body_at = services_at.key(services, name)
        places = [(body.get("environment"), body_at.key(body, "environment"), False)]
        build = body.get("build")
        if isinstance(build, LineDict) and "args" in build:
            places.append((build["args"], body_at.key(body, "build").key(build, "args"), True))
        for entries, entries_at, shown in places:
            if isinstance(entries, LineDict | LineList):
                if id(entries) not in seen:
                    seen[id(entries)] = _resolve(entries, env)
                found = seen[id(entries)]
                where = entries_at.field
                made += [Made(Substitution(k, v, shown, f"{where}.{k}")) for k, v in found if v]
    return tuple(made)


def _resolve(entries: LineDict | LineList, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Resolves `entries` in place; the (name, value) put in."""
    found: list[tuple[str, str]] = []
    if isinstance(entries, LineDict):
        for key in [k for k, v in entries.items() if v is None and _named(k)]:
            if key in env:
                entries[key] = entries.raw[key] = env[key]
                entries.interpolated.add(key)  # its check takes the text as it is
                found.append((key, env[key]))
            else:
                del entries[key]
    else:
        for index, key in enumerate(entries):
            if _named(key):
                entries[index] = f"{key}={env[key]}" if key in env else LEFT_OUT
                found += [(key, env[key])] if key in env else []
    return found


def _named(key: object) -> bool:
    return isinstance(key, str) and ENV_NAME_RE.fullmatch(key) is not None
