"""The key-table mechanism that service files and healerd.yaml are both checked with.

Each file kind has one table of Key rows (name, type, default, check, doc). One loop,
check_keys, runs every row's check, so adding a key is one row; healerd.config.schema
turns the same rows into the JSON Schema, docs/reference/config.md and the man pages,
so they cannot disagree.
Checks never raise: they report through an At and go on, so that every error of a file
is found in one pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from healerd.config.errors import NAMED_AT, ConfigError, describe, unknown_key_reason
from healerd.config.yamlload import LineDict, LineList

_log = logging.getLogger("healerd.config")

T = TypeVar("T")
# The most entries a list or mapping of a service may hold (command, environment, ports,
# ...): more is a generated file gone wrong, and a container nobody can run.
MAX_ENTRIES = 1000


@dataclass(frozen=True)
class Context:
    """What checks need beyond the text: where relative env_file paths start, and whether
    the files they name must pass the ownership and mode checks."""

    base_dir: Path | None = None
    strict_modes: bool = False
    # COMPOSE_PROFILES of the file's variables: the profiles whose services run.
    profiles: frozenset[str] = frozenset()
    # A project directory's name (healerd.config.projectdir): the project's name when
    # the files give no `name:` (a single file's default is its own name).
    project_name: str | None = None
    # The names (never the values) of the file's variables: an env file's `KEY` alone
    # that names one is left out with a warning (healerd.config.envfilekey).
    variables: frozenset[str] = frozenset()


@dataclass(frozen=True)
class At:
    """Where a value sits, so that a check can report against its field, line and column."""

    errors: list[ConfigError]
    file: str
    field: str
    line: int | None
    column: int | None = None
    context: Context = Context()

    def error(self, reason: str) -> None:
        self.errors.append(ConfigError(self.file, self.line, self.field, reason, self.column))

    def warn(self, reason: str) -> None:
        """Logged, not refused (Compose's warnings): located as an error would be."""
        _log.warning("%s", ConfigError(self.file, self.line, self.field, reason, self.column))

    def child(
        self, name: object, line: int | None, column: int | None = None, *, index: bool = False
    ) -> At:
        if index:
            path = f"{self.field}[{name}]"
        else:
            path = f"{self.field}.{name}" if self.field else str(name)
        return At(self.errors, self.file, path, line, column, self.context)

    def here(self, name: object) -> At:
        """A child field reported at this position (for a missing key, say)."""
        return self.child(name, self.line, self.column)

    def key(self, mapping: LineDict, key: object) -> At:
        """The key's field, reported against the file it came from (a merged document
        holds keys from several)."""
        name = mapping.key_text.get(key, key)
        return self._in(mapping.file_of(key)).child(
            name, mapping.line_of(key), mapping.column_of(key)
        )

    def item(self, seq: LineList, index: int, name: str | None = None) -> At:
        line, column = seq.line_at(index), seq.column_at(index)
        at = self._in(seq.file_at(index))
        if name:
            return at.child(name, line, column)
        return at.child(index, line, column, index=True)

    def _in(self, file: str | None) -> At:
        return self if file is None or file == self.file else replace(self, file=file)


@contextmanager
def named_at(at: At) -> Iterator[None]:
    """Files read in this block were named at `at` (healerd.config.errors.missing_file)."""
    token = NAMED_AT.set(ConfigError(at.file, at.line, at.field, "", at.column))
    try:
        yield
    finally:
        NAMED_AT.reset(token)


def top_section(data: LineDict, key: str, at: At) -> tuple[LineDict, At] | None:
    """A top-level section that maps names to settings (`networks`, `volumes`,
    `secrets`, `configs`), with where it is; None when absent or reported as malformed."""
    section = data.get(key)
    if section is None:
        return None
    section_at = at.key(data, key)
    if not isinstance(section, LineDict):
        section_at.error(f"must map names to their settings, not {describe(section)}")
        return None
    return section, section_at


Check = Callable[[Any, At], Any]


@dataclass(frozen=True)
class Key:
    """One key of a file (or of a mapping inside one).

    `type` and `doc` are what the reference says of it, `example` is YAML for a value, and
    `default` is the model's value when the key is absent (or, in a service file, null).
    `schema` is the JSON Schema of a value that passes `check`, as closely as JSON Schema
    can say it (checks that span several values, such as a fixed host port with
    replicas > 1, are beyond it). Keys of nested mappings have no `check`: their parent's
    check reads them, and `children` lists them.
    """

    name: str
    type: str
    doc: str
    example: str
    schema: Mapping[str, Any] = field(default_factory=dict)
    default: Any = None
    check: Check | None = None
    compose: str = ""
    attr: str = ""
    required: bool = False
    children: tuple[Key, ...] = ()
    # The default in words, where the model's value says nothing to a reader ("all but
    # heal" for a target's events); the docs show it instead of `default`.
    default_doc: str = ""


def check_keys(
    body: Mapping[Any, Any],
    keys: Iterable[Key],
    at_of: Callable[[str], At],
    *,
    null_is_absent: bool = True,
) -> tuple[dict[str, Any], frozenset[str]]:
    """Runs the check of every key in `keys` that `body` holds.

    Returns the values by model attribute, an absent key's being its default, and the
    names of the keys whose check reported a problem (for checks that span keys). A
    check's value is kept even when it reported one, so later checks still see it.
    """
    values: dict[str, Any] = {}
    failed: set[str] = set()
    for key in keys:
        if key.check is None:
            continue  # a nested key: its parent's check reads it
        value = body.get(key.name)
        if key.name not in body or (value is None and null_is_absent):
            values[key.attr or key.name] = key.default
            continue
        at = at_of(key.name)
        before = len(at.errors)
        values[key.attr or key.name] = key.check(value, at)
        if len(at.errors) > before:
            failed.add(key.name)
    return values, frozenset(failed)


def optional(body: LineDict, at: At, key: str, check: Callable[[Any, At], T], default: T) -> T:
    """Null counts as absent, as in Compose, so commented-out lists leave a key empty."""
    value = body.get(key)
    return default if value is None else check(value, at.key(body, key))


def unknown_keys(body: LineDict, at: At, known: Iterable[str]) -> None:
    """Reports every key that is not in `known`; `x-` keys are the author's own, ignored."""
    names = frozenset(known)
    for key in body:
        if not (isinstance(key, str) and key.startswith("x-")) and key not in names:
            at.key(body, key).error(unknown_key_reason(key, names))


def parsed(parse: Callable[[Any], T]) -> Callable[[Any, At], T | None]:
    """A check from a parser that raises ValueError whose message is the reason."""

    def check(value: Any, at: At) -> T | None:
        try:
            return parse(value)
        except ValueError as exc:
            at.error(str(exc))
            return None

    return check
