"""env_file: environment values kept out of the service file, read at reconcile time.

Compose semantics: `env_file` is a path or a list of paths, relative to the directory of
the service file that names them; later files override earlier ones, and the service's
`environment` overrides them all. Each line is one of:

    # a comment              (only at the start of a line, after optional blanks)
                             (blank lines are ignored)
    KEY=VALUE                VALUE runs to the end of the line; " #" starts a comment
    KEY=                     an empty value
    export KEY=VALUE         the `export ` prefix of shell files is accepted
    KEY='VALUE'              single quotes: taken literally
    KEY="VALUE"              double quotes: \\n \\t \\r \\" \\\\ are unescaped
    KEY                      a name alone: see below

There is no multi-line value. A project's `.env` (the variables `${VAR}` reads; `over`
given to parse_env_text) has its unquoted and double-quoted values expanded as
compose-go's dotenv parser does: `${VAR}` forms (Substituter, below) from `over`
(the environment healerd lets interpolation read) first, then the file's earlier lines,
then earlier files; `$$` and, in double quotes, `\\$` are a literal `$`; single-quoted
values stay literal. A service's `env_file` is not expanded: it is read again when a
container is created, without the project's variables at hand. A name alone takes its
value as compose-go's dotenv does (its lookup), from `over`, this file's earlier lines
and earlier files, and is left out when none sets it: so in a service's env file, read
without them, it is always left out (healerd.config.envfilekey warns when the project's
variables set it, as `docker compose` would pass it). Values are secrets: no
error, log line or exception here ever shows one, only the file and line. The check of
the `env_file` key (healerd.config.envfilekey) reads each file at load time too, so that
a missing or malformed one is reported with the service file's other errors.

Every read, at load and when a container is created (effective_environment), goes
through healerd.config.trust.read_trusted: under strict modes the file and every
directory on the way to it must be trusted (those that hold a link too), a symbolic
link as the file itself is refused, and a FIFO, a device or a file over 1 MiB is
refused in any mode. At creation the values read must have the digest taken at load.
"""

from __future__ import annotations

import hashlib
import re
from collections import ChainMap
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from healerd.config.errors import ConfigError
from healerd.config.keys import At
from healerd.config.trust import FileRefused, read_trusted
from healerd.model import ServiceSpec

_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$"}
MAX_ENV_FILE_SIZE = 2**20  # the most healerd reads of one env file
MAX_ENV_FILES = 32  # env files one service may name
MAX_DEPTH = 32  # `${A:-${B:-...}}` nested at most so deep
MAX_INTERPOLATED = 16 * 2**20  # what a service file's ${}s may expand to, all together


# --- The `${VAR}` text engine -------------------------------------------------------------
# Compose's substitution grammar (compose-go's template package), shared by a project's
# `.env` (parse_env_text) and the interpolation of service files (healerd.config.
# interpolate, which reads env files through this module, so the engine sits here):
# `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`, `${VAR?error}`,
# `${VAR:+alt}`, `${VAR+alt}`, nested defaults, `$$` for a literal `$`. No error or
# warning shows a value: only a variable's name, or a `?` message as written.

_NAME = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_OPERATORS = (":-", ":?", ":+", "-", "?", "+")


class Failed(Exception):
    """A substitution reported as an error at its At: the text cannot be used."""


class Substituter:
    """Substitutes the `${VAR}`s of text from `env`, reporting at `at`. `quiet`: no
    warning for an unset variable (a first look at text that is read again later).
    `dotenv`: the text is a `.env` value, itself a secret: an error never quotes it, nor
    names what it refers to, and a variable it names that is not set is an error (a `$`
    meant literally in a password must not turn it silently into another). `room`: the
    bytes the text may still expand to, shared by the lines of one file (a few lines that
    each double the one before must not fill the memory)."""

    def __init__(
        self,
        env: Mapping[str, str],
        at: At,
        *,
        quiet: bool = False,
        dotenv: bool = False,
        room: list[int] | None = None,
    ) -> None:
        self.env, self.at, self.quiet, self.dotenv = env, at, quiet, dotenv
        self.used: list[tuple[str, str]] = []  # (name, value) of each value put in
        self.room = room
        self._depth = 0

    def text(self, s: str) -> str:
        out: list[str] = []
        size = 0
        i = 0
        while i < len(s):
            j = s.find("$", i)
            if j < 0 or j == len(s) - 1:
                piece, i = s[i:], len(s)
            elif j > i:
                piece, i = s[i:j], j
            elif s[j + 1] == "$":
                piece, i = "$", j + 2
            elif s[j + 1] == "{":
                end = _closing(s, j + 2)
                if end < 0:
                    self._fail("a '${' is not closed by '}'")
                piece, i = self._braced(s[j + 2 : end]), end + 1
            elif m := _NAME.match(s, j + 1):
                piece, i = self._lookup(m.group(0)), m.end()
            else:
                piece, i = "$", j + 1
            out.append(piece)
            size += len(piece)
            if self.room is not None and size > self.room[0]:
                self._fail(
                    "expands to more than a file may (1 MiB for a .env, 16 MiB for a "
                    "service file, all its values together)"
                )
        if self.room is not None:
            self.room[0] -= size
        return "".join(out)

    def _braced(self, inner: str) -> str:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                self._fail(f"'${{' nested more than {MAX_DEPTH} deep")
            return self._braced_at(inner)
        finally:
            self._depth -= 1

    def _braced_at(self, inner: str) -> str:
        m = _NAME.match(inner)
        if m is None:
            self._fail(self._invalid(inner))
        name, rest = m.group(0), inner[m.end() :]
        if not rest:
            return self._lookup(name)
        op = next((o for o in _OPERATORS if rest.startswith(o)), None)
        if op is None:
            self._fail(self._invalid(inner))
        arg = rest[len(op) :]
        value = self.env.get(name)
        present = value is not None and (value != "" or ":" not in op)
        if op.endswith("-"):
            return self._used(name, value) if present and value is not None else self.text(arg)
        if op.endswith("+"):
            return self.text(arg) if present else ""
        if not present:  # ? and :?
            state = "empty" if value == "" else "not set"
            if self.dotenv:  # the message is part of the value
                self._fail(f"a required variable of this value is {state}")
            # The message as written: interpolating it could show another value.
            self._fail(f"required variable {name} is {state}: {arg}")
        return self._used(name, value or "")

    def _lookup(self, name: str) -> str:
        value = self.env.get(name)
        if value is None and self.quiet:
            return ""
        if value is None and self.dotenv:  # its name may be a piece of a password
            self._fail(
                "a '$' in this value names a variable that is not set (not shown): write "
                "$$ for a literal $, or single-quote the value, or set it on a line above"
            )
        if value is None:
            # Compose's behaviour: a warning and "" (a `$` meant literally is written $$).
            where = "earlier in this file" if self.dotenv else "in the file's .env"
            self.at.warn(
                f"variable {name} is not set, an empty string is used: set it {where}, "
                f"give a default (${{{name}:-}}), make it required (${{{name}:?reason}}) "
                "or write $$ for a literal $"
            )
            return ""
        return self._used(name, value)

    def _used(self, name: str, value: str) -> str:
        if value:
            self.used.append((name, value))
        return value

    def _invalid(self, inner: str) -> str:
        shown = "a '${'" if self.dotenv else f"'${{{inner[:40]}}}'"
        return f"{shown} is not a valid interpolation (${{NAME}}, ${{NAME:-default}}, ...)"

    def _fail(self, reason: str) -> NoReturn:
        self.at.error(reason)
        raise Failed


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


class EnvFileError(ValueError):
    """An env file that cannot be read or parsed; `error` locates it, never showing a value.
    `refused`: refused by read_trusted (its reason names the file)."""

    def __init__(self, error: ConfigError, *, refused: bool = False) -> None:
        self.error = error
        self.refused = refused
        super().__init__(str(error))


def _value(raw: str, dotenv: bool = False) -> tuple[str, bool]:
    """The value and whether `${VAR}` expansion applies to it (not single-quoted). In a
    `dotenv`, a double-quoted `\\$` is kept as `$$`, so that expansion leaves a `$`.
    Raises ValueError with a message that never contains the value."""
    text = raw.lstrip()
    if text[:1] == "'":
        end = text.find("'", 1)
        if end < 0:
            raise ValueError("the single quote is not closed (multi-line values are not supported)")
        rest, value = text[end + 1 :], text[1:end]
    elif text[:1] == '"':
        chars: list[str] = []
        i = 1
        while i < len(text) and text[i] != '"':
            if text[i] == "\\" and i + 1 < len(text):
                escaped = "$$" if dotenv and text[i + 1] == "$" else None
                chars.append(escaped or _ESCAPES.get(text[i + 1], "\\" + text[i + 1]))
                i += 2
            else:
                chars.append(text[i])
                i += 1
        if i >= len(text):
            raise ValueError("the double quote is not closed (multi-line values are not supported)")
        rest, value = text[i + 1 :], "".join(chars)
    else:
        comment = re.search(r"\s#", text)
        return (text[: comment.start()] if comment else text).rstrip(), True
    rest = rest.strip()
    if rest and not rest.startswith("#"):
        raise ValueError("has text after the closing quote")
    return value, text[:1] == '"'


def parse_env_text(
    text: str,
    file: str,
    *,
    over: Mapping[str, str] | None = None,
    earlier: Mapping[str, str] | None = None,
    left_out: list[tuple[int, str]] | None = None,
) -> tuple[tuple[tuple[str, str], ...], list[ConfigError]]:
    """KEY=VALUE pairs in file order (a repeated key: the last wins) and every error found.
    With `over`, a project's `.env`: values are expanded (see the module docstring) from
    `over`, then this file's earlier lines, then `earlier` (the files read before it); a
    name alone takes its value from the same, as compose-go's lookup does. `left_out`
    gets (line, name) of each name alone that none of them sets."""
    pairs: dict[str, str] = {}
    lookup = None if over is None else ChainMap(dict(over), pairs, dict(earlier or {}))
    errors: list[ConfigError] = []
    room = [MAX_ENV_FILE_SIZE]  # what the file's values may expand to, all together
    # Lines end at \n only, as for `docker run --env-file` (str.splitlines would also cut
    # a value at \f, \x1c or U+2028); a \r before it goes too.
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("export "):
            stripped = stripped[len("export ") :].lstrip()
        key, sep, raw = stripped.partition("=")
        key = key.rstrip()
        if not sep and _KEY_RE.fullmatch(key):
            _name_alone(key, number, lookup, pairs, left_out)
            continue
        if not sep:
            reason = (
                "is not KEY=VALUE, nor a variable's name alone (the line is not shown: it "
                "may hold a secret)"
            )
            errors.append(ConfigError(file, number, "env_file", reason))
            continue
        if not _KEY_RE.fullmatch(key):
            reason = (
                "the name before '=' must be letters, digits, '_', '.' or '-', not starting "
                "with a digit (the line is not shown: it may hold a secret)"
            )
            errors.append(ConfigError(file, number, "env_file", reason))
            continue
        try:
            value, expand = _value(raw, lookup is not None)
        except ValueError as exc:
            errors.append(ConfigError(file, number, f"env_file.{key}", str(exc)))
            continue
        if expand and lookup is not None and "$" in value:
            at = At(errors, file, f"env_file.{key}", number)
            try:
                value = Substituter(lookup, at, dotenv=True, room=room).text(value)
            except Failed:
                continue  # reported, without the value
        pairs.pop(key, None)
        pairs[key] = value
    return tuple(pairs.items()), errors


def _name_alone(
    key: str,
    number: int,
    lookup: Mapping[str, str] | None,
    pairs: dict[str, str],
    left_out: list[tuple[int, str]] | None,
) -> None:
    """A `KEY` line: compose-go's dotenv takes KEY's value from its lookup (the project's
    variables, then the lines read before) and leaves KEY out when that has none."""
    value = None if lookup is None else lookup.get(key)
    if value is None:
        if left_out is not None:
            left_out.append((number, key))
        return
    pairs.pop(key, None)
    pairs[key] = value


def read_env_file(
    path: Path,
    *,
    strict_modes: bool = True,
    over: Mapping[str, str] | None = None,
    earlier: Mapping[str, str] | None = None,
    left_out: list[tuple[int, str]] | None = None,
) -> tuple[tuple[str, str], ...]:
    """One env file's pairs, read through healerd.config.trust.read_trusted (at most
    MAX_ENV_FILE_SIZE; with `strict_modes`, the file and every directory above it must be
    trusted); a project's `.env` with `over` (expanded: parse_env_text, which also fills
    `left_out`). Raises EnvFileError (the first problem) if it is unusable."""
    file = str(path)
    try:
        raw = read_trusted(path, "env file", strict=strict_modes, limit=MAX_ENV_FILE_SIZE)
    except FileRefused as exc:
        raise EnvFileError(ConfigError(file, None, "env_file", str(exc)), refused=True) from None
    except OSError as exc:
        reason = f"cannot read: {exc.strerror or type(exc).__name__}"
        raise EnvFileError(ConfigError(file, None, "env_file", reason)) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise EnvFileError(ConfigError(file, line, "env_file", "not valid UTF-8 text")) from None
    pairs, errors = parse_env_text(text, file, over=over, earlier=earlier, left_out=left_out)
    if errors:
        raise EnvFileError(errors[0])
    return pairs


# The strict_modes each env file was last checked under by the env_file check of a service
# file, so that reading it again when a container is created checks it the same way. A
# path that no service file named is read under strict modes.
_LOADED_STRICT: dict[str, bool] = {}


def remember_strict(path: str, strict_modes: bool) -> None:
    """`path` was checked under `strict_modes` (the env_file check): read it so again."""
    _LOADED_STRICT[path] = strict_modes


def read_env_files(
    spec: ServiceSpec, *, strict_modes: bool | None = None
) -> tuple[tuple[str, str], ...]:
    """The values of every env file of `spec`, later files overriding earlier ones, sorted
    by key. `spec.environment` is not included: see effective_environment.

    Each file is read (and, under strict modes, checked) again now, never taken from
    memory. `strict_modes` None means as when the service file was loaded.

    Raises EnvFileError; its message names the file and line, never a value.
    """
    merged: dict[str, str] = {}
    for path in spec.env_files:
        strict = _LOADED_STRICT.get(path, True) if strict_modes is None else strict_modes
        merged.update(read_env_file(Path(path), strict_modes=strict))
    return tuple(sorted(merged.items()))


def effective_environment(
    spec: ServiceSpec, *, strict_modes: bool | None = None
) -> tuple[tuple[str, str], ...]:
    """What the container gets: the env files' values (read and checked now, see
    read_env_files) with `environment` on top, sorted.

    The values read now must be the ones checked when the service file was loaded (their
    digest is `spec.env_digest`, in the spec hash): anything else, a file edited since
    or a link on the way re-pointed, is refused (EnvFileError) until a reload has
    checked it, so that a container never gets values no check has seen (issue 29)."""
    values = read_env_files(spec, strict_modes=strict_modes)
    if spec.env_files and _digest(values) != spec.env_digest:
        reason = (
            f"{', '.join(spec.env_files)}: changed since the service file was last loaded "
            "and checked; no container gets values that were not checked: they apply at "
            "the next reload (healerctl reload, or the resync)"
        )
        raise EnvFileError(ConfigError(spec.source_file or spec.name, None, "env_file", reason))
    merged = dict(values)
    merged.update(spec.environment)
    return tuple(sorted(merged.items()))


def _digest(values: tuple[tuple[str, str], ...]) -> str:
    canonical = "\0".join(f"{k}={v}" for k, v in values)
    return hashlib.sha256(canonical.encode()).hexdigest()


def env_digest(spec: ServiceSpec) -> str:
    """sha256 (hex) of the parsed env file values, so that a label can roll containers when
    an env file changes; "" for a service without env files. Raises EnvFileError."""
    if not spec.env_files:
        return ""
    return _digest(read_env_files(spec))
