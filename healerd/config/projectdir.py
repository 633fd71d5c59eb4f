"""A project directory in conf.d (issue 34): a stack kept as `docker compose` keeps it.

A directory in conf.d, or a symbolic link to one (`ln -s /opt/stacks/nextcloud
/etc/healerd/conf.d/nextcloud`), holding a Compose file by one of Compose's names or a
`.env`, is one project; other directories there (a backup, a checkout's `.git`) are not
read. What is read, in Compose's order:

- the directory's `.env` (the project's variables; healerd's own environment adds only
  the names healerd.yaml's interpolate_environment lists, over it), including
  `COMPOSE_FILE` (joined with `COMPOSE_PATH_SEPARATOR`, default `:`), `COMPOSE_PROFILES`
  and `COMPOSE_PROJECT_NAME`;
- the Compose files: those COMPOSE_FILE names (from the project directory), else the
  first of compose.yaml, compose.yml, docker-compose.yaml, docker-compose.yml and its
  override (compose.override.yaml ... as Compose pairs them), each interpolated with
  the variables, its `include` and `extends` resolved, then merged in order by the
  Compose specification's merge rules (healerd.config.merge).

The project directory is the directory the link leads to: relative paths start there,
and its name (normalised as Compose does) names the project unless COMPOSE_PROJECT_NAME
or `name:` does, so a stack moved from `docker compose up` keeps its networks and
volumes. Under strict modes the directory and every directory above it must be
trusted, and every file is read through the trust checks. A project is checked and
applied whole: an error in any of its files keeps its last good state, and names the
file, line and field at fault.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from healerd.config.envfile import EnvFileError, read_env_file
from healerd.config.errors import ConfigError
from healerd.config.extends import resolve_extends
from healerd.config.include import resolve_include
from healerd.config.interpolate import Made, interpolate, project_env_values
from healerd.config.keys import At, Context
from healerd.config.merge import merge_documents, strip_tags
from healerd.config.project import normalised_name
from healerd.config.relpaths import absolutize
from healerd.config.servicefile import FileResult, checked_result, with_profiles
from healerd.config.trust import FileRefused, trusted_directory
from healerd.config.yamlload import LineDict, load_yaml_bytes, read_config_file

COMPOSE_FILES = ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")
_OVERRIDES = {
    "compose.yaml": ("compose.override.yaml", "compose.override.yml"),
    "compose.yml": ("compose.override.yml", "compose.override.yaml"),
    "docker-compose.yaml": ("docker-compose.override.yaml", "docker-compose.override.yml"),
    "docker-compose.yml": ("docker-compose.override.yml", "docker-compose.override.yaml"),
}
DOTENV = ".env"
# How include reads a project: its files, its project directory, its env files.
LoadProject = Callable[[list[Path], Path, list[Path]], "LineDict | None"]
# Nested include and extends files: deeper is a loop the checks missed, or a mistake.
MAX_DEPTH = 10


def is_project_dir(path: Path) -> bool:
    """Whether a directory in conf.d is a project (see the module docstring)."""
    try:
        return path.is_dir() and any((path / name).is_file() for name in (*COMPOSE_FILES, DOTENV))
    except OSError:
        return False


def compose_files(directory: Path, env: Mapping[str, str]) -> list[Path]:
    """The project's Compose files in merge order (empty: none found)."""
    listed = env.get("COMPOSE_FILE", "").strip()
    if listed:
        separator = env.get("COMPOSE_PATH_SEPARATOR") or ":"
        return [directory / p.strip() for p in listed.split(separator) if p.strip()]
    for name in COMPOSE_FILES:
        if (directory / name).is_file():
            override = next((o for o in _OVERRIDES[name] if (directory / o).is_file()), None)
            return [directory / name] + ([directory / override] if override else [])
    return []


class _Reader:
    """Reads the files of one project, each through the trust checks, interpolated with
    its variables; collects errors, substitutions and the files read."""

    def __init__(self, context: Context, errors: list[ConfigError]) -> None:
        self.context = context
        self.errors = errors
        self.made: list[Made] = []
        self.sources: list[str] = []

    def env(self, directory: Path, files: list[Path], over: Mapping[str, str]) -> dict[str, str]:
        """Variables from `files` (those that exist), with `over` winning."""
        values: dict[str, str] = {}
        for path in files:
            if not path.is_file():
                continue
            self.sources.append(str(path))
            try:
                values.update(read_env_file(path, strict_modes=self.context.strict_modes))
            except EnvFileError as exc:
                self.errors.append(exc.error)
        return values | dict(over)

    def document(self, path: Path, env: Mapping[str, str], depth: int = 0) -> LineDict | None:
        """One Compose file, interpolated, its include and extends resolved."""
        file = str(path)
        self.sources.append(file)
        raw, errors = read_config_file(
            path, file, "file", strict=self.context.strict_modes, follow_symlink=True
        )
        if raw is None and not errors:
            errors = [ConfigError(file, None, "file", "cannot read: the file does not exist")]
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
        if data is None:
            return LineDict()  # comments only: declares nothing
        at = At(self.errors, file, "", None, None, self.context)
        self.made.extend(interpolate(data, env, at))
        if not isinstance(data, LineDict):
            return data  # type: ignore[no-any-return]  # reported by the document check
        if depth >= MAX_DEPTH:
            at.error(f"include and extends nested more than {MAX_DEPTH} deep")
            return data
        resolve_include(data, path, at, self._included(env, depth))
        resolve_extends(data, path, at, lambda other: self._extended(other, path, env, depth))
        return data

    def _extended(
        self, other: Path, by: Path, env: Mapping[str, str], depth: int
    ) -> LineDict | None:
        data = self.document(other, env, depth + 1)
        if data is not None and other.parent != by.parent:
            absolutize(data, other.parent)
        return data

    def _included(self, env: Mapping[str, str], depth: int) -> LoadProject:
        def load(paths: list[Path], directory: Path, env_files: list[Path]) -> LineDict | None:
            own = self.env(directory, env_files or [directory / DOTENV], env)
            return self.merged(paths, own, depth + 1, directory)

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


def _untrusted(directory: Path) -> str | None:
    try:
        trusted_directory(directory, "project directory")
    except FileRefused as exc:
        return str(exc)
    except OSError as exc:
        return f"project directory {directory}: cannot be checked: {exc.strerror or exc}"
    return None


def load_project_dir(
    path: Path,
    display: str | None = None,
    *,
    strict_modes: bool = False,
    environment: Collection[str] = (),
) -> FileResult:
    """Reads and checks one project directory as one unit; never raises."""
    file = str(path) if display is None else display
    directory = path.resolve()
    if strict_modes and (problem := _untrusted(directory)):
        return FileResult(file, None, (ConfigError(file, None, "directory", problem),))
    errors: list[ConfigError] = []
    reader = _Reader(Context(directory, strict_modes), errors)
    env = reader.env(directory, [directory / DOTENV], project_env_values(environment))
    name = normalised_name(env.get("COMPOSE_PROJECT_NAME") or directory.name)
    reader.context = with_profiles(Context(directory, strict_modes, project_name=name), env)
    paths = compose_files(directory, env)
    if not paths:
        names = ", ".join(COMPOSE_FILES)
        reason = f"no Compose file in {directory} (looked for {names}, or COMPOSE_FILE in .env)"
        return FileResult(file, None, (ConfigError(file, None, "directory", reason),))
    data = reader.merged(paths, env, 0)
    if env.get("COMPOSE_PROJECT_NAME") and isinstance(data, LineDict):
        data.pop("name", None)  # Compose: the variable wins over the files' name:
    sources = tuple(dict.fromkeys(reader.sources))
    result = checked_result(data, errors, tuple(reader.made), file, reader.context, sources)
    if result.services is None:
        return result
    specs = {n: dataclasses.replace(s, source_file=file) for n, s in result.services.items()}
    return dataclasses.replace(result, services=specs)
