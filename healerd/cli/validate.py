"""`healerctl validate`: the daemon's own config checks, without a daemon.

A PATH may be a service file, a project directory (a Compose project, as conf.d may
hold one), a conf.d directory, or a config directory (with conf.d/ and an optional
healerd.yaml). Directories go through the same loader and merge as the
daemon's reload, so cross-file problems (a service declared twice) show up too. Every
form, a single file included, applies the daemon's rules: strict modes unless the
config directory's healerd.yaml says `strict_modes: false` (a file that a lenient check
passed and the daemon refused was a false "ok").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healerd.config import (
    ConfigError,
    DesiredStore,
    FileResult,
    Settings,
    SettingsError,
    load_conf_dir,
    load_service_file,
    load_settings,
)
from healerd.config.projectdir import is_project_dir, load_project_dir

SETTINGS_FILE = "healerd.yaml"


@dataclass
class Report:
    files: list[str] = field(default_factory=list)
    services: dict[str, str] = field(default_factory=dict)  # name -> file
    errors: list[ConfigError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "files": self.files,
            "services": [{"name": n, "file": f} for n, f in sorted(self.services.items())],
            "errors": [
                {"file": e.file, "line": e.line, "field": e.field, "reason": e.reason}
                | {"message": str(e)}
                for e in self.errors
            ],
        }


def _add_results(report: Report, results: list[FileResult]) -> None:
    # The daemon's merge: per-file errors plus services declared in more than one file.
    state = DesiredStore().update(results)
    report.files.extend(r.file for r in results)
    report.errors.extend(state.errors)
    for name, spec in state.services.items():
        report.services.setdefault(name, spec.source_file)


def _settings(report: Report, path: Path) -> Settings:
    report.files.append(str(path))
    try:
        return load_settings(path)
    except SettingsError as exc:
        report.errors.extend(exc.errors)
        return Settings()


def strict_modes_for(conf_dir: Path) -> bool:
    """The daemon's strict_modes for the files of `conf_dir`: what the healerd.yaml of
    its config directory (conf.d's parent) says; True (the default) when there is none
    or it cannot be used (the daemon would not start with it: validate reports it)."""
    settings = conf_dir.parent / SETTINGS_FILE
    if conf_dir.name != "conf.d" or not settings.is_file():
        return True
    try:
        return load_settings(settings).strict_modes
    except SettingsError:
        return True


def validate(paths: list[Path]) -> Report:
    report = Report()
    for path in paths:
        if path.is_dir() and is_project_dir(path) and not (path / "conf.d").is_dir():
            # A project directory (docker compose's layout): checked as conf.d reads it.
            strict = strict_modes_for(path.parent)
            _add_results(report, [load_project_dir(path, str(path), strict_modes=strict)])
        elif path.is_dir():
            settings = path / SETTINGS_FILE
            conf_d = path / "conf.d"
            # The variables of the environment that healerd.yaml lets `${VAR}` read.
            allowed: tuple[str, ...] = ()
            if conf_d.is_dir() or settings.is_file():
                if settings.is_file():
                    allowed = _settings(report, settings).interpolate_environment
                conf_dir = conf_d
            else:
                conf_dir = path
            strict = strict_modes_for(conf_dir)
            try:
                _add_results(
                    report, load_conf_dir(conf_dir, strict_modes=strict, environment=allowed)
                )
            except OSError as exc:
                report.errors.append(ConfigError(str(conf_dir), None, "", f"cannot read: {exc}"))
        elif path.name == SETTINGS_FILE:
            _settings(report, path)
        else:
            strict = strict_modes_for(path.parent)
            _add_results(report, [load_service_file(path, strict_modes=strict)])
    return report
