"""`healerctl export`: the declared services as a Swarm stack, Kubernetes manifests or a
plain Compose file, from the config files alone (no daemon).

PATHs are read as by `healerctl validate`: a service file, a conf.d directory or a config
directory (default /etc/healerd/conf.d), through the daemon's own loader and merge.
`${VAR}`s take their values from the files' `.env` and, for the names given with
--environment only, from the caller's environment. Values that came from variables are
written back as `${VAR}` or moved into a Secret (healerd.cli.export.variables). An output
file is written whole or not at all, mode 0600, never through a symbolic link.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Protocol, TextIO

from healerd.cli.export import compose, kubernetes, swarm, verbs
from healerd.cli.export.common import Options, Rendered
from healerd.cli.export.kubeservice import depended_on
from healerd.cli.export.variables import all_substitutions
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
from healerd.config.masking import mask_free
from healerd.model import ServiceSpec, Substitution

EXIT_OK, EXIT_NO, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 5
SETTINGS_FILE = "healerd.yaml"
TARGETS: dict[str, Callable[[list[ServiceSpec], Options], Rendered]] = {
    "swarm": swarm.render,
    "kubernetes": kubernetes.render,
    "compose": compose.render,
}
assert sorted(TARGETS) == sorted(verbs.TARGET_NAMES)


class CtlLike(Protocol):
    args: argparse.Namespace
    out: TextIO
    err: TextIO


def load(
    paths: list[Path], environment: Collection[str] = ()
) -> tuple[dict[str, ServiceSpec], list[ConfigError], list[str]]:
    """Services, config errors and the files read: the same merge as `validate`'s.
    `environment`: the caller's variables that `${VAR}` may read (none by default)."""
    results: list[FileResult] = []
    errors: list[ConfigError] = []
    for path in paths:
        if path.is_dir():
            conf_dir = path / "conf.d" if (path / "conf.d").is_dir() else path
            try:
                results.extend(load_conf_dir(conf_dir, environment=environment))
            except OSError as exc:
                errors.append(ConfigError(str(conf_dir), None, "", f"cannot read: {exc}"))
        elif path.name != SETTINGS_FILE:  # daemon settings: nothing to export
            results.append(load_service_file(path, environment=environment))
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
    """With --include-secrets, each service's env file values (the Secret also takes its
    values from variables); {} without."""
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


def _write(ctl: CtlLike, text: str) -> int:
    path = ctl.args.export_file
    if not path:
        ctl.out.write(text)
        return EXIT_OK
    try:
        write_private(Path(path), text)
    except OSError as exc:
        ctl.err.write(f"healerctl: cannot write {path}: {exc.strerror or exc}\n")
        return EXIT_NO
    return EXIT_OK


def write_private(path: Path, text: str) -> None:
    """`text` as `path`, mode 0600, whole or not at all: through a new file beside it
    (O_CREAT|O_EXCL|O_NOFOLLOW, which mkstemp uses) renamed over it. An existing file
    keeps neither its mode nor its owner, and a symbolic link is replaced, never
    followed."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _report(ctl: CtlLike, rendered: Rendered, subs: tuple[Substitution, ...]) -> int:
    """Notes, losses and warnings, on stderr; values from variables never (they are
    masked as in healerd's views)."""
    strict = ctl.args.strict
    for note in rendered.notes:
        ctl.err.write(f"healerctl: note: {mask_free(note, subs)}\n")
    word = "error" if strict else "warning"
    for loss in rendered.losses:
        text = mask_free(str(loss), subs)
        ctl.err.write(f"healerctl: {word}: {text} (not expressible in {ctl.args.target})\n")
    for warning in rendered.warnings:
        ctl.err.write(f"healerctl: {word}: {mask_free(warning, subs)}\n")
    failed = len(rendered.losses) + len(rendered.warnings)
    if strict and failed:
        ctl.err.write(
            f"healerctl: --strict: {failed} field(s) lost or holding a value from a variable: "
            "nothing written\n"
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
    services, errors, files = load(paths, a.export_environment)
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
    reached = depended_on(services.values())
    rendered = TARGETS[a.target](
        specs, Options(secrets=secrets, sources=tuple(files), depended_on=reached)
    )
    code = _report(ctl, rendered, all_substitutions(specs))
    return _write(ctl, rendered.text) if code == EXIT_OK else code


__all__ = ["TARGETS", "export", "load"]
