"""Safe YAML loading that remembers lines and refuses duplicate keys.

Operators fix config by line number, and PyYAML's plain dicts forget lines and silently
let a repeated key win. The loader also follows YAML 1.2 where 1.1 surprises people:
`8080:80` and `1000:1000` stay strings (not base-60 ints), dates stay strings, and
only JSON-like types (plus merge keys) can be built.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from healerd.config.errors import ConfigError
from healerd.config.trust import STRICT_ESCAPE, FileRefused, read_trusted

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_VALUE_TAG = "tag:yaml.org,2002:value"
_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_REFUSED_TAGS = ("binary", "omap", "pairs", "set", "timestamp")
# Entries one mapping may have once merge keys are resolved, and entries merge keys may
# copy in one file in all.
MAX_MERGED = 10_000
MAX_MERGED_TOTAL = 100_000
# The most healerd reads of a service file or of healerd.yaml.
MAX_FILE_SIZE = 2**20


class Tag(enum.Enum):
    """Compose's merge tags (compose-spec 13-merge.md), kept beside the value they mark
    (`LineDict.tags`) so that interpolation and checks see plain values; the merge
    (healerd.config.merge) acts on them and removes them."""

    RESET = "!reset"  # the key is removed from what it overrides (and from its own file)
    OVERRIDE = "!override"  # the value replaces what it overrides whole, unmerged


Reset = Tag.RESET
Override = Tag.OVERRIDE


class LineDict(dict[Any, Any]):
    """A mapping that knows its position, each key's position, and the source text of scalar
    keys and values (so `NO:` can be reported as written rather than as False).

    Lines and columns count from 1."""

    def __init__(self, line: int | None = None, column: int | None = None) -> None:
        super().__init__()
        self.line = line
        self.column = column
        self.key_lines: dict[Any, int] = {}
        self.key_columns: dict[Any, int] = {}
        self.raw: dict[Any, str] = {}
        self.key_text: dict[Any, str] = {}
        self.duplicates: list[tuple[Any, int, int, int]] = []  # (key, line, column, first line)
        self.quoted: set[Any] = set()  # keys whose scalar value was quoted (or a block)
        self.interpolated: set[Any] = set()  # keys whose value had ${VAR}s (raw: the result)
        # The file it was read from; in a merged document, the keys from another file.
        self.file: str | None = None
        self.key_files: dict[Any, str] = {}
        self.tags: dict[Any, Tag] = {}  # keys whose value carries !reset or !override

    def line_of(self, key: Any) -> int | None:
        return self.key_lines.get(key, self.line)

    def file_of(self, key: Any) -> str | None:
        return self.key_files.get(key, self.file)

    def column_of(self, key: Any) -> int | None:
        return self.key_columns.get(key, self.column)


class LineList(list[Any]):
    """A sequence that knows its own position and each item's position."""

    def __init__(self, line: int | None = None, column: int | None = None) -> None:
        super().__init__()
        self.line = line
        self.column = column
        self.item_lines: list[int] = []
        self.item_columns: list[int] = []
        self.file: str | None = None
        self.item_files: list[str | None] = []  # per item, None: the list's own file

    def file_at(self, index: int) -> str | None:
        found = self.item_files[index] if 0 <= index < len(self.item_files) else None
        return found or self.file

    def line_at(self, index: int) -> int | None:
        return self.item_lines[index] if 0 <= index < len(self.item_lines) else self.line

    def column_at(self, index: int) -> int | None:
        return self.item_columns[index] if 0 <= index < len(self.item_columns) else self.column


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def _column(node: Node) -> int:
    return int(node.start_mark.column) + 1


class _Loader(yaml.SafeLoader):
    """SafeLoader with line-tracking containers and conversion errors tied to a line."""

    def __init__(self, stream: str, file: str | None = None) -> None:
        super().__init__(stream)
        self.merged = 0  # entries copied in by merge keys so far, in the whole document
        self.file = file
        self.tagged: dict[int, Tag] = {}  # nodes (by id) that carried !reset or !override

    def merge_tag(self, node: Node) -> Tag | None:
        """The merge tag `node` carries (its own tag replaced, once, by the one its value
        resolves to, so that it is built as if untagged; an alias sees it again)."""
        if id(node) in self.tagged:
            return self.tagged[id(node)]
        if node.tag not in (Tag.RESET.value, Tag.OVERRIDE.value):
            return None
        tag = Tag(node.tag)
        self.tagged[id(node)] = tag
        if isinstance(node, MappingNode):
            node.tag = _MAP_TAG
        elif isinstance(node, SequenceNode):
            node.tag = _SEQ_TAG
        elif isinstance(node, ScalarNode) and node.style:  # quoted, a block: text, as untagged
            node.tag = _STR_TAG
        else:
            node.tag = self.resolve(ScalarNode, node.value, (True, False))  # type: ignore[no-untyped-call]
        return tag

    def flatten_mapping(self, node: MappingNode) -> None:
        """PyYAML's merge keys (`<<`), counted while they are gathered rather than after.
        Without the count, a few hundred aliases to large mappings (or a chain of
        mappings each merging the one before) built hundreds of millions of entries
        before any check: PyYAML 6.0 (Debian 12's) merges `<<: [*a, *a]` twice at every
        level, and even a chain of distinct mappings is quadratic."""
        merge: list[tuple[Node, Node]] = []
        index = 0
        while index < len(node.value):
            key_node, value_node = node.value[index]
            if key_node.tag == _MERGE_TAG:
                del node.value[index]
                if isinstance(value_node, MappingNode):
                    sources = [value_node]
                elif isinstance(value_node, SequenceNode):
                    # `<<: [*a, *a]` merges a once (as newer PyYAML does); the list is
                    # reversed so that, entries being assigned in order, earlier ones win.
                    unique = {id(n): n for n in value_node.value}
                    sources = list(reversed(unique.values()))
                else:
                    raise self._merge_error(node, value_node, "a mapping or a list of them")
                for source in sources:
                    self._merge_one(node, source, merge)
            else:
                if key_node.tag == _VALUE_TAG:
                    key_node.tag = _STR_TAG
                index += 1
        if merge:
            node.value = merge + node.value

    def _merge_one(self, node: MappingNode, source: Node, merge: list[tuple[Node, Node]]) -> None:
        if not isinstance(source, MappingNode):
            raise self._merge_error(node, source, "a mapping")
        self._check_merge(node, merge, source)  # before flattening too: entries only grow
        self.flatten_mapping(source)
        self._check_merge(node, merge, source)
        merge.extend(source.value)
        self.merged += len(source.value)

    def _check_merge(
        self, node: MappingNode, merge: list[tuple[Node, Node]], source: MappingNode
    ) -> None:
        if len(merge) + len(source.value) > MAX_MERGED:
            where = f"more than {MAX_MERGED} entries in one mapping"
        elif self.merged + len(source.value) > MAX_MERGED_TOTAL:
            where = f"more than {MAX_MERGED_TOTAL} entries in the file"
        else:
            return
        raise ConstructorError(None, None, f"merge keys expand to {where}", node.start_mark)

    @staticmethod
    def _merge_error(node: MappingNode, value: Node, expected: str) -> ConstructorError:
        return ConstructorError(
            "while constructing a mapping",
            node.start_mark,
            f"expected {expected} for merging, but found a {type(value).__name__}",
            value.start_mark,
        )

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ArithmeticError, LookupError, TypeError, ValueError):  # `!!int abc`, `!!int`
            # Not the exception's text: it quotes the value, which may be a secret.
            raise ConstructorError(
                None, None, f"cannot read the value as {node.tag}", node.start_mark
            ) from None


class _PlainLoader(_Loader):
    """The loader without Compose's merge tags: `!reset` is refused as any tag is."""

    def merge_tag(self, node: Node) -> Tag | None:
        return None


def _construct_map(loader: _Loader, node: MappingNode) -> Iterator[LineDict]:
    data = LineDict(_line(node), _column(node))
    data.file = loader.file
    yield data
    own = sum(1 for key_node, _ in node.value if key_node.tag != _MERGE_TAG)
    loader.flatten_mapping(node)
    merged = len(node.value) - own  # flatten_mapping puts merged entries first
    own_keys: set[Any] = set()  # merged keys may be overridden, own keys may not repeat
    for index, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node)
        try:
            hash(key)
        except TypeError:
            raise ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                "found a key that is not a scalar",
                key_node.start_mark,
            ) from None
        if index >= merged:
            if key in own_keys:
                dup = (key, _line(key_node), _column(key_node), data.key_lines[key])
                data.duplicates.append(dup)
                continue  # keep the first: the file is rejected anyway
            own_keys.add(key)
        tag = loader.merge_tag(value_node)
        if tag is not None:
            data.tags[key] = tag
        else:
            data.tags.pop(key, None)  # a merged-in key's tag does not outlive its override
        data[key] = loader.construct_object(value_node)
        data.key_lines[key] = _line(key_node)
        data.key_columns[key] = _column(key_node)
        if isinstance(key_node, ScalarNode):
            data.key_text[key] = key_node.value
        if isinstance(value_node, ScalarNode):
            data.raw[key] = value_node.value
            if value_node.style:
                data.quoted.add(key)
        else:
            data.raw.pop(key, None)


def _construct_seq(loader: _Loader, node: SequenceNode) -> Iterator[LineList]:
    data = LineList(_line(node), _column(node))
    data.file = loader.file
    yield data
    # An item tagged !reset is dropped, as Compose drops it; !override means nothing there.
    children = [child for child in node.value if loader.merge_tag(child) is not Tag.RESET]
    data.extend(loader.construct_object(child) for child in children)
    data.item_lines = [_line(child) for child in children]
    data.item_columns = [_column(child) for child in children]


def _refuse(loader: _Loader, node: Node) -> None:
    raise ConstructorError(None, None, f"the tag {node.tag} is not allowed here", node.start_mark)


_Loader.add_constructor(_MAP_TAG, _construct_map)
_Loader.add_constructor(_SEQ_TAG, _construct_seq)
for _tag in _REFUSED_TAGS:
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse)

# Drop int/float/timestamp/value resolution, then re-add int and float without base 60.
_Loader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if not tag.endswith((":int", ":float", ":timestamp", ":value"))
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _INT_TAG,
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
_Loader.add_implicit_resolver(
    _FLOAT_TAG,
    re.compile(
        r"^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?"
        r"|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def _syntax_error(exc: yaml.YAMLError, file: str, text: str) -> ConfigError:
    if isinstance(exc, yaml.reader.ReaderError):
        char = f" #x{exc.character:04x}" if isinstance(exc.character, int) else ""
        reason = f"unacceptable character{char}: {exc.reason}"
        at = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        return ConfigError(file, at, "yaml", reason, col)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else int(mark.line) + 1
        column = None if mark is None else int(mark.column) + 1
        problem = exc.problem or "invalid YAML"
        reason = f"{exc.context}: {problem}" if exc.context else problem
        return ConfigError(file, line, "yaml", reason, column)
    return ConfigError(file, None, "yaml", str(exc))


def _key_path(path: str, mapping: LineDict, key: Any) -> str:
    name = mapping.key_text.get(key, str(key))
    return f"{path}.{name}" if path else name


def _duplicate_errors(data: Any, file: str) -> list[ConfigError]:
    """Walks the loaded tree once per container (aliases may share or even nest them)."""
    errors: list[ConfigError] = []
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, path = stack.pop()
        if not isinstance(value, LineDict | LineList) or id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, LineDict):
            for key, line, column, first in value.duplicates:
                reason = f"duplicate key (first defined on line {first})"
                field = _key_path(path, value, key)
                errors.append(ConfigError(file, line, field, reason, column))
            stack.extend((v, _key_path(path, value, k)) for k, v in value.items())
        else:
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(value))
    return errors


def load_yaml(text: str, file: str, *, merge_tags: bool = True) -> tuple[Any, list[ConfigError]]:
    """Parses one YAML document; data is None for an empty or unparseable document.

    Duplicate keys are reported but the data is still returned, so that callers can go on
    and report every other problem in the same pass. Every mapping and list knows `file`;
    Compose's `!reset`/`!override` are read (`LineDict.tags`) unless `merge_tags` is
    false (healerd.yaml is no Compose file), and refused like any other tag then.
    """
    try:
        loader = _Loader(text, file) if merge_tags else _PlainLoader(text, file)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        return None, [_syntax_error(exc, file, text)]
    except RecursionError:
        return None, [ConfigError(file, None, "yaml", "the document is nested too deeply")]
    problem = _expansion_problem(data)
    if problem:
        return None, [ConfigError(file, None, "yaml", problem)]
    return data, _duplicate_errors(data, file)


# More values than any config needs; a few shared aliases can otherwise stand for 10**9
# ("billion laughs"), and every check or message that walks them would hang.
MAX_VALUES = 100_000


def _expansion_problem(data: Any) -> str:
    """Counts the values the document stands for once aliases are expanded, without
    expanding them (shared nodes are counted once, times their uses)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        value, done = stack.pop()
        if not isinstance(value, dict | list):
            continue
        key = id(value)
        children = list(value.values()) if isinstance(value, dict) else value
        if done:
            on_path.discard(key)
            total = 1 + sum(sizes.get(id(c), 1) for c in children)
            if total > MAX_VALUES:
                return f"aliases expand to more than {MAX_VALUES} values"
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            return "an alias refers to a mapping or list that contains it"
        on_path.add(key)
        stack.append((value, True))
        stack.extend((c, False) for c in children if isinstance(c, dict | list))
    return ""


def read_config_file(
    path: Path,
    file: str,
    what: str,
    *,
    strict: bool,
    follow_symlink: bool = False,
    escape: str = STRICT_ESCAPE,
) -> tuple[bytes | None, list[ConfigError]]:
    """A service file's or healerd.yaml's bytes through read_trusted (at most
    MAX_FILE_SIZE); problems become errors, never exceptions. None without errors: the
    file does not exist."""
    try:
        raw = read_trusted(
            path,
            what,
            strict=strict,
            limit=MAX_FILE_SIZE,
            follow_symlink=follow_symlink,
            escape=escape,
        )
    except FileNotFoundError:
        return None, []
    except FileRefused as exc:
        return None, [ConfigError(file, None, "file", str(exc))]
    except OSError as exc:
        return None, [ConfigError(file, None, "file", f"cannot read: {exc.strerror or exc}")]
    return raw, []


def load_yaml_bytes(
    raw: bytes, file: str, *, merge_tags: bool = True
) -> tuple[Any, list[ConfigError]]:
    """Like load_yaml, but decoding problems become errors too."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1  # in bytes
        return None, [ConfigError(file, line, "file", "not valid UTF-8 text", column)]
    return load_yaml(text, file, merge_tags=merge_tags)
