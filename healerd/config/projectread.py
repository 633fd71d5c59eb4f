"""Reading the files of a Compose project: each through the trust checks, interpolated
with its variables, its `include` and `extends` resolved, several merged in order
(healerd.config.projectdir for a project directory; healerd.config.servicefile for a
single file's include and extends)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from healerd.config.envfile import EnvFileError, read_env_file
from healerd.config.errors import ConfigError, missing_file
from healerd.config.extends import resolve_extends
from healerd.config.include import LoadProject, resolve_include
from healerd.config.interpolate import Made, interpolate
from healerd.config.keys import At, Context
from healerd.config.merge import merge_documents, strip_tags
from healerd.config.relpaths import absolutize
from healerd.config.yamlload import LineDict, load_yaml_bytes, read_config_file

DOTENV = ".env"
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

    def document(
        self, path: Path, env: Mapping[str, str], depth: int = 0, *, resolve: bool = True
    ) -> LineDict | None:
        """One Compose file, interpolated, its include and extends resolved (unless it is
        read for a service another file extends: resolve_extends follows that chain, and
        names a cycle across files)."""
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
        if data is None:
            return LineDict()  # comments only: declares nothing
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

    def extended(self, other: Path, env: Mapping[str, str], depth: int) -> LineDict | None:
        return self.document(other, env, depth + 1, resolve=False)  # it absolutizes

    def included(self, env: Mapping[str, str], depth: int) -> LoadProject:
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
