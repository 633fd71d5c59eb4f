"""Service files: one YAML file read and checked into its services, or into its errors.

A file is applied all-or-nothing, so checking never stops at the first problem: every
error in the file is collected and the operator can fix them in one go.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from healerd.config.dependencies import check_dependencies
from healerd.config.errors import ConfigError, describe, sort_errors
from healerd.config.extends import resolve_extends
from healerd.config.include import resolve_include
from healerd.config.interpolate import Made, interpolate, project_directory, project_env
from healerd.config.keys import At, Context, unknown_keys
from healerd.config.legacy import format_one
from healerd.config.masking import mask_error, related
from healerd.config.mergedata import strip_tags
from healerd.config.netopts import implied_dependencies
from healerd.config.ports import HostPorts, describe_port
from healerd.config.project import TOP_LEVEL_KEYS, Project, default_name, read_project, resolve
from healerd.config.projectread import ProjectReader, resolve_unset, with_project_name
from healerd.config.service import check_service
from healerd.config.yamlload import (
    LineDict,
    LineList,
    load_yaml,
    load_yaml_bytes,
    read_config_file,
)
from healerd.model import ServiceSpec

SERVICE_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,49}")
MAX_SERVICES_PER_FILE = 1000
# Errors reported of one file; past this, one more error says how many were left out.
MAX_ERRORS_PER_FILE = 100


@dataclass(frozen=True)
class FileResult:
    """One file's verdict; `services` is None when the file has any error.

    `lines` and `columns` map each service name to where it is declared, so that later
    checks across files can point at it.
    """

    file: str
    services: dict[str, ServiceSpec] | None
    errors: tuple[ConfigError, ...] = ()
    lines: Mapping[str, int] = field(default_factory=dict, compare=False)
    columns: Mapping[str, int] = field(default_factory=dict, compare=False)
    # Every file read for it (a project's Compose files, .env, extended and included
    # files): an edit of any of them reloads it (healerd.daemon.confwatch).
    sources: tuple[str, ...] = field(default=(), compare=False)


_Positions = dict[str, tuple[int, int | None]]


def _valid_name(name: object, at: At) -> bool:
    if not isinstance(name, str):
        at.error(f"service names must be strings, not {describe(name)} (quote it)")
        return False
    if not SERVICE_NAME_RE.fullmatch(name):
        at.error(
            f"{name!r} is not a valid service name: 1 to 50 letters, digits, '_', '.' "
            "or '-', starting with a letter or digit"
        )
        return False
    return True


def _fixed_name(spec: ServiceSpec, body: LineDict, at: At, before: list[ServiceSpec]) -> None:
    """container_name names one container: one replica, and no other service's name;
    a fixed MAC address too."""
    if spec.mac_address and spec.replicas > 1:
        at.key(body, "mac_address").error(
            f"one MAC address, but replicas is {spec.replicas}: use one replica"
        )
    if spec.container_name is None:
        return
    name_at = at.key(body, "container_name")
    if spec.replicas > 1:
        name_at.error(
            f"names one container, but replicas is {spec.replicas}: two containers cannot "
            "have one name (drop container_name, or use one replica)"
        )
    other = next((s for s in before if s.container_name == spec.container_name), None)
    if other is not None:
        name_at.error(f"{spec.container_name!r} is also service {other.name!r}'s container_name")


def _services(
    services: LineDict, at: At, project: Project
) -> tuple[dict[str, ServiceSpec], _Positions]:
    specs: dict[str, ServiceSpec] = {}
    lines: _Positions = {}
    if len(services) > MAX_SERVICES_PER_FILE:
        at.error(
            f"declares {len(services)} services; a file may declare at most "
            f"{MAX_SERVICES_PER_FILE} (split it into several files)"
        )
        return specs, lines
    claimed = HostPorts()  # owners are indexes in `order`
    bodies: dict[str, tuple[LineDict, At]] = {}
    order: list[ServiceSpec] = []
    for name, body in services.items():
        name_at = at.key(services, name)
        if not _valid_name(name, name_at):
            continue
        spec = check_service(name, body, name_at)
        if spec is None:
            continue
        spec = resolve(spec, body, project, name_at)
        if not profile_active(spec.profiles, at.context.profiles):
            continue  # checked, but not run: no profile of it is active (Compose's rule)
        _fixed_name(spec, body, name_at, order)
        if (clash := claimed.clash(spec)) is not None:
            other, port = order[clash[0]], clash[1]
            name_at.key(body, "ports").error(
                f"{describe_port(port)} is also published by service {other.name!r} "
                "in this file: two containers cannot hold one fixed host port"
            )
        for port in spec.ports:
            claimed.claim(port, len(order))
        order.append(spec)
        specs[name] = spec
        lines[name] = (name_at.line or 1, name_at.column)
        bodies[name] = (body, name_at)
    # links and network_mode service:NAME imply dependencies (service_started).
    return check_dependencies(implied_dependencies(specs, bodies), bodies), lines


def _document(data: object, at: At) -> tuple[dict[str, ServiceSpec], _Positions]:
    if data is None:
        return {}, {}  # an empty file declares nothing, and that is fine
    if not isinstance(data, LineDict):
        line = data.line if isinstance(data, LineList) else 1
        column = data.column if isinstance(data, LineList) else 1
        at.child("", line, column).error(
            f"must be a mapping with a 'services' key, not {describe(data)}"
        )
        return {}, {}
    if format_one(data, at, TOP_LEVEL_KEYS):
        return {}, {}
    unknown_keys(data, at, TOP_LEVEL_KEYS)
    project = read_project(data, at)
    services = data.get("services")
    services_at = at.key(data, "services")
    if services is None:
        return {}, {}
    if not isinstance(services, LineDict):
        services_at.error(f"must map service names to services, not {describe(services)}")
        return {}, {}
    return _services(services, services_at, project)


def _result(
    data: object,
    errors: list[ConfigError],
    file: str,
    context: Context,
    env: Mapping[str, str],
    path: Path | None = None,
) -> FileResult:
    found = list(errors)
    context = with_profiles(context, env)
    env = with_project_name(env, [data], context.project_name or default_name(file))
    made = interpolate(data, env, At(found, file, "", None, None, context))
    if not isinstance(data, LineDict):
        return checked_result(data, found, made, file, context)
    # A single file's include and extends (of its own services, or another file's).
    reader = ProjectReader(context, found)
    at, here = At(found, file, "", None, None, context), path or Path(file)
    resolve_include(data, here, at, reader.included(env, 0))
    resolve_extends(data, here, at, lambda other: reader.extended(other, env, 0))
    strip_tags(data)
    made += (*reader.made, *resolve_unset(data, env, at))
    return checked_result(data, found, made, file, context, tuple(dict.fromkeys(reader.sources)))


def profile_active(profiles: Collection[str], active: Collection[str]) -> bool:
    """Compose's rule (compose-go HasProfile): a service without profiles runs, one with
    runs when an active profile is one of them, or when `*` (all) is active."""
    return not profiles or "*" in active or any(p in active for p in profiles)


def with_profiles(context: Context, env: Mapping[str, str]) -> Context:
    """COMPOSE_PROFILES of the variables: the profiles whose services run; and the
    variables' names, for the env_file check."""
    active = env.get("COMPOSE_PROFILES", "")
    return dataclasses.replace(
        context,
        profiles=frozenset(p.strip() for p in active.split(",") if p.strip()),
        variables=frozenset(env),
    )


def checked_result(
    data: object,
    found: list[ConfigError],
    made: tuple[Made, ...],
    file: str,
    context: Context,
    sources: tuple[str, ...] = (),
) -> FileResult:
    """The verdict on an interpolated document (one file's, or a project's merged files):
    `found` holds the errors so far, `made` the substitutions (masked in errors)."""
    specs, positions = _document(data, At(found, file, "", None, None, context))
    lines = {name: line for name, (line, _) in positions.items()}
    columns = {name: col for name, (_, col) in positions.items() if col is not None}
    # Its env_files too: the config watcher watches what a result read, so an edit of
    # one reloads now (a new digest, a rollout; or the fix of a broken one), not at the
    # next resync.
    env = (f for s in specs.values() for f in s.env_files)
    sources = tuple(dict.fromkeys((*sources, *env)))
    if found:
        masked = [_masked(e, made) for e in found]
        errors = _capped(sort_errors(masked), file)
        return FileResult(file, None, errors, lines, columns, sources)
    subs = tuple(dict.fromkeys(m.substitution for m in made if not m.number))
    if subs:
        specs = {name: dataclasses.replace(s, substitutions=subs) for name, s in specs.items()}
    return FileResult(file, specs, (), lines, columns, sources)


def _masked(error: ConfigError, made: tuple[Made, ...]) -> ConfigError:
    """`error` without the values that came from variables (they may be secrets): those
    put into its field, and every shown one (a shared mapping is interpolated under
    the first field that reaches it)."""
    subs = [m.substitution for m in made if m.substitution.shown or related(m.field, error.field)]
    reason = mask_error(error.reason, subs)
    return error if reason == error.reason else dataclasses.replace(error, reason=reason)


def _capped(errors: tuple[ConfigError, ...], file: str) -> tuple[ConfigError, ...]:
    if len(errors) <= MAX_ERRORS_PER_FILE:
        return errors
    left_out = len(errors) - MAX_ERRORS_PER_FILE
    reason = f"{left_out} more errors not shown (at most {MAX_ERRORS_PER_FILE} are listed)"
    return (*errors[:MAX_ERRORS_PER_FILE], ConfigError(file, None, "file", reason))


def parse_service_text(
    text: str,
    file: str,
    *,
    base_dir: Path | None = None,
    strict_modes: bool = False,
    env: Mapping[str, str] | None = None,
) -> FileResult:
    """Checks YAML text as if it were the file `file`; never raises.

    Relative env_file paths start at `base_dir`, by default the directory of `file`;
    `${VAR}` takes its values from `env` (default: none, as healerd's environment is not
    read).
    """
    data, errors = load_yaml(text, file)
    base = Path(file).parent if base_dir is None else base_dir
    return _result(data, errors, file, Context(base, strict_modes), env or {})


def load_service_file(
    path: Path,
    display_name: str | None = None,
    *,
    strict_modes: bool = False,
    environment: Collection[str] = (),
) -> FileResult:
    """Reads and checks one service file; read errors become ConfigErrors, never exceptions.

    The file is read through healerd.config.trust.read_trusted: a FIFO, a device or a
    file over MAX_FILE_SIZE is refused; with `strict_modes`, so is a file (or an env file
    it names) that others than root or healerd's user own or could write, or that sits
    in a directory they could write. A symbolic link is followed only when its whole
    target is trusted. `${VAR}`s take their values from the file's `.env` and from the
    variables of the environment named in `environment` (healerd.config.interpolate.project_env).
    """
    file = str(path) if display_name is None else display_name
    raw, errors = read_config_file(path, file, "file", strict=strict_modes, follow_symlink=True)
    if raw is None and not errors:
        errors = [ConfigError(file, None, "file", "cannot read: the file does not exist")]
    if errors or raw is None:
        return FileResult(file, None, tuple(errors))
    if not raw:
        # A file truncated to be rewritten (cp, `>` redirection) is empty for a moment:
        # that must not read as "remove its services". Delete the file for that.
        reason = (
            "empty (still being written?): its services keep their last good state; "
            "delete the file to remove them, or write `services: {}`"
        )
        return FileResult(file, None, (ConfigError(file, None, "file", reason),))
    data, errors = load_yaml_bytes(raw, file)
    project_dir = project_directory(path, data, errors, file, strict_modes=strict_modes)
    env, env_errors = project_env(
        path, project_dir, strict_modes=strict_modes, environment=environment
    )
    context = Context(project_dir, strict_modes)
    return _result(data, errors + env_errors, file, context, env, path)
