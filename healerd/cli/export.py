"""`healerctl export`: the declared services as a Swarm stack, Kubernetes manifests or a
plain Compose file, from the config files alone (no daemon).

PATHs are read as by `healerctl validate`: a service file, a conf.d directory or a config
directory (default /etc/healerd/conf.d), through the daemon's own loader and merge.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TextIO

from healerd.cli import export_compose, export_kubernetes, export_swarm, export_verbs
from healerd.cli.export_common import Options, Rendered
from healerd.config import (
    ConfigError,
    DesiredStore,
    EnvFileError,
    FileResult,
    Settings,
    load_conf_dir,
    load_service_file,
    read_env_files,
)
from healerd.model import ServiceSpec

EXIT_OK, EXIT_NO, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 5
SETTINGS_FILE = "healerd.yaml"
TARGETS: dict[str, Callable[[list[ServiceSpec], Options], Rendered]] = {
    "swarm": export_swarm.render,
    "kubernetes": export_kubernetes.render,
    "compose": export_compose.render,
}
assert sorted(TARGETS) == sorted(export_verbs.TARGET_NAMES)


class CtlLike(Protocol):
    args: argparse.Namespace
    out: TextIO
    err: TextIO


def load(paths: list[Path]) -> tuple[dict[str, ServiceSpec], list[ConfigError], list[str]]:
    """Services, config errors and the files read: the same merge as `validate`'s."""
    results: list[FileResult] = []
    errors: list[ConfigError] = []
    for path in paths:
        if path.is_dir():
            conf_dir = path / "conf.d" if (path / "conf.d").is_dir() else path
            try:
                results.extend(load_conf_dir(conf_dir))
            except OSError as exc:
                errors.append(ConfigError(str(conf_dir), None, "", f"cannot read: {exc}"))
        elif path.name != SETTINGS_FILE:  # daemon settings: nothing to export
            results.append(load_service_file(path))
    state = DesiredStore().update(results)
    return dict(state.services), [*errors, *state.errors], [r.file for r in results]


def _select(ctl: CtlLike, services: dict[str, ServiceSpec], errors: list[ConfigError]) -> int:
    """EXIT_OK when every chosen service is there and valid; reports the problems."""
    chosen = ctl.args.export_services
    unknown = [n for n in chosen if n not in services]
    for e in errors:
        ctl.err.write(f"{e}\n")
    if errors and (not chosen or unknown):
        ctl.err.write(f"healerctl: {len(errors)} config error(s): nothing exported\n")
        return EXIT_NO
    if errors:
        ctl.err.write("healerctl: warning: the files above have errors and are not exported\n")
    for name in unknown:
        ctl.err.write(f"healerctl: no such service: {name}\n")
    return EXIT_UNKNOWN if unknown else EXIT_OK


def _secrets(ctl: CtlLike, specs: list[ServiceSpec]) -> dict[str, dict[str, str]] | None:
    if not ctl.args.include_secrets:
        return {}
    out: dict[str, dict[str, str]] = {}
    for spec in specs:
        try:
            out[spec.name] = dict(read_env_files(spec))
        except EnvFileError as exc:
            ctl.err.write(f"healerctl: {exc}\n")  # names the file and line, never a value
            return None
    return out


def _usage(ctl: CtlLike) -> str | None:
    a = ctl.args
    if a.include_secrets and a.target != "kubernetes":
        return "--include-secrets is for --to kubernetes (stack and Compose files name env files)"
    if a.include_secrets and not a.export_file:
        return "--include-secrets needs -o FILE: secret values are never printed to a terminal"
    return None


def _write(ctl: CtlLike, text: str) -> None:
    path = ctl.args.export_file
    if not path:
        ctl.out.write(text)
        return
    mode = 0o600 if ctl.args.include_secrets else 0o644
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def _report(ctl: CtlLike, rendered: Rendered) -> int:
    strict = ctl.args.strict
    for note in rendered.notes:
        ctl.err.write(f"healerctl: note: {note}\n")
    word = "error" if strict else "warning"
    for loss in rendered.losses:
        ctl.err.write(f"healerctl: {word}: {loss} (not expressible in {ctl.args.target})\n")
    if strict and rendered.losses:
        ctl.err.write(
            f"healerctl: --strict: {len(rendered.losses)} field(s) lost: nothing written\n"
        )
        return EXIT_NO
    return EXIT_OK


def export(ctl: CtlLike) -> int:
    a = ctl.args
    problem = _usage(ctl)
    if problem:
        ctl.err.write(f"healerctl: {problem}\n")
        return EXIT_USAGE
    paths = [Path(p) for p in a.paths] or [Settings().config_dir]
    services, errors, files = load(paths)
    code = _select(ctl, services, errors)
    if code != EXIT_OK:
        return code
    names = list(dict.fromkeys(a.export_services)) or sorted(services)
    specs = [services[n] for n in names]
    if not specs:
        ctl.err.write("healerctl: warning: no services declared\n")
    secrets = _secrets(ctl, specs)
    if secrets is None:
        return EXIT_NO
    rendered = TARGETS[a.target](specs, Options(secrets=secrets, sources=tuple(files)))
    code = _report(ctl, rendered)
    if code == EXIT_OK:
        _write(ctl, rendered.text)
    return code


__all__ = ["TARGETS", "export", "load"]
