"""Daemon settings from the optional healerd.yaml: reading and checking the file.

Unlike service files, bad settings stop healerd at startup: there is no last-good value
to fall back on, and guessing at timeouts or the engine address would hide the mistake.
The value is healerd.config.settingsmodel's `Settings`, the key table
healerd.config.settingkeys, each value's check healerd.config.settingchecks; the names
others import are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from healerd.config.dockertls import plain_tcp_problem
from healerd.config.errors import (
    ConfigError,
    SettingsError,
    describe,
    sort_errors,
    unknown_key_reason,
)
from healerd.config.keys import At, check_keys
from healerd.config.settingchecks import MAX_WORKERS
from healerd.config.settingkeys import RELOADABLE, SETTING_KEYS, SETTINGS_FIELDS, Setting
from healerd.config.settingsmodel import Settings
from healerd.config.yamlload import LineDict, load_yaml_bytes, read_config_file

__all__ = [
    "MAX_WORKERS",
    "RELOADABLE",
    "SETTINGS_FIELDS",
    "SETTING_KEYS",
    "Setting",
    "Settings",
    "check_settings",
    "load_settings",
]

# Pairs whose order matters: a base above its maximum makes backoff nonsense.
_ORDERED = (("backoff_base", "backoff_max"),)


def _checked(
    values: Mapping[str, object], file: str, lines: Mapping[str, int]
) -> tuple[dict[str, Any], list[ConfigError]]:
    """Every key's value, converted (an absent key's is its default), and every problem."""
    errors: list[ConfigError] = []

    def at_of(key: str) -> At:
        return At(errors, file, key, lines.get(key))

    # Unlike in a service file, null is a value for the check to judge: docker_host: null
    # means the default engine, workers: null is an error.
    good, failed = check_keys(values, SETTINGS_FIELDS, at_of, null_is_absent=False)
    for low, high in _ORDERED:
        if low not in failed and high not in failed and good[low] > good[high]:
            reason = f"must not be greater than {high} ({good[high]}s)"
            errors.append(ConfigError(file, lines.get(low, lines.get(high)), low, reason))
    if good["docker_host"] and not failed & {"docker_host", "docker_tls"}:
        tls, insecure = good["docker_tls"], good["docker_insecure_tcp"]
        problem = plain_tcp_problem(good["docker_host"], tls, insecure)
        if problem:
            errors.append(ConfigError(file, lines.get("docker_host"), "docker_host", problem))
    return good, errors


def check_settings(settings: Settings, file: str = "<settings>") -> list[ConfigError]:
    """Every problem with already-built settings, e.g. after command-line overrides.

    config_dir is not checked: a missing directory is legal (it declares nothing).
    """
    return _checked({key.name: getattr(settings, key.name) for key in SETTINGS_FIELDS}, file, {})[1]


# healerd.yaml is read strictly whatever it says: it is what sets strict_modes.
_SETTINGS_ESCAPE = (
    "; strict_modes: false cannot help, as healerd.yaml is what sets it and is always checked"
)


def _read(path: Path, file: str) -> tuple[Any, list[ConfigError]]:
    raw, errors = read_config_file(
        path, file, "settings file", strict=True, escape=_SETTINGS_ESCAPE
    )
    if raw is None:
        return None, errors
    return load_yaml_bytes(raw, file, merge_tags=False)


def _private(path: Path, file: str, line: int | None) -> list[ConfigError]:
    """A notification URL holds credentials: the file that holds it is not for others."""
    try:
        readable = path.stat().st_mode & 0o004
    except OSError:
        return []
    if not readable:
        return []
    reason = (
        "holds credentials (a target's URL), so healerd.yaml must not be readable by "
        f"others: chmod o-r {file}"
    )
    return [ConfigError(file, line, "notifications", reason)]


def load_settings(path: Path) -> Settings:
    """Settings from `path`; a missing file means all defaults. Raises SettingsError.

    The file is read through healerd.config.trust.read_trusted with strict rules before
    anything in it counts, whatever it says about strict_modes: it is refused when anyone
    but root or healerd's own user owns it or could write it or a directory above it,
    when it is a symbolic link, not a regular file or over 1 MiB.
    """
    file = str(path)
    data, errors = _read(path, file)
    values: dict[str, object] = {}
    lines: dict[str, int] = {}
    if data is not None and not isinstance(data, LineDict):
        errors.append(ConfigError(file, 1, "", f"must be a mapping, not {describe(data)}"))
    elif data is not None:
        for key, value in data.items():
            line = data.line_of(key)
            if key in SETTING_KEYS:
                values[key], lines[key] = value, line or 1
            elif key == "config_dir":
                reason = "is set on the command line, not in the file that lives inside it"
                errors.append(ConfigError(file, line, key, reason))
            elif not (isinstance(key, str) and key.startswith("x-")):
                errors.append(
                    ConfigError(file, line, str(key), unknown_key_reason(key, SETTING_KEYS))
                )
    good, more = _checked(values, file, lines)
    if good.get("notifications"):
        more += _private(path, file, lines.get("notifications"))
    if errors or more:
        raise SettingsError(sort_errors([*errors, *more]))
    return Settings(**good)
