"""`environment` and `labels`: a mapping or a list of KEY=value, as Compose allows both.

Both come out as sorted pairs, so that reordering them never replaces containers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from healerd.config.errors import describe
from healerd.config.keys import At
from healerd.config.yamlload import LineDict, LineList

RESERVED_LABEL_PREFIX = "io.healerd."


def _pair_key(key: object, at: At, labels: bool) -> str | None:
    if not isinstance(key, str):
        at.error(f"keys must be strings, not {describe(key)} (quote it)")
        return None
    if not key or "=" in key:
        at.error("keys must be non-empty and without '='")
        return None
    if labels and key.startswith(RESERVED_LABEL_PREFIX):
        at.error(f"keys starting with {RESERVED_LABEL_PREFIX!r} are reserved for healerd")
        return None
    return key


def _pair_value(value: object, raw: str | None, at: At) -> str | None:
    if value is None:
        return ""
    if isinstance(value, bool):
        at.error("true/false would be ambiguous as text: quote it, e.g. 'true'")
        return None
    if isinstance(value, int | float):
        return raw if raw is not None else str(value)  # keep 010 or 1.50 as written
    if isinstance(value, str):
        return value
    at.error(f"must be a string or a number, not {describe(value)}")
    return None


def _mapping_pairs(value: LineDict, at: At, labels: bool, pairs: dict[str, str]) -> None:
    for raw_key, raw_value in value.items():
        item_at = at.key(value, raw_key)
        key = _pair_key(raw_key, item_at, labels)
        text = _pair_value(raw_value, value.raw.get(raw_key), item_at)
        if key is not None and text is not None:
            pairs[key] = text


def _list_pairs(value: LineList, at: At, labels: bool, pairs: dict[str, str]) -> None:
    for index, item in enumerate(value):
        if not isinstance(item, str):
            at.item(value, index).error(f"must be a 'KEY=value' string, not {describe(item)}")
            continue
        raw_key, sep, text = item.partition("=")
        item_at = at.item(value, index, raw_key or None)
        if not sep:
            item_at.error(f"{item!r} has no value: write {item}=value ({item}= for empty)")
        elif (key := _pair_key(raw_key, item_at, labels)) is None:
            pass
        elif key in pairs:
            item_at.error("is set more than once")
        else:
            pairs[key] = text


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


_PAIR_KEY = r"[^=]+"
_NO_RESERVED = rf"(?!{re.escape(RESERVED_LABEL_PREFIX)})"


def pairs_schema(labels: bool) -> Mapping[str, Any]:
    prefix = _NO_RESERVED if labels else ""
    return {
        "anyOf": [
            {
                "type": "object",
                "propertyNames": {"pattern": f"^{prefix}{_PAIR_KEY}$"},
                "additionalProperties": {"type": ["string", "number", "null"]},
            },
            {
                "type": "array",
                "items": {"type": "string", "pattern": f"^{prefix}{_PAIR_KEY}="},
            },
        ]
    }
