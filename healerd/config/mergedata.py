"""Containers for merged documents that still know where each value was written.

A merged Compose project holds values from several files; an error must name the file
and line of the value at fault, so every copy here carries each key's (or item's)
position and file along (`LineDict.key_files`, `LineList.item_files`).
"""

from __future__ import annotations

from typing import Any

from healerd.config.keys import At
from healerd.config.yamlload import LineDict, LineList, Tag


def empty_dict(like: LineDict) -> LineDict:
    out = LineDict(like.line, like.column)
    out.file = like.file
    return out


def empty_list(like: LineList) -> LineList:
    out = LineList(like.line, like.column)
    out.file = like.file
    return out


def put(dst: LineDict, src: LineDict, key: Any, value: Any) -> None:
    """dst[key] = value, with where `src` holds key (its line, text and file)."""
    dst[key] = value
    for table in ("key_lines", "key_columns", "raw", "key_text"):
        mine, theirs = getattr(dst, table), getattr(src, table)
        if key in theirs:
            mine[key] = theirs[key]
        else:
            mine.pop(key, None)
    for marks in ("quoted", "interpolated"):
        mine_set, their_set = getattr(dst, marks), getattr(src, marks)
        if key in their_set:
            mine_set.add(key)
        else:
            mine_set.discard(key)
    file = src.file_of(key)
    if file is not None and file != dst.file:
        dst.key_files[key] = file
    else:
        dst.key_files.pop(key, None)


def add(dst: LineList, src: LineList, index: int, value: Any) -> None:
    """Appends `value` with the position and file of `src`'s item `index`."""
    _pad(dst)
    dst.append(value)
    dst.item_lines.append(src.line_at(index) or 1)
    dst.item_columns.append(src.column_at(index) or 1)
    file = src.file_at(index)
    dst.item_files.append(file if file != dst.file else None)


def set_item(dst: LineList, position: int, src: LineList, index: int, value: Any) -> None:
    """dst[position] = value, with the position and file of `src`'s item `index`."""
    _pad(dst)
    dst[position] = value
    dst.item_lines[position] = src.line_at(index) or 1
    dst.item_columns[position] = src.column_at(index) or 1
    file = src.file_at(index)
    dst.item_files[position] = file if file != dst.file else None


def _pad(dst: LineList) -> None:
    """Lists read from YAML hold no per-item files; one that is added to gets them."""
    dst.item_files.extend([None] * (len(dst) - len(dst.item_files)))
    while len(dst.item_lines) < len(dst):
        dst.item_lines.append(dst.line or 1)
        dst.item_columns.append(dst.column or 1)


def as_list(value: Any, at: At) -> LineList:
    """A one-value list for Compose's `dns: 1.1.1.1`, placed where the value is."""
    if isinstance(value, LineList):
        return value
    out = LineList(at.line, at.column)
    out.file = at.file
    if value is not None:
        out.append(value)
        out.item_lines.append(at.line or 1)
        out.item_columns.append(at.column or 1)
    return out


def clean(value: Any) -> Any:
    """`value` as a document alone means it: keys tagged `!reset` left out, no tags
    left; new containers (the merge never changes its inputs), positions kept."""
    if isinstance(value, LineDict):
        out = empty_dict(value)
        for key, item in value.items():
            if value.tags.get(key) is not Tag.RESET:
                put(out, value, key, clean(item))
        return out
    if isinstance(value, LineList):
        seq = empty_list(value)
        for index, item in enumerate(value):
            add(seq, value, index, clean(item))
        return seq
    return value


def strip_tags(data: Any) -> None:
    """A document used alone, without merging, in place: `!reset` keys removed (there is
    nothing to reset), `!override` values kept as written, as Compose reads one file."""
    seen: set[int] = set()
    stack = [data]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, LineDict):
            for key, tag in list(value.tags.items()):
                if tag is Tag.RESET:
                    value.pop(key, None)
            value.tags.clear()
            stack.extend(value.values())
        elif isinstance(value, LineList):
            stack.extend(value)
