"""A service's `build:` checked into a BuildSpec, with its context hash (read here: the
config may read files, and a reload is when a changed context must be seen).

What the engine's classic build API (POST /build) can do is taken; what needs BuildKit
(`ssh`, `secrets`, `additional_contexts`, `cache_to`, `platforms`, ...) is refused with
the reason, never silently dropped: an image built without its secret is a broken one.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from healerd.config.buildctx import ContextError, context_hash
from healerd.config.errors import describe
from healerd.config.hostchecks import extra_hosts
from healerd.config.keys import At
from healerd.config.pairs import LEFT_OUT, environment, labels
from healerd.config.trust import FileRefused, trust_problem, trusted_directory
from healerd.config.units import parse_size
from healerd.config.values import string
from healerd.config.yamlload import LineDict, LineList
from healerd.model import BuildSpec

BUILD_KEYS = (
    "context", "dockerfile", "dockerfile_inline", "args", "target", "labels", "cache_from",
    "network", "shm_size", "extra_hosts",
)  # fmt: skip
_REFUSED = {
    "ssh": "needs BuildKit, which the engine's classic build API healerd uses has not",
    "secrets": "needs BuildKit (build secrets), which the classic build API has not",
    "additional_contexts": "needs BuildKit, which the classic build API has not",
    "cache_to": "needs BuildKit, which the classic build API has not",
    "platforms": "needs BuildKit (multi-platform builds): use platform on the service",
    "tags": "not supported: healerd tags the one image the service runs",
    "no_cache": "not supported: healerd's builds use the cache (healerctl build --no-cache)",
    "pull": "not supported: healerd never pulls for a build (FROM images must be present "
    "or pullable by the engine itself)",
    "privileged": "needs BuildKit, which the classic build API has not",
    "isolation": "Windows only",
    "entitlements": "needs BuildKit, which the classic build API has not",
    "ulimits": "not supported by healerd's builds yet",
    "provenance": "needs BuildKit, which the classic build API has not",
    "sbom": "needs BuildKit, which the classic build API has not",
}
_REMOTE = re.compile(r"^([a-z][a-z0-9+.-]*://|git@|github\.com/)", re.IGNORECASE)


def _path(value: str, at: At) -> str:
    if os.path.isabs(value):
        return os.path.normpath(value)
    base = at.context.base_dir
    return os.path.normpath(os.path.join(str(base) if base else ".", value))


def _strings(value: object, at: At) -> tuple[str, ...]:
    if not isinstance(value, LineList):
        at.error(f"must be a list of strings, not {describe(value)}")
        return ()
    found = [string(v, at.item(value, i)) for i, v in enumerate(value)]
    return tuple(v for v in found if v)


def _args(value: object, at: At) -> tuple[tuple[str, str], ...]:
    """Build args. One named without a value (`- NAME`, `NAME:` with nothing) has taken
    the project's variable NAME before this check (healerd.config.projectread), or is left
    out when that is not set, so that the Dockerfile's default applies, as in Compose."""
    if isinstance(value, LineList):
        pairs: dict[str, str] = {}
        for index, item in enumerate(value):
            item_at = at.item(value, index)
            if item is LEFT_OUT:
                continue
            if not isinstance(item, str):
                item_at.error(f"must be a 'NAME=value' string, not {describe(item)}")
            elif "=" in item:
                name, _, text = item.partition("=")
                pairs[name] = text
            else:
                item_at.warn(f"{item} has no value: the Dockerfile's default applies")
        return tuple(sorted(pairs.items()))
    unset = {k for k, v in value.items() if v is None} if isinstance(value, LineDict) else set()
    return tuple(p for p in environment(value, at) if p[0] not in unset)


def _context(raw: object, at: At) -> str | None:
    text = string(raw, at)
    if text is None:
        return None
    if _REMOTE.match(text):
        at.error(
            f"{text!r} is a remote context: healerd builds from a local directory only "
            "(it hashes the context to know when to rebuild); clone it first"
        )
        return None
    return _path(text or ".", at)


def _options(body: LineDict, at: At) -> dict[str, Any]:
    """The mapping's keys other than the context, checked."""
    checks: dict[str, Callable[[Any, At], Any]] = {
        "dockerfile": string,
        "dockerfile_inline": string,
        "args": _args,
        "target": string,
        "labels": labels,
        "cache_from": _strings,
        "network": string,
        "extra_hosts": extra_hosts,
    }
    found: dict[str, Any] = {}
    for key, value in body.items():
        key_at = at.key(body, key)
        if key in _REFUSED:
            key_at.error(_REFUSED[key])
        elif key in checks and value is not None:
            found[str(key)] = checks[str(key)](value, key_at)
        elif key == "shm_size" and value is not None:
            try:
                found["shm_size"] = parse_size(value)
            except ValueError as exc:
                key_at.error(str(exc))
        elif key not in BUILD_KEYS and not (isinstance(key, str) and key.startswith("x-")):
            key_at.error(f"{key!r} is not a build key (supported: {', '.join(BUILD_KEYS)})")
    if "dockerfile" in found and "dockerfile_inline" in found:
        at.key(body, "dockerfile_inline").error("cannot be combined with dockerfile")
    return {k: v for k, v in found.items() if v is not None}


def _trusted(context: str, at: At, spec: BuildSpec) -> bool:
    """With strict_modes, the context directory and those above it are root's (or
    healerd's) alone, as the project directory must be, and so are the Dockerfile and
    its directories (it may sit outside the context): else another user could change
    what the image is built from."""
    dockerfile = None if spec.dockerfile_inline is not None else Path(context, spec.dockerfile)
    try:
        trusted_directory(Path(context), "build context")
        if dockerfile is not None:
            trusted_directory(dockerfile.parent, "Dockerfile's directory")
            if problem := trust_problem(dockerfile, "Dockerfile"):
                raise FileRefused(problem)
    except FileRefused as exc:
        at.error(str(exc))
        return False
    except OSError:
        pass  # missing: the hash says so
    return True


def build(value: object, at: At) -> BuildSpec | None:
    """`build:` as a string (the context) or a mapping; None after an error."""
    before = len(at.errors)
    if isinstance(value, LineDict):
        raw = value.get("context", ".")
        context = _context(raw, at.key(value, "context") if "context" in value else at)
        options = _options(value, at)
    elif isinstance(value, str):
        context, options = _context(value, at), {}
    else:
        at.error(f"must be a context directory or a mapping, not {describe(value)}")
        return None
    if context is None or len(at.errors) > before:
        return None
    spec = BuildSpec(context, **options)
    if at.context.strict_modes and not _trusted(context, at, spec):
        return None
    try:
        return dataclasses.replace(spec, context_hash=context_hash(spec))
    except ContextError as exc:
        at.error(str(exc))
        return None


__all__ = ["BUILD_KEYS", "build"]
