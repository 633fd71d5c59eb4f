"""What makes two entries of a merged sequence "the same one", field by field.

docker-compose 1.29.2 (compose/config/config.py, merge_service_dicts) replaces an entry of
the base file by the override's entry with the same key: a mount or a device by its
target, a port by (host ip, target, published, protocol), a secret or config by its
source, a link by its alias, an environment variable or a label by its name; the other
lists (cap_add, expose, ...) keep one copy of each value. None: the entry has no key
(it is malformed: the checks report it) and is always kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from typing import Any

from healerd.config.errors import describe
from healerd.config.keys import At
from healerd.config.pairs import LEFT_OUT
from healerd.config.yamlload import LineDict, LineList

KeyOf = Callable[[Any], Hashable | None]


def text(item: Any) -> Hashable | None:
    """The value itself (cap_add, expose, profiles, ...): `80` and `"80"` are one."""
    if isinstance(item, LineDict | LineList):
        return json.dumps(item, sort_keys=True, default=str)
    return str(item)


def _target_of(item: Any) -> Hashable | None:
    if isinstance(item, LineDict):
        target = item.get("target")
        return str(target) if target is not None else None
    return None


def mount_target(item: Any) -> Hashable | None:
    """volumes: `SOURCE:TARGET[:MODE]`, a bare `TARGET`, or a mapping's target."""
    if isinstance(item, str):
        parts = item.split(":")
        return parts[0] if len(parts) == 1 else parts[1]
    return _target_of(item)


def port(item: Any) -> Hashable | None:
    """ports: `[IP:][PUBLISHED:]TARGET[/PROTOCOL]`, a number, or a mapping."""
    if isinstance(item, int) and not isinstance(item, bool):
        return ("", str(item), "", "tcp")
    if isinstance(item, str):
        rest, _, protocol = item.partition("/")
        if rest.startswith("["):  # [::1]:8080:80
            close = rest.find("]")
            ip, rest = rest[1:close], rest[close + 2 :]
            published, _, target = rest.rpartition(":")
        else:
            parts = rest.rsplit(":", 2)
            ip = parts[0] if len(parts) == 3 else ""
            published = parts[-2] if len(parts) >= 2 else ""
            target = parts[-1]
        return (ip, target, published, protocol or "tcp")
    if isinstance(item, LineDict):
        fields = ("host_ip", "target", "published")
        ip, target, published = (str(item.get(f) or "") for f in fields)
        return (ip, target, published, str(item.get("protocol") or "tcp"))
    return None


def source(item: Any) -> Hashable | None:
    """secrets and configs: the name, or a mapping's source."""
    if isinstance(item, str):
        return item
    if isinstance(item, LineDict) and item.get("source") is not None:
        return str(item["source"])
    return None


def link_alias(item: Any) -> Hashable | None:
    """links: `SERVICE` or `SERVICE:ALIAS`, the same link when the alias is."""
    return item.rpartition(":")[2] if isinstance(item, str) else None


def env_file_path(item: Any) -> Hashable | None:
    if isinstance(item, LineDict):
        return str(item.get("path"))
    return str(item)


def pair_key(separators: str) -> KeyOf:
    """`KEY=value` entries (environment, labels, sysctls); extra_hosts' `HOST:IP` too."""

    def key_of(item: Any) -> Hashable | None:
        if not isinstance(item, str):
            return None
        cut = min((i for i in (item.find(s) for s in separators) if i >= 0), default=-1)
        return item if cut < 0 else item[:cut]

    return key_of


def pairs_mapping(value: LineList, at: At, separators: str) -> LineDict:
    """A list of `KEY=value` as the mapping it means, each key where its entry is, so
    that a list merges with a mapping (both spellings are Compose's). `KEY` alone is
    `KEY: null` (docker-compose 1.29.2's reading); an entry that is no string is
    reported, without its text (it may be a secret)."""
    out = LineDict(value.line, value.column)
    out.file = value.file
    key_of = pair_key(separators)
    for index, item in enumerate(value):
        if item is LEFT_OUT:  # named alone and not set (an included project's, resolved)
            continue
        key = key_of(item)
        if key is None:
            at.item(value, index).error(
                f"must be a 'KEY=value' string to be merged with a mapping, not {describe(item)}"
            )
            continue
        text_value = item[len(str(key)) + 1 :] if len(item) > len(str(key)) else None
        out[key] = text_value
        out.key_lines[key] = value.line_at(index) or 1
        out.key_columns[key] = value.column_at(index) or 1
        if text_value is not None:
            out.raw[key] = text_value
            out.quoted.add(key)
        file = value.file_at(index)
        if file != out.file and file is not None:
            out.key_files[key] = file
    return out


def names_mapping(value: LineList, entry: Callable[[LineList, int], Any]) -> LineDict:
    """A list of names (networks, depends_on) as the mapping it means: each name to
    `entry(list, index)`, each where it is written."""
    out = LineDict(value.line, value.column)
    out.file = value.file
    for index, item in enumerate(value):
        key = item if isinstance(item, str) else str(item)
        out[key] = entry(value, index)
        out.key_lines[key] = value.line_at(index) or 1
        out.key_columns[key] = value.column_at(index) or 1
        file = value.file_at(index)
        if file != out.file and file is not None:
            out.key_files[key] = file
    return out
