"""`environment` and `labels`: a mapping or a list of KEY=value, as Compose allows both.

Both come out as sorted pairs, so that reordering them never replaces containers. An
environment variable named without a value (`- FOO`, `FOO:`) has taken the project's
variable before this check, or is LEFT_OUT (healerd.config.projectread); a label named
without one has the empty value, as in Compose.
Environment values are secrets: no error about an environment entry shows a value, or an
entry or key that may hold one; it names the key (when it is a variable name, before an
'=') or else only the entry's place (line, column, index).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from healerd.config.errors import describe
from healerd.config.keys import MAX_ENTRIES, At
from healerd.config.yamlload import LineDict, LineList

RESERVED_LABEL_PREFIX = "io.healerd."
# Environment variable names, as env files take them. A key that is not one is most
# likely a value in the wrong place (`KEY:secret` for `KEY=secret`): it is refused, and
# no error shows it. Labels may hold any key without '='.
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


class _LeftOut:
    """The mark of a list entry named without a value that the project's variables do
    not set (healerd.config.projectread): Compose leaves it out. It stays in the list, so
    that the entries after it keep their index in errors."""

    def __repr__(self) -> str:
        return "LEFT_OUT"


LEFT_OUT = _LeftOut()


def _label_key(key: object, at: At) -> str | None:
    if not isinstance(key, str):
        at.error(f"keys must be strings, not {describe(key)} (quote it)")
        return None
    if not key or "=" in key:
        at.error("keys must be non-empty and without '='")
        return None
    if key.startswith(RESERVED_LABEL_PREFIX):
        at.error(f"keys starting with {RESERVED_LABEL_PREFIX!r} are reserved for healerd")
        return None
    return key


# A label listed without '=' that reads as a label's name (`- com.example.enabled`):
# Compose gives it the empty value. Anything else (`team:platform`) is likely a typo.
_BARE_LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_NOT_SHOWN = "the entry is not shown, as it may hold a secret"
_NAME_RULE = "a variable name must be letters, digits, '_', '.' or '-', not starting with a digit"


def _is_name_before(text: str, sep: str) -> bool:
    name, found, _ = text.partition(sep)
    return bool(found) and ENV_NAME_RE.fullmatch(name.strip()) is not None


def _entry_reason(item: str) -> str:
    """Why a list entry is refused, without showing any of it: `KEY:secret` written for
    `KEY=secret` would show the secret. The error's line and column point at it."""
    if _is_name_before(item, ":"):
        return f"is not KEY=value: write KEY=value, not KEY:value; {_NOT_SHOWN}"
    if "=" not in item:
        return f"is not KEY=value (write KEY=value, or KEY= for an empty value); {_NOT_SHOWN}"
    return f"{_NAME_RULE}; {_NOT_SHOWN}"


def _key_reason(key: str) -> str:
    """Why a mapping key is refused, without showing it (`KEY=secret: x`, say)."""
    if _is_name_before(key, "=") or _is_name_before(key, ":"):
        return f"{_NAME_RULE}; {_NOT_SHOWN} (in a mapping, write KEY: value)"
    return f"{_NAME_RULE}; {_NOT_SHOWN}"


def _pair_value(value: object, raw: str | None, at: At) -> str | None:
    if value is None:
        return ""
    if isinstance(value, bool):
        if raw is None:
            at.error("true/false would be ambiguous as text: quote it, e.g. 'true'")
            return None
        # As Compose (YAML 1.2) reads it: true/false (any case) are booleans it writes as
        # "true"/"false"; YAML 1.1's yes/no/on/off are text there, kept as written.
        return raw.lower() if raw.lower() in ("true", "false") else raw
    if isinstance(value, int | float):
        return raw if raw is not None else str(value)  # keep 010 or 1.50 as written
    if isinstance(value, str):
        return value
    at.error(f"must be a string or a number, not {describe(value)}")
    return None


def _mapping_pairs(value: LineDict, at: At, labels: bool, pairs: dict[str, str]) -> None:
    for raw_key, raw_value in value.items():
        if labels or not isinstance(raw_key, str) or ENV_NAME_RE.fullmatch(raw_key):
            item_at = at.key(value, raw_key)
            key = _label_key(raw_key, item_at) if labels else _env_key(raw_key, item_at)
        else:  # the key is not a name: report it at its place, not by its text
            item_at = replace(at, line=value.line_of(raw_key), column=value.column_of(raw_key))
            item_at.error(_key_reason(raw_key))
            key = None
        if raw_key in value.interpolated:
            text: str | None = value.raw[raw_key]  # the substituted text, as Compose keeps it
        else:
            text = _pair_value(raw_value, value.raw.get(raw_key), item_at)
        if key is not None and text is not None:
            pairs[key] = text


def _env_key(key: object, at: At) -> str | None:
    if isinstance(key, str):
        return key
    at.error(f"keys must be strings, not {describe(key)} (quote it)")
    return None


def _list_pairs(value: LineList, at: At, labels: bool, pairs: dict[str, str]) -> None:
    for index, item in enumerate(value):
        if item is LEFT_OUT:
            continue
        if not isinstance(item, str):
            at.item(value, index).error(f"must be a 'KEY=value' string, not {describe(item)}")
            continue
        raw_key, sep, text = item.partition("=")
        if not labels and not (sep and ENV_NAME_RE.fullmatch(raw_key)):
            at.item(value, index).error(_entry_reason(item))
            continue
        item_at = at.item(value, index, raw_key or None)
        if not sep and labels and _BARE_LABEL_RE.fullmatch(item):
            sep = "="  # Compose: a label listed by its name alone has the empty value
        if not sep:
            item_at.error(f"{item!r} has no value: write {item}=value ({item}= for empty)")
        elif (key := _label_key(raw_key, item_at) if labels else raw_key) is None:
            pass
        elif key in pairs and pairs[key] != text:
            item_at.error("is set more than once, to another value")
        else:
            pairs[key] = text  # the same entry twice is harmless: Compose takes it too


def _pairs(value: object, at: At, *, labels: bool) -> tuple[tuple[str, str], ...]:
    pairs: dict[str, str] = {}
    if isinstance(value, LineDict):
        _mapping_pairs(value, at, labels, pairs)
    elif isinstance(value, LineList):
        _list_pairs(value, at, labels, pairs)
    else:
        at.error(f"must be a mapping or a list of 'KEY=value' strings, not {describe(value)}")
    return tuple(sorted(pairs.items()))


def environment(value: object, at: At) -> tuple[tuple[str, str], ...]:
    return _pairs(value, at, labels=False)


def labels(value: object, at: At) -> tuple[tuple[str, str], ...]:
    return _pairs(value, at, labels=True)


_LABEL_KEY = rf"(?!{re.escape(RESERVED_LABEL_PREFIX)})[^=]+"


def pairs_schema(labels: bool) -> Mapping[str, Any]:
    key = _LABEL_KEY if labels else ENV_NAME_RE.pattern
    return {
        "anyOf": [
            {
                "type": "object",
                "propertyNames": {"pattern": f"^{key}$"},
                "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
                "maxProperties": MAX_ENTRIES,
            },
            {
                "type": "array",
                # An environment variable may be named alone (its value: the project's).
                "items": {"type": "string", "pattern": f"^{key}{'=' if labels else '(=|$)'}"},
                "maxItems": MAX_ENTRIES,
            },
        ]
    }
