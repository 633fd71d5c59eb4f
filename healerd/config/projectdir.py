"""A project directory in conf.d (issue 34): a stack kept as `docker compose` keeps it.

A directory in conf.d, or a symbolic link to one (`ln -s /opt/stacks/nextcloud
/etc/healerd/conf.d/nextcloud`), holding a Compose file by one of Compose's names or a
`.env`, is one project; other directories there (a backup, a checkout's `.git`) are not
read. What is read, in Compose's order:

- the directory's `.env` (the project's variables, its `${VAR}`s expanded; healerd's own
  environment adds only the names healerd.yaml's interpolate_environment lists, over
  it), including `COMPOSE_FILE` (joined with `COMPOSE_PATH_SEPARATOR`, default `:`),
  `COMPOSE_PROFILES` (`*`: all) and `COMPOSE_PROJECT_NAME` (else set to the project's
  name, from the files' `name:` or the directory, before the files are interpolated);
- the Compose files: those COMPOSE_FILE names (from the project directory), else the
  first of compose.yaml, compose.yml, docker-compose.yaml, docker-compose.yml and its
  override (compose.override.yaml ... as Compose pairs them), each interpolated with
  the variables, its `include` and `extends` resolved, then merged in order by the
  Compose specification's merge rules (healerd.config.merge).

The project directory is the directory the link leads to (or, as in Compose, the first
Compose file's when COMPOSE_FILE names one elsewhere): relative paths start there, and
its name (normalised as Compose does) names the project unless COMPOSE_PROJECT_NAME
or `name:` does, so a stack moved from `docker compose up` keeps its networks and
volumes. Under strict modes the directory and every directory above it must be
trusted, and every file is read through the trust checks. A project is checked and
applied whole: an error in any of its files keeps its last good state, and names the
file, line and field at fault.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Mapping
from pathlib import Path

from healerd.config.errors import ConfigError
from healerd.config.interpolate import project_env_values, untrusted_project
from healerd.config.keys import At, Context
from healerd.config.project import normalised_name
from healerd.config.projectread import (
    DOTENV,
    PROJECT_NAME_VARIABLE,
    ProjectReader,
    resolve_unset,
    with_project_name,
)
from healerd.config.servicefile import FileResult, checked_result, with_profiles
from healerd.config.yamlload import LineDict

COMPOSE_FILES = ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")
_OVERRIDES = {
    "compose.yaml": ("compose.override.yaml", "compose.override.yml"),
    "compose.yml": ("compose.override.yml", "compose.override.yaml"),
    "docker-compose.yaml": ("docker-compose.override.yaml", "docker-compose.override.yml"),
    "docker-compose.yml": ("docker-compose.override.yml", "docker-compose.override.yaml"),
}


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


def load_project_dir(
    path: Path,
    display: str | None = None,
    *,
    strict_modes: bool = False,
    environment: Collection[str] = (),
) -> FileResult:
    """Reads and checks one project directory as one unit; never raises."""
    file = str(path) if display is None else display
    # A link in conf.d leads to the project (its name is the target's); a path that only
    # passes through links (a git source's `live`) stays as written, so that it is stable.
    directory = Path(os.path.realpath(path)) if path.is_symlink() else Path(os.path.abspath(path))
    if not directory.is_dir():
        reason = (
            f"{directory} is not a directory (a link to one not mounted yet, or moved?): "
            "the project keeps its last good state; remove the entry to remove it"
        )
        return FileResult(file, None, (ConfigError(file, None, "directory", reason),))
    if strict_modes and (problem := untrusted_project(directory)):
        return FileResult(file, None, (ConfigError(file, None, "directory", problem),))
    errors: list[ConfigError] = []
    reader = ProjectReader(Context(directory, strict_modes), errors)
    env = reader.env(directory, [directory / DOTENV], project_env_values(environment))
    paths = compose_files(directory, env)
    if not paths:
        names = ", ".join(COMPOSE_FILES)
        reason = f"no Compose file in {directory} (looked for {names}, or COMPOSE_FILE in .env)"
        return FileResult(file, None, (ConfigError(file, None, "directory", reason),))
    # Compose's working directory is the first file's: relative paths and the default
    # name start there (the directory itself, unless COMPOSE_FILE points elsewhere).
    base = Path(os.path.normpath(paths[0].parent))
    name = normalised_name(env.get(PROJECT_NAME_VARIABLE) or base.name)
    reader.context = with_profiles(Context(base, strict_modes, project_name=name), env)
    # compose-go: the name first (from the files' name:), then set for the files' ${}s.
    variables = with_project_name(env, reader.preread_all(paths), name)
    data = reader.merged(paths, variables, 0)
    if env.get(PROJECT_NAME_VARIABLE) and isinstance(data, LineDict):
        data.pop("name", None)  # Compose: the variable wins over the files' name:
    at = At(errors, file, "", None, None, reader.context)
    reader.made.extend(resolve_unset(data, variables, at))
    sources = tuple(dict.fromkeys(reader.sources))
    result = checked_result(data, errors, tuple(reader.made), file, reader.context, sources)
    if result.services is None:
        return result
    specs = {n: dataclasses.replace(s, source_file=file) for n, s in result.services.items()}
    return dataclasses.replace(result, services=specs)
