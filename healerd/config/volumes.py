"""`volumes`: Compose's short syntax, SOURCE:TARGET[:ro|rw] or an anonymous /path.

A relative SOURCE (`./data`, `../shared`, `~/x`) is a host path from the service file's
directory, as Compose takes it from the project directory. The long syntax (a mapping
per mount) is not supported yet.
"""

from __future__ import annotations

import posixpath
import re

from healerd.config.errors import describe
from healerd.config.keys import At
from healerd.config.yamlload import LineList
from healerd.model import VolumeSpec

# Docker's own rule for volume names (at least two characters).
_VOLUME_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")
_ANONYMOUS_RE = re.compile(r"[0-9a-f]{64}")


def _absolute(source: str, at: At) -> str:
    """Compose's relative paths: from the project directory (the file's directory), and
    ~ as the home directory of the user healerd runs as. Anything else as it is."""
    if not (source.startswith(("./", "../", "~")) or source in (".", "..")):
        return source
    if source.startswith("~"):
        return posixpath.expanduser(source)
    base = at.context.base_dir
    return posixpath.join(str(base.absolute() if base else "/"), source)


def _volume(text: str, at: At) -> VolumeSpec | None:
    parts = text.split(":")
    if len(parts) > 3 or not all(parts):
        at.error(f"{text!r} is not SOURCE:TARGET[:ro|rw] or an anonymous /path")
        return None
    if len(parts) == 1:
        source, target, mode = "", parts[0], "rw"
    elif len(parts) == 2:
        source, target, mode = parts[0], parts[1], "rw"
    else:
        source, target, mode = parts
    errors = len(at.errors)
    if mode not in ("ro", "rw"):
        at.error(f"mode {mode!r} must be ro or rw")
    if not target.startswith("/"):
        at.error(f"target {target!r} must be an absolute path")
    elif posixpath.normpath(target) == "/":
        at.error("cannot mount over /")
    source = _absolute(source, at)
    if source.startswith("/"):
        source = posixpath.normpath(source)
    elif _ANONYMOUS_RE.fullmatch(source):
        # Anonymous volumes follow their own service's replicas (issue 14): naming one
        # would share another service's data, and it would vanish with that service.
        at.error(
            f"source {source[:12]}... is an anonymous volume's name (64 hex digits), which "
            "belongs to another container; give the volume a name of your own"
        )
    elif source and not _VOLUME_NAME_RE.fullmatch(source):
        at.error(f"source {source!r} must be an absolute path or a volume name (2+ characters)")
    if len(at.errors) > errors:
        return None
    return VolumeSpec(source=source, target=posixpath.normpath(target), read_only=mode == "ro")


def volumes(value: object, at: At) -> tuple[VolumeSpec, ...]:
    if not isinstance(value, LineList):
        at.error(f"must be a list of 'SOURCE:TARGET[:ro|rw]' strings, not {describe(value)}")
        return ()
    found: list[VolumeSpec] = []
    for index, item in enumerate(value):
        item_at = at.item(value, index)
        if not isinstance(item, str):
            item_at.error(f"only the short syntax SOURCE:TARGET is supported, not {describe(item)}")
            continue
        volume = _volume(item, item_at)
        if volume is not None and any(v.target == volume.target for v in found):
            item_at.error(f"target {volume.target!r} is mounted twice")
        elif volume is not None:
            found.append(volume)
    return tuple(found)


_VOLUME_TARGET = r"/(?=[^:]*[^:/.])[^:]*"  # absolute, and not / itself
VOLUME_TEXT = (
    rf"^(?:(?:/[^:]*|\.\.?(?:/[^:]*)?|~[^:]*|{_VOLUME_NAME_RE.pattern}):{_VOLUME_TARGET}"
    rf"(?::(?:ro|rw))?|{_VOLUME_TARGET})$"
)
