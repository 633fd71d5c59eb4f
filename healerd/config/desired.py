"""The desired state: every service file merged, with each file's last good version remembered.

A typo in one file must never take running services down, so a broken file keeps what it
last declared, and while a broken file has never been good nothing undeclared is removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from healerd.config.errors import ConfigError
from healerd.config.services import FileResult, load_service_file
from healerd.model import ServiceSpec

CONFIG_SUFFIXES = (".yaml", ".yml")


def list_config_files(conf_dir: Path) -> list[Path]:
    """Service files in `conf_dir`, sorted by name so that precedence is predictable.

    A missing directory declares nothing. Any other listing failure raises OSError:
    callers must keep their previous state rather than read it as "no services".
    """
    try:
        entries = list(conf_dir.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    files = [
        p
        for p in entries
        if p.suffix in CONFIG_SUFFIXES and not p.name.startswith(".") and p.is_file()
    ]
    return sorted(files, key=lambda p: p.name)


def load_conf_dir(conf_dir: Path) -> list[FileResult]:
    """Checks every service file; `file` is the full path, which operators can act on directly."""
    return [load_service_file(path, str(path)) for path in list_config_files(conf_dir)]


@dataclass(frozen=True)
class DesiredState:
    """What should run, plus what the daemon must know to act on it safely.

    When `hold_orphans` is set, containers of undeclared services must be kept: a broken
    file that was never good might be the one declaring them.
    """

    services: Mapping[str, ServiceSpec]
    errors: tuple[ConfigError, ...]
    hold_orphans: bool
    broken_files: tuple[str, ...]


class DesiredStore:
    """Remembers each file's last valid result since the process started (not across restarts)."""

    def __init__(self) -> None:
        self._last_good: dict[str, FileResult] = {}

    def update(self, results: list[FileResult]) -> DesiredState:
        """Merges one scan of the config directory; `results` must cover every file present."""
        present = {r.file for r in results}
        self._last_good = {f: r for f, r in self._last_good.items() if f in present}
        services: dict[str, ServiceSpec] = {}
        origins: dict[str, str] = {}
        errors: list[ConfigError] = []
        broken: list[str] = []
        hold_orphans = False
        for result in sorted(results, key=lambda r: r.file):
            if result.services is not None:
                self._last_good[result.file] = result
            else:
                errors.extend(result.errors)
                broken.append(result.file)
                hold_orphans = hold_orphans or result.file not in self._last_good
            good = self._last_good.get(result.file)
            if good is not None:
                errors.extend(_merge(good, services, origins))
        return DesiredState(MappingProxyType(services), tuple(errors), hold_orphans, tuple(broken))


def _merge(
    result: FileResult, services: dict[str, ServiceSpec], origins: dict[str, str]
) -> list[ConfigError]:
    """Adds a file's services; the first file (in sorted order) to declare a name keeps it."""
    errors = []
    for name, spec in (result.services or {}).items():
        first = origins.setdefault(name, result.file)
        if first == result.file:
            services[name] = spec
            continue
        reason = f"declared in both {first} and {result.file}; the one in {first} is used"
        errors.append(ConfigError(result.file, result.lines.get(name), f"services.{name}", reason))
    return errors
