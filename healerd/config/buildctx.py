"""The context hash of a `build:`: what a build reads, taken at each reload, so that a
changed file rolls the service out on a new image and an unchanged one rebuilds nothing.

It covers every entry `.dockerignore` lets through (path, kind, executable bit, the
content or a link's target), the Dockerfile (or `dockerfile_inline`) and the build's
settings. A file's digest is kept against its size, mtime and inode, so a reload reads
again only what changed (as git's index does).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import asdict, replace
from pathlib import Path

from healerd.config.dockerignore import Matcher, read_patterns
from healerd.model import BuildSpec

# A context larger than this is refused: hashing it at each reload would cost too much,
# and it is most likely a directory not meant as one (`.` over a data tree).
MAX_CONTEXT_FILES = 20_000
_CACHE_LIMIT = 50_000
_digests: dict[tuple[str, int, int, int], str] = {}


class ContextError(Exception):
    """The context cannot be read; the message says what and why."""


def _file_digest(path: str, st: os.stat_result) -> str:
    key = (path, st.st_size, st.st_mtime_ns, st.st_ino)
    found = _digests.get(key)
    if found is not None:
        return found
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    if len(_digests) >= _CACHE_LIMIT:
        _digests.clear()
    _digests[key] = h.hexdigest()
    return _digests[key]


def _entry(root: str, rel: str) -> str:
    """One line of the hash: the entry's path, kind, executable bit and content."""
    full = os.path.join(root, rel)
    st = os.lstat(full)
    if stat.S_ISLNK(st.st_mode):
        return f"l {rel} {os.readlink(full)}"
    if stat.S_ISDIR(st.st_mode):
        return f"d {rel}"
    if not stat.S_ISREG(st.st_mode):
        return f"s {rel}"  # a socket or FIFO: the build skips it, its name is enough
    return f"f {rel} {st.st_mode & 0o111:o} {_file_digest(full, st)}"


def _entries(root: str, matcher: Matcher) -> list[str]:
    lines: list[str] = []
    for top, dirs, files in os.walk(root, onerror=_raise):
        rel_top = os.path.relpath(top, root)
        prefix = "" if rel_top == "." else rel_top + "/"
        kept = []
        for name in sorted(dirs):
            rel = prefix + name
            if not matcher.excluded(rel):
                kept.append(name)
                lines.append(_entry(root, rel))
            elif matcher.has_exceptions:
                kept.append(name)  # an exception may bring back something inside
        dirs[:] = kept
        for name in sorted(files):
            rel = prefix + name
            if not matcher.excluded(rel):
                lines.append(_entry(root, rel))
        if len(lines) > MAX_CONTEXT_FILES:
            raise ContextError(
                f"holds more than {MAX_CONTEXT_FILES} entries that .dockerignore lets "
                "through: narrow the context or ignore more"
            )
    return lines


def _raise(exc: OSError) -> None:
    raise exc


def context_hash(build: BuildSpec, *, files_at: str | None = None) -> str:
    """sha256 of what the build reads (ContextError when it cannot be read). `files_at`:
    read the context's files there instead, as they will be at `build.context` (a
    bundle's hash before it is switched in: healerd.daemon.bundlebuilt)."""
    root = files_at or build.context
    if not os.path.isdir(root):
        raise ContextError(f"context {root} is not a directory")
    try:
        ignore = Path(root, ".dockerignore")
        patterns = read_patterns(ignore.read_text(errors="replace")) if ignore.exists() else []
        lines = _entries(root, Matcher(patterns))
        if build.dockerfile_inline is None:
            dockerfile = Path(root, build.dockerfile).read_bytes()
        else:
            dockerfile = build.dockerfile_inline.encode()
    except OSError as exc:
        raise ContextError(f"cannot read {exc.filename or root}: {exc.strerror}") from None
    settings = json.dumps(asdict(replace(build, context_hash="")), sort_keys=True)
    h = hashlib.sha256()
    for part in (settings, "\n".join(lines), hashlib.sha256(dockerfile).hexdigest()):
        h.update(part.encode(errors="surrogateescape") + b"\0")
    return h.hexdigest()


__all__ = ["MAX_CONTEXT_FILES", "ContextError", "context_hash"]
