"""`volumes`: Compose's short syntax (SOURCE:TARGET[:MODE] or an anonymous /path) and its
long syntax (a mapping per mount: type bind, volume or tmpfs).

A relative SOURCE (`./data`, `../shared`, `~/x`) is a host path from the service file's
directory, as Compose takes it from the project directory. MODE is the comma list the
engine takes: ro|rw, z|Z (SELinux), a propagation (binds), nocopy (volumes) and a
consistency (accepted, no effect on Linux), each at most once. How each becomes the
engine request: healerd/engine/docker/request.py, `mounts`.

Under strict modes a host path must be reached through trusted directories only, as an
env file or the project directory must (issue 29); the source itself may be anyone's.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from healerd.config.errors import describe
from healerd.config.keys import At, unknown_keys
from healerd.config.trust import FileRefused, trusted_location
from healerd.config.units import SIZE_PATTERN, parse_size
from healerd.config.values import boolean
from healerd.config.yamlload import LineDict, LineList
from healerd.model import VolumeSpec
from healerd.vocabulary import VolumeKind

# Docker's own rule for volume names (at least two characters).
_VOLUME_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")
_ANONYMOUS_RE = re.compile(r"[0-9a-f]{64}")
PROPAGATIONS = ("shared", "rshared", "slave", "rslave", "private", "rprivate")
# Compose's bind.recursive; writable and readonly need the engine API 1.44 (Docker 25),
# checked at create time against the version negotiated with the engine (issue 31).
RECURSIVE = ("enabled", "disabled", "writable", "readonly")
CONSISTENCIES = ("consistent", "cached", "delegated", "default")
# The engine's short-syntax mode words, by kind: one word of each kind at most.
_MODE_KINDS = {
    **{m: "ro|rw" for m in ("ro", "rw")},
    **{m: "z|Z" for m in ("z", "Z")},
    **{m: "propagation" for m in PROPAGATIONS},
    **{m: "consistency" for m in CONSISTENCIES if m != "default"},
    "nocopy": "nocopy",
}
# Why a long-syntax type or key healerd does not take is refused.
_REFUSED_TYPES = {
    "npipe": "npipe mounts are Windows named pipes, which a Linux engine has none of",
    "cluster": "cluster volumes are Swarm's (CSI volumes), which a single engine has none of",
    "image": "image mounts need the engine API 1.48 (Docker 28), which healerd does not take yet",
}
_REFUSED_KEYS = {
    "subpath": "needs the engine API 1.45 (Docker 26), which would mount a volume's "
    "subdirectory; healerd does not take it yet (an older engine drops it silently)",
    "labels": "labels of a volume go on its top-level `volumes:` entry",
}
_OPTIONS = {"bind": ("propagation", "create_host_path", "selinux", "recursive"),
            "volume": ("nocopy", "subpath", "labels"), "tmpfs": ("size", "mode")}  # fmt: skip
_LONG_KINDS = (VolumeKind.BIND, VolumeKind.VOLUME, VolumeKind.TMPFS)


def _absolute(source: str, at: At) -> str:
    """Compose's relative paths (any source starting with a dot, as in Compose: `.env/x`
    too; no volume name can): from the project directory (the file's directory), and ~
    as the home directory of the user healerd runs as. Anything else as it is."""
    if not source.startswith((".", "~")):
        return source
    if source.startswith("~"):
        return posixpath.expanduser(source)
    base = at.context.base_dir
    return posixpath.join(str(base.absolute() if base else "/"), source)


def _target(target: str, at: At) -> None:
    if not target.startswith("/"):
        at.error(f"target {target!r} must be an absolute path")
    elif posixpath.normpath(target) == "/":
        at.error("cannot mount over /")


def _trusted(path: str, at: At) -> None:
    """Under strict modes, a host path's directories must all be trusted, as an env
    file's are (healerd.config.trust.trusted_location; issue 29): whoever could write
    one could swap the source for a link to `/`, and the engine, which resolves a bind
    source itself, would mount the host's root into the container. The source itself
    is the container's data and may be anyone's."""
    if not at.context.strict_modes:
        return
    try:
        trusted_location(Path(path), "bind source")
    except FileRefused as exc:
        at.error(str(exc))
    except OSError as exc:
        at.error(f"bind source {path}: cannot be checked: {exc.strerror or exc}")


def _source(source: str, at: At) -> str:
    """A host path (made absolute and normal) or a volume name, as written."""
    source = _absolute(source, at)
    if source.startswith("/"):
        source = posixpath.normpath(source)
        _trusted(source, at)
        return source
    if _ANONYMOUS_RE.fullmatch(source):
        # Anonymous volumes follow their own service's replicas (issue 14): naming one
        # would share another service's data, and it would vanish with that service.
        at.error(
            f"source {source[:12]}... is an anonymous volume's name (64 hex digits), which "
            "belongs to another container; give the volume a name of your own"
        )
    elif source and not _VOLUME_NAME_RE.fullmatch(source):
        at.error(f"source {source!r} must be an absolute path or a volume name (2+ characters)")
    return source


def _mode(mode: str, source: str, at: At) -> None:
    """The engine's rules for a short-syntax mode (checked here, not at every create)."""
    seen: dict[str, str] = {}
    for word in mode.split(","):
        kind = _MODE_KINDS.get(word)
        if kind is None:
            at.error(
                f"mode {word!r} must be ro, rw, z, Z, a propagation ({', '.join(PROPAGATIONS)}), "
                "nocopy or cached/delegated/consistent"
            )
        elif kind in seen:
            at.error(f"mode {mode!r} has two {kind} words ({seen[kind]}, {word})")
        else:
            seen[kind] = word
    if "propagation" in seen and not source.startswith("/"):
        at.error(f"mode {seen['propagation']!r}: a propagation applies to a host path only")
    if "nocopy" in seen and source.startswith("/"):
        at.error("mode 'nocopy' applies to a named volume only, not to a host path")


def _volume(text: str, at: At) -> VolumeSpec | None:
    parts = text.split(":")
    if len(parts) > 3 or not all(parts):
        at.error(f"{text!r} is not SOURCE:TARGET[:MODE] or an anonymous /path")
        return None
    if len(parts) == 1:
        source, target, mode = "", parts[0], "rw"
    elif len(parts) == 2:
        source, target, mode = parts[0], parts[1], "rw"
    else:
        source, target, mode = parts
    errors = len(at.errors)
    _target(target, at)
    source = _source(source, at)
    _mode(mode, source, at)
    if len(at.errors) > errors:
        return None
    return VolumeSpec(
        source=source,
        target=posixpath.normpath(target),
        read_only="ro" in mode.split(","),
        mode="" if mode in ("ro", "rw") else mode,
    )


def _string(body: LineDict, key: str, at: At) -> str | None:
    value = body.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        at.key(body, key).error(f"must be a non-empty string, not {describe(value)}")
        return None
    return value


def _choice(body: LineDict, key: str, choices: tuple[str, ...], at: At) -> str:
    value = body.get(key)
    if value is None:
        return ""
    if value not in choices:
        at.key(body, key).error(f"must be one of {', '.join(choices)}, not {value!r}")
        return ""
    return str(value)


def _kind(body: LineDict, at: At) -> VolumeKind | None:
    value = body.get("type")
    if value is None:
        at.here("type").error("is required: bind, volume or tmpfs")
    elif not isinstance(value, str):
        at.key(body, "type").error(f"must be bind, volume or tmpfs, not {describe(value)}")
    elif value in _REFUSED_TYPES:
        at.key(body, "type").error(f"{value!r} is not supported: {_REFUSED_TYPES[value]}")
    elif value not in _LONG_KINDS:
        at.key(body, "type").error(f"must be bind, volume or tmpfs, not {value!r}")
    else:
        return VolumeKind(value)
    return None


def _long_source(body: LineDict, kind: VolumeKind, at: At) -> str:
    """A bind's host path (any relative one from the file's directory, as Compose takes
    it), a volume's name (none: an anonymous volume); a tmpfs has no source."""
    value = _string(body, "source", at)
    source_at = at.key(body, "source") if "source" in body else at.here("source")
    if value is None:
        if kind is VolumeKind.BIND and "source" not in body:
            source_at.error("is required for type: bind (the host path)")
        return ""
    if kind is VolumeKind.TMPFS:
        source_at.error("a tmpfs mount has no source")
        return ""
    if kind is VolumeKind.VOLUME and value.startswith(("/", ".", "~")):
        source_at.error(f"{value!r}: a volume's source is a volume name; a host path is type: bind")
        return ""
    if kind is VolumeKind.BIND and not value.startswith(("/", "~", ".")):
        value = f"./{value}"
    return _source(value, source_at)


def _tmpfs_size(value: object, at: At) -> int | None:
    if value == 0:
        return None  # Compose's minimum: no limit
    try:
        return parse_size(value)
    except ValueError as exc:
        at.error(str(exc))
        return None


def _tmpfs_mode(value: object, at: At) -> int | None:
    """Unix permission bits: a number as it is (0o1777), a string in octal ("1777")."""
    mode: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        mode = value
    elif isinstance(value, str) and re.fullmatch(r"(?:0o)?[0-7]{1,5}", value):
        mode = int(value.removeprefix("0o"), 8)
    if mode is None or not 0 <= mode <= 0o7777:
        at.error(f"must be permission bits in octal, such as '1777' or 0o1777, not {value!r}")
        return None
    return mode


def _section(kind: VolumeKind, body: LineDict, at: At) -> dict[str, Any]:
    """The options of `bind:`, `volume:` or `tmpfs:`, as VolumeSpec fields."""
    unknown_keys(body, at, _OPTIONS[kind])
    out: dict[str, Any] = {}
    for key, value in body.items():
        key_at = at.key(body, key)
        if value is None or key not in _OPTIONS[kind]:
            continue
        if key in _REFUSED_KEYS:
            key_at.error(f"is not supported: {_REFUSED_KEYS[key]}")
        elif key in ("create_host_path", "nocopy"):
            out[key] = boolean(value, key_at)
        elif key == "propagation":
            out[key] = _choice(body, key, PROPAGATIONS, at)
        elif key == "selinux":
            out[key] = _choice(body, key, ("z", "Z"), at)
        elif key == "recursive":
            out[key] = _choice(body, key, RECURSIVE, at).replace("enabled", "")
        elif key == "size":
            out["tmpfs_size"] = _tmpfs_size(value, key_at)
        else:
            out["tmpfs_mode"] = _tmpfs_mode(value, key_at)
    return out


def _options(body: LineDict, kind: VolumeKind, at: At) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for section in ("bind", "volume", "tmpfs", "image"):
        value = body.get(section)
        if value is None:
            continue
        section_at = at.key(body, section)
        if section != kind:
            section_at.error(f"applies to type: {section} only, not to type: {kind}")
        elif not isinstance(value, LineDict):
            section_at.error(f"must be a mapping, not {describe(value)}")
        else:
            out |= _section(kind, value, section_at)
    if out.get("selinux") and out.get("create_host_path") is False:
        at.key(body, "bind").error(
            "selinux needs the engine's bind syntax, which creates a missing host path: "
            "it cannot go with create_host_path: false"
        )
    _recursive(body, out, at)
    return out


def _recursive(body: LineDict, out: dict[str, Any], at: At) -> None:
    """bind.recursive other than enabled goes as a Mount (the bind syntax has no word
    for it), which has no SELinux relabel; writable and readonly say how a read-only
    mount is read-only, so they need read_only: true (as the engine does)."""
    recursive = out.get("recursive")
    if recursive and out.get("selinux"):
        at.key(body, "bind").error(f"recursive: {recursive} cannot go with selinux")
    if recursive in ("writable", "readonly") and body.get("read_only") is not True:
        at.key(body, "bind").error(f"recursive: {recursive} needs read_only: true")


def long_volume(body: LineDict, at: At) -> VolumeSpec | None:
    """One mount in Compose's long syntax."""
    known = ("type", "source", "target", "read_only", "consistency", *_OPTIONS, "image")
    unknown_keys(body, at, known)
    errors = len(at.errors)
    kind = _kind(body, at)
    target = _string(body, "target", at)
    if target is None and "target" not in body:
        at.here("target").error("is required: the absolute path in the container")
    elif target is not None:
        _target(target, at.key(body, "target"))
    flag = body.get("read_only")
    read_only = False if flag is None else boolean(flag, at.key(body, "read_only"))
    consistency = _choice(body, "consistency", CONSISTENCIES, at)
    if kind is None or target is None:
        return None
    source = _long_source(body, kind, at)
    options = _options(body, kind, at)
    if len(at.errors) > errors:
        return None
    return VolumeSpec(
        source=source,
        target=posixpath.normpath(target),
        read_only=read_only,
        kind=kind,
        consistency=consistency,
        **options,
    )


def volumes(value: object, at: At) -> tuple[VolumeSpec, ...]:
    if not isinstance(value, LineList):
        at.error(
            f"must be a list of 'SOURCE:TARGET[:MODE]' strings or mounts, not {describe(value)}"
        )
        return ()
    found: list[VolumeSpec] = []
    for index, item in enumerate(value):
        item_at = at.item(value, index)
        if isinstance(item, LineDict):
            volume = long_volume(item, item_at)
        elif isinstance(item, str):
            volume = _volume(item, item_at)
        else:
            item_at.error(
                f"must be a 'SOURCE:TARGET[:MODE]' string or a mapping, not {describe(item)}"
            )
            continue
        if volume is not None and any(v.target == volume.target for v in found):
            item_at.error(f"target {volume.target!r} is mounted twice")
        elif volume is not None:
            found.append(volume)
    return tuple(found)


_VOLUME_TARGET = r"/(?=[^:]*[^:/.])[^:]*"  # absolute, and not / itself
_MODE_WORD = "|".join(_MODE_KINDS)
_MODE_TEXT = rf"(?:{_MODE_WORD})(?:,(?:{_MODE_WORD}))*"  # each kind once: beyond a pattern
VOLUME_TEXT = (
    rf"^(?:(?:/[^:]*|\.[^:]*|~[^:]*|{_VOLUME_NAME_RE.pattern}):{_VOLUME_TARGET}"
    rf"(?::{_MODE_TEXT})?|{_VOLUME_TARGET})$"
)

_OPEN: dict[str, Any] = {"additionalProperties": False, "patternProperties": {"^x-": {}}}
_NOT_FOR: dict[str, dict[str, Any]] = {  # the option sections each type cannot have
    kind: {"not": {"anyOf": [{"required": [o]} for o in ("bind", "volume", "tmpfs") if o != kind]}}
    for kind in ("bind", "volume", "tmpfs")
}
MOUNT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "target"],
    "properties": {
        "type": {"enum": ["bind", "volume", "tmpfs"]},
        "source": {"type": "string", "minLength": 1},
        "target": {"type": "string", "pattern": r"^/(?=.*[^/.])"},
        "read_only": {"type": "boolean"},
        "consistency": {"enum": list(CONSISTENCIES)},
        "bind": {
            "type": "object",
            "properties": {
                "propagation": {"enum": list(PROPAGATIONS)},
                "create_host_path": {"type": "boolean"},
                "selinux": {"enum": ["z", "Z"]},
            },
            **_OPEN,
        },
        "volume": {"type": "object", "properties": {"nocopy": {"type": "boolean"}}, **_OPEN},
        "tmpfs": {
            "type": "object",
            "properties": {
                "size": {
                    "anyOf": [
                        {"type": "integer", "minimum": 0},
                        {"type": "string", "pattern": f"^{SIZE_PATTERN}$"},
                    ]
                },
                "mode": {
                    "anyOf": [
                        {"type": "integer", "minimum": 0, "maximum": 0o7777},
                        {"type": "string", "pattern": "^(?:0o)?[0-7]{1,5}$"},
                    ]
                },
            },
            **_OPEN,
        },
    },
    "allOf": [
        {
            "if": {"properties": {"type": {"const": "bind"}}},
            "then": {"required": ["source"], **_NOT_FOR["bind"]},
        },
        {"if": {"properties": {"type": {"const": "volume"}}}, "then": _NOT_FOR["volume"]},
        {
            "if": {"properties": {"type": {"const": "tmpfs"}}},
            "then": {
                "not": {"anyOf": [{"required": ["source"]}, *_NOT_FOR["tmpfs"]["not"]["anyOf"]]}
            },
        },
    ],
    **_OPEN,
}
