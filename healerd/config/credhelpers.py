"""Credential helpers (`docker-credential-NAME`, named by auth.json's `credHelpers` and
`credsStore`): found once per reload, and trusted as a config file is (issue 29).

healerd runs a helper as root at pulls and update checks, so whoever can change it, or
put another program of that name earlier on PATH, could run anything as root. Each
helper is looked up on healerd's PATH (the unit sets a fixed one) when auth.json is
read, at start and at every reload; under strict modes the program found first, and
every directory on the way to it, must pass the checks of a config file
(healerd.config.trust.trusted_executable): a helper in a place others can write is
refused, naming the program and the directory, rather than passed over for the next one
on PATH. The path it resolves to (absolute, without links) is the one the engine
adapter runs: it never looks on PATH itself.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from healerd.config.trust import FileRefused, trusted_executable

PREFIX = "docker-credential-"
_ESCAPE = " or set strict_modes: false in healerd.yaml (development only)"


class HelperRefused(Exception):
    """A helper that cannot be run: not found, or not trusted. The message names it."""


def resolve_helper(name: str, *, strict: bool) -> str:
    """The absolute path of `docker-credential-NAME` on PATH (its links resolved);
    raises HelperRefused."""
    program = PREFIX + name
    search = os.environ.get("PATH", os.defpath)
    found = shutil.which(program, path=search)
    if found is None:
        raise HelperRefused(f"credential helper {program} is not installed on PATH ({search})")
    if not os.path.isabs(found):
        raise HelperRefused(
            f"credential helper {program} was found at {found}, through a relative PATH "
            "entry: healerd runs only a helper at an absolute path"
        )
    if not strict:
        return os.path.realpath(found)
    try:
        return str(trusted_executable(Path(found), "credential helper", _ESCAPE))
    except FileRefused as exc:
        raise HelperRefused(str(exc)) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise HelperRefused(f"credential helper {found}: cannot be checked: {reason}") from None


def resolve_helpers(names: set[str], *, strict: bool) -> tuple[dict[str, str], dict[str, str]]:
    """Each helper's path, and why each one that cannot be run is refused."""
    paths: dict[str, str] = {}
    errors: dict[str, str] = {}
    for name in sorted(names):
        try:
            paths[name] = resolve_helper(name, strict=strict)
        except HelperRefused as exc:
            errors[name] = str(exc)
    return paths, errors


__all__ = ["PREFIX", "HelperRefused", "resolve_helper", "resolve_helpers"]
