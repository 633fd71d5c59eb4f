"""Compose's merge of two documents: an override file onto its base, or a service onto
the one it `extends`.

The rules are the Compose specification's (compose-spec 13-merge.md and 05-services.md
"extends"): a mapping merges key by key, a sequence appends, `command`, `entrypoint` and
`healthcheck.test` are replaced, `!reset` removes what it overrides and `!override`
replaces it whole. Where the specification and docker-compose 1.29.2 (merge_service_dicts,
the oracle of tests/integration/test_compose_merge_diff.py) differ on something 1.29.2
can express, healerd follows 1.29.2, so that a project merges as the Compose it was
tested against merges it:

- entries are one when they share a key (healerd.config.mergekeys): secrets and configs
  by source (the specification: by target), links by alias, ports by host ip, target,
  published port and protocol, mounts and devices by target;
- `dns_opt` and `group_add` are replaced, not appended (1.29.2 merges neither);
- `cap_add`, `cap_drop`, `expose`, `security_opt`, `device_cgroup_rules`, `profiles`
  and `external_links` keep one copy of each entry; `dns`, `dns_search` and `tmpfs`
  append, duplicates kept;
- `extra_hosts` is a mapping of host to address (the specification appends entries);
- a top-level network, volume, secret or config declared again replaces the earlier
  declaration whole (the specification merges them).

Beyond 1.29.2: `env_file` keeps one copy of each file (healerd refuses a file listed
twice); a null value overrides nothing (the specification's reading; write `!reset`
to remove a value); `depends_on` entries, `x-healerd` and healerd's own mappings merge
key by key; `post_start`/`pre_stop` append. Pure: no I/O, inputs never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

from healerd.config import mergekeys as mk
from healerd.config.keys import At
from healerd.config.mergedata import add, as_list, clean, empty_dict, put, set_item
from healerd.config.mergedata import strip_tags as strip_tags
from healerd.config.yamlload import LineDict, LineList, Tag

Merger = Callable[[Any, Any, At], Any]


def merge_documents(base: LineDict, override: LineDict, at: At) -> LineDict:
    """`override` merged onto `base` (both as read, tags and all); errors (a list that
    cannot be read as the mapping it merges with) go to `at`."""
    return merge_mapping(base, override, at, _TOP)


def merge_service(base: Any, override: Any, at: At) -> Any:
    """One service merged onto another (an override's, or the one it extends)."""
    return _nested(_SERVICE)(base, override, at)


def merge_mapping(
    base: LineDict,
    override: LineDict,
    at: At,
    rules: Mapping[Any, Merger],
    default: Merger | None = None,
    *,
    nulls: bool = False,
) -> LineDict:
    """Key by key: base's keys in their order, then the override's new ones. A null in
    the override keeps the base's value unless `nulls` (a variable's `KEY:` is a value)."""
    merge = default or merge_values
    out = empty_dict(base)
    done: set[Any] = set()
    for key, value in base.items():
        if base.tags.get(key) is Tag.RESET:
            continue
        done.add(key)
        tag = override.tags.get(key)
        if tag is Tag.RESET:
            continue
        if key not in override or (override[key] is None and not nulls and tag is None):
            put(out, base, key, clean(value))
        elif tag is Tag.OVERRIDE or value is None or override[key] is None:
            put(out, override, key, clean(override[key]))
        else:
            merged = rules.get(key, merge)(value, override[key], at.key(override, key))
            put(out, override, key, merged)
    for key, value in override.items():
        if key not in done and override.tags.get(key) is not Tag.RESET:
            put(out, override, key, clean(value))
    return out


def merge_values(base: Any, override: Any, at: At) -> Any:
    """The specification's rule for any other key: mappings merge, sequences append,
    anything else is replaced."""
    if isinstance(base, LineDict) and isinstance(override, LineDict):
        return merge_mapping(base, override, at, {})
    if isinstance(base, LineList) and isinstance(override, LineList):
        return _keyed(base, override, lambda _: None)
    return clean(override)


def _replace(base: Any, override: Any, at: At) -> Any:
    return clean(override)


def _keyed(base: LineList, override: LineList, key_of: mk.KeyOf) -> LineList:
    """The base's entries, each replaced in place by the override's entry of the same
    key; then the override's other entries."""
    out: LineList = clean(base)
    where: dict[Hashable, int] = {}
    for index, item in enumerate(out):
        key = key_of(item)
        if key is not None:
            where.setdefault(key, index)
    for index, item in enumerate(override):
        key = key_of(item)
        if key is not None and key in where:
            set_item(out, where[key], override, index, clean(item))
        else:
            add(out, override, index, clean(item))
            if key is not None:
                where[key] = len(out) - 1
    return out


def _unique(key_of: mk.KeyOf) -> Merger:
    def merge(base: Any, override: Any, at: At) -> Any:
        return _keyed(as_list(base, at), as_list(override, at), key_of)

    return merge


def _appended(base: Any, override: Any, at: At) -> Any:
    return _keyed(as_list(base, at), as_list(override, at), lambda _: None)


def _nested(rules: Mapping[Any, Merger], default: Merger | None = None) -> Merger:
    """Mappings merged by `rules`; anything else replaced."""

    def merge(base: Any, override: Any, at: At) -> Any:
        if isinstance(base, LineDict) and isinstance(override, LineDict):
            return merge_mapping(base, override, at, rules, default)
        return clean(override)

    return merge


def _shallow(base: Any, override: Any, at: At) -> Any:
    """A mapping whose entries are replaced whole (ulimits, storage_opt, top-level
    declarations): docker-compose 1.29.2's dict.update."""
    if isinstance(base, LineDict) and isinstance(override, LineDict):
        return merge_mapping(base, override, at, {}, _replace, nulls=True)
    return clean(override)


def _pairs(separators: str) -> Merger:
    """environment, labels, sysctls, extra_hosts: a mapping, or a list of its entries,
    merged by key whichever way each file spells it."""

    def merge(base: Any, override: Any, at: At) -> Any:
        if isinstance(base, LineList) and isinstance(override, LineList):
            return _keyed(base, override, mk.pair_key(separators))
        if isinstance(base, LineList):
            base = mk.pairs_mapping(base, at, separators)
        if isinstance(override, LineList):
            override = mk.pairs_mapping(override, at, separators)
        return _shallow(base, override, at)

    return merge


def _named(entry: Callable[[LineList, int], Any], merge_entry: Merger) -> Merger:
    """networks and depends_on: a list of names or a mapping of names to settings."""

    def merge(base: Any, override: Any, at: At) -> Any:
        if isinstance(base, LineList) and isinstance(override, LineList):
            return _keyed(base, override, mk.text)
        if isinstance(base, LineList):
            base = mk.names_mapping(base, entry)
        if isinstance(override, LineList):
            override = mk.names_mapping(override, entry)
        return _nested({}, merge_entry)(base, override, at)

    return merge


def _started(seq: LineList, index: int) -> LineDict:
    """`depends_on: [db]` means `db: {condition: service_started}`."""
    out = LineDict(seq.line_at(index), seq.column_at(index))
    out.file = seq.file_at(index)
    out["condition"] = "service_started"
    out.key_lines["condition"] = seq.line_at(index) or 1
    return out


def _healthcheck(base: Any, override: Any, at: At) -> Any:
    """`disable: true` drops what it overrides (1.29.2 meant it so); `test` replaces."""
    if isinstance(override, LineDict) and override.get("disable") is True:
        return clean(override)
    return _nested({"test": _replace})(base, override, at)


def _logging(base: Any, override: Any, at: At) -> Any:
    """Options merge only while the driver stays the same (or one side names none)."""
    if isinstance(base, LineDict) and isinstance(override, LineDict):
        before, after = base.get("driver"), override.get("driver")
        if before is not None and after is not None and before != after:
            return clean(override)
        return merge_mapping(base, override, at, {"options": _shallow})
    return clean(override)


def _context(value: Any, at: At) -> Any:
    """`build: DIR` is `build: {context: DIR}`, where it is written."""
    if not isinstance(value, str):
        return value
    out = LineDict(at.line, at.column)
    out.file = at.file
    out["context"] = value
    out.key_lines["context"] = at.line or 1
    return out


def _build(base: Any, override: Any, at: At) -> Any:
    if isinstance(base, str) and isinstance(override, str):
        return override
    return _nested(_BUILD)(_context(base, at), _context(override, at), at)


_ENV = _pairs("=")
_BUILD: dict[Any, Merger] = {
    "args": _ENV,
    "labels": _ENV,
    "extra_hosts": _pairs("=:"),
    "cache_from": _unique(mk.text),
    "cache_to": _unique(mk.text),
    "tags": _unique(mk.text),
    "platforms": _unique(mk.text),
}
_NETWORK = _nested({"aliases": _unique(mk.text), "link_local_ips": _unique(mk.text)})
_DEPLOY = _nested(
    {
        "labels": _ENV,
        "resources": _nested({"reservations": _nested({"devices": _unique(mk.text)})}),
        "placement": _nested({"constraints": _unique(mk.text)}),
    }
)
_ONE_EACH = (
    "cap_add", "cap_drop", "expose", "security_opt", "device_cgroup_rules", "profiles",
    "external_links", "volumes_from",
)  # fmt: skip
_SERVICE: dict[Any, Merger] = {
    "command": _replace,
    "entrypoint": _replace,
    "extends": _replace,
    "dns_opt": _replace,
    "group_add": _replace,
    "environment": _ENV,
    "labels": _ENV,
    "sysctls": _ENV,
    "extra_hosts": _pairs("=:"),
    "ulimits": _shallow,
    "storage_opt": _shallow,
    "depends_on": _named(_started, merge_values),
    "networks": _named(lambda seq, index: None, _NETWORK),
    "volumes": _unique(mk.mount_target),
    "devices": _unique(mk.mount_target),
    "ports": _unique(mk.port),
    "secrets": _unique(mk.source),
    "configs": _unique(mk.source),
    "links": _unique(mk.link_alias),
    "env_file": _unique(mk.env_file_path),
    "dns": _appended,
    "dns_search": _appended,
    "tmpfs": _appended,
    "healthcheck": _healthcheck,
    "logging": _logging,
    "build": _build,
    "deploy": _DEPLOY,
    **{key: _unique(mk.text) for key in _ONE_EACH},
}


def _services(base: Any, override: Any, at: At) -> Any:
    """Service by service; a merged service stays where its base file declares it."""
    if not (isinstance(base, LineDict) and isinstance(override, LineDict)):
        return clean(override)
    merged = merge_mapping(base, override, at, {}, merge_service)
    for name in merged:
        if name in base and name in override and override.tags.get(name) is None:
            put(merged, base, name, merged[name])
    return merged


_TOP: dict[Any, Merger] = {
    "services": _services,
    "networks": _shallow,
    "volumes": _shallow,
    "secrets": _shallow,
    "configs": _shallow,
    "name": _replace,
    "version": _replace,
}
