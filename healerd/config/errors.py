"""Config problems as values, so one bad file can be reported whole and never crash healerd."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ConfigError:
    """One problem, located well enough for an operator to fix it without guessing.

    `field` is a dotted path such as `services.web.environment.FOO`; it is empty for
    problems with the document as a whole. `line` and `column` count from 1 and point at
    the key (or list item) that `field` names.
    """

    file: str
    line: int | None
    field: str
    reason: str
    column: int | None = None

    @property
    def where(self) -> str:
        """`file`, `file:line` or `file:line:column`, as compilers print it."""
        if self.line is None:
            return self.file
        if self.column is None:
            return f"{self.file}:{self.line}"
        return f"{self.file}:{self.line}:{self.column}"

    def __str__(self) -> str:
        where = self.where
        return f"{where}: {self.field}: {self.reason}" if self.field else f"{where}: {self.reason}"


class SettingsError(Exception):
    """Bad daemon settings are fatal at startup, unlike bad service files; carries every error."""

    def __init__(self, errors: Iterable[ConfigError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors) or "invalid settings")


# Where the file being read was named (an include's path, an extends' file), set by the
# reference around the read (healerd.config.keys.named_at): a file that does not exist is
# then said there, with the line that names it, not only by its own path.
NAMED_AT: ContextVar[ConfigError | None] = ContextVar("healerd_named_at", default=None)


def missing_file(file: str) -> ConfigError:
    """`file` does not exist: said where it was named, if it was."""
    named = NAMED_AT.get()
    if named is None:
        return ConfigError(file, None, "file", "cannot read: the file does not exist")
    return replace(named, reason=f"{file}: the file does not exist")


def unknown_key_reason(key: object, known: Iterable[str]) -> str:
    """Typos are the usual cause of unknown keys, so point at the nearest known one."""
    reason = f"unknown key {key!r}"
    if isinstance(key, str):
        close = difflib.get_close_matches(key, sorted(known), n=1)
        if close:
            reason += f" (did you mean {close[0]!r}?)"
    return reason


def describe(value: object) -> str:
    """Names YAML types the way the file's author thinks of them."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def sort_errors(errors: Iterable[ConfigError]) -> tuple[ConfigError, ...]:
    """Line order reads like the file; errors without a line go first (they are file-wide)."""
    return tuple(sorted(errors, key=lambda e: (-1 if e.line is None else e.line, e.column or 0)))
