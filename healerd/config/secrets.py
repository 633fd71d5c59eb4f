"""Compose's secrets and configs (issue 16), file-based, mounted as `docker compose`
mounts them on one engine: a read-only bind of the host file, a secret at
`/run/secrets/<target or name>`, a config at `/<target or name>` (an absolute target as
written).

- The top-level `secrets:` / `configs:` name host files (`file:`, relative to the
  project directory: the service file's directory). `external: true` is an error: such
  secrets live in a Swarm, and there is none (Compose warns and mounts nothing, so the
  service would run without them). `environment:` and `content:` sources are not
  supported yet (healerd mounts files; write the value to a file).
- A service names them in short (`- name`) or long syntax (`source`, `target`, `uid`,
  `gid`, `mode`). A bind mount keeps the file's own owner and mode: `uid`, `gid` and
  `mode` cannot be honoured, and are warned about as Compose warns, once per service.
- A digest of the mounted files' contents is part of the spec hash (as env files' are):
  editing a secret rolls the service's containers, at the next reload or resync (a bind
  of a file replaced by rename would otherwise keep showing the old file).
- Each file is read through the trusted walk (healerd.config.trust) at load and again
  when a container is created (mounts_for_create): what it holds then must still have
  the digest taken at load, and the engine is given the path it was read at, without
  links, so that dockerd, which resolves a bind source itself, cannot be led elsewhere
  by a link someone re-pointed in between (issue 29).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import posixpath
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from healerd.config.errors import describe
from healerd.config.keys import At, top_section
from healerd.config.trust import FileRefused, read_trusted_resolved
from healerd.config.yamlload import LineDict, LineList
from healerd.model import SecretMount, ServiceSpec

log = logging.getLogger("healerd.config")
SECRETS_DIR = "/run/secrets"
MAX_SECRET_SIZE = 2**20  # the most healerd reads of one secret or config file (its digest)
_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
_SWARM_ONLY = ("labels", "driver", "driver_opts", "template_driver")
_WARNED: set[tuple[str, str, str]] = set()  # (file, field, name): warned once, not per reload
# The strict_modes each file was checked under at load, to check it the same way when a
# container is created (as for env files); a file no service file named: strictly.
_LOADED_STRICT: dict[str, bool] = {}


def _kind(key: str) -> str:
    return "secret" if key == "secrets" else "config"


def _source(name: str, body: object, key: str, at: At) -> str | None:
    """The absolute host file one top-level secret or config names."""
    kind = _kind(key)
    if not isinstance(body, LineDict):
        at.error(f"must be a mapping with file, not {describe(body)}")
        return None
    for option in body:
        option_at = at.key(body, option)
        if option == "external":
            option_at.error(
                f"external {kind}s live in a Swarm, and healerd runs containers on one "
                f"engine (docker compose mounts nothing for them): declare the {kind} with file:"
            )
        elif option in ("environment", "content"):
            option_at.error(
                "is not supported yet: healerd mounts a host file; write the value to a file "
                "and name it in file:"
            )
        elif option in _SWARM_ONLY:
            option_at.error(f"is a Swarm setting of the {kind} object: no engine takes it")
        elif option not in ("file", "name"):
            option_at.error(f"unknown key {option!r}: a {kind} takes file (and name)")
    file = body.get("file")
    if "file" not in body:
        if not any(k in body for k in ("external", "environment", "content")):
            at.here("file").error("is required")
        return None
    if not isinstance(file, str) or not file:
        at.key(body, "file").error(f"must be a path, not {describe(file)}")
        return None
    base = at.context.base_dir
    path = Path(posixpath.expanduser(file))
    if base is not None and not path.is_absolute():
        path = base / path
    return posixpath.normpath(path.absolute())


def read_sources(data: LineDict, key: str, at: At) -> dict[str, str]:
    """The top-level `secrets` or `configs` (`key`): name -> absolute host file."""
    found = top_section(data, key, at)
    if found is None:
        return {}
    section, section_at = found
    out: dict[str, str] = {}
    for name, body in section.items():
        name_at = section_at.key(section, name)
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            name_at.error(f"{name!r} is not a valid {_kind(key)} name")
            continue
        path = _source(name, body, key, name_at)
        if path is not None:
            out[name] = path
    return out


def _target(name: str, target: object, key: str, at: At) -> str | None:
    if target is None:
        target = name
    if not isinstance(target, str) or not target or ":" in target:
        at.error(f"must be a path in the container, not {describe(target)}")
        return None
    if not target.startswith("/"):
        target = posixpath.join(SECRETS_DIR if key == "secrets" else "/", target)
    target = posixpath.normpath(target)
    if target == "/":
        at.error("cannot mount over /")
        return None
    return target


def _warn(body: LineDict, at: At, name: str, key: str) -> None:
    """uid, gid and mode: checked, then warned about as Compose warns (a bind mount keeps
    the host file's owner and mode)."""
    given = [k for k in ("uid", "gid", "mode") if k in body]
    for k in given:
        value = body[k]
        ok = isinstance(value, str) and value.isdigit()
        ok = ok or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
        if not ok:
            at.key(body, k).error(f"must be a number, not {describe(value)}")
    marker = (at.file, at.field, name)
    if given and marker not in _WARNED:
        _WARNED.add(marker)
        log.warning(
            "%s:%s: %s: %s %r with %s: not honoured (a %s is a bind mount of the host file, "
            "which keeps the file's own owner and mode; docker compose ignores them too)",
            at.file, at.line, at.field, _kind(key), name, ", ".join(given), _kind(key),
        )  # fmt: skip


def _ref(item: object, at: At, key: str) -> SecretMount | None:
    if isinstance(item, str):
        if not _NAME_RE.fullmatch(item):
            at.error(f"{item!r} is not a {_kind(key)} name")
            return None
        target = _target(item, None, key, at)
        return SecretMount(item, "", target) if target else None
    if not isinstance(item, LineDict):
        at.error(f"must be a name or a mapping with source, not {describe(item)}")
        return None
    for option in item:
        if option not in ("source", "target", "uid", "gid", "mode"):
            at.key(item, option).error(
                f"unknown key {option!r}: takes source, target, uid, gid and mode"
            )
    source = item.get("source")
    if not isinstance(source, str) or not _NAME_RE.fullmatch(source):
        where = at.key(item, "source") if "source" in item else at.here("source")
        where.error(f"must name a {_kind(key)}, not {describe(source)}")
        return None
    _warn(item, at, source, key)
    target = _target(source, item.get("target"), key, at.key(item, "target"))
    return SecretMount(source, "", target) if target else None


def service_refs(value: object, at: At, key: str) -> tuple[SecretMount, ...]:
    """A service's `secrets` or `configs` (short or long syntax); the host files are
    filled in by `resolve` from the top level."""
    if not isinstance(value, LineList):
        at.error(f"must be a list of {_kind(key)} names or mappings, not {describe(value)}")
        return ()
    out: list[SecretMount] = []
    for index, item in enumerate(value):
        item_at = at.item(value, index)
        mount = _ref(item, item_at, key)
        if mount is not None and any(m.target == mount.target for m in out):
            item_at.error(f"target {mount.target!r} is mounted twice")
        elif mount is not None:
            out.append(mount)
    return tuple(out)


def secrets(value: object, at: At) -> tuple[SecretMount, ...]:
    return service_refs(value, at, "secrets")


def configs(value: object, at: At) -> tuple[SecretMount, ...]:
    return service_refs(value, at, "configs")


class MountRefused(ValueError):
    """A secret's or config's file cannot be mounted now; the message names it and why,
    never what it holds."""


def _read(m: SecretMount, strict: bool) -> tuple[bytes, Path]:
    """The file's contents and the path they were read at (no links: see
    read_trusted_resolved). Raises MountRefused."""
    try:
        return read_trusted_resolved(Path(m.source), "file", strict=strict, limit=MAX_SECRET_SIZE)
    except FileRefused as exc:
        raise MountRefused(f"{m.name!r}: {exc}") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise MountRefused(f"{m.name!r}: cannot read {m.source}: {reason}") from None


def _hashed(mounts: tuple[SecretMount, ...], read: Callable[[SecretMount], bytes | None]) -> str:
    """sha256 (hex) of what `read` gives for each mount, by target; "" for none."""
    if not mounts:
        return ""
    h = hashlib.sha256()
    for m in sorted(mounts, key=lambda m: m.target):
        raw = read(m)
        if raw is None:
            continue
        h.update(f"{m.target}\0{len(raw)}\0".encode())
        h.update(raw)
    return h.hexdigest()


def _digest(mounts: tuple[SecretMount, ...], at: At) -> str:
    """sha256 of what the mounted files hold (each read as env files are: trusted, regular,
    at most 1 MiB); "" when there is none. A problem is reported at `at`."""

    def read(m: SecretMount) -> bytes | None:
        _LOADED_STRICT[m.source] = at.context.strict_modes
        try:
            return _read(m, at.context.strict_modes)[0]
        except MountRefused as exc:
            at.error(str(exc))
            return None

    return _hashed(mounts, read)


def _total(secrets_digest: str, configs_digest: str) -> str:
    digest = secrets_digest + configs_digest
    return hashlib.sha256(digest.encode()).hexdigest()[:32] if digest else ""


def mounts_for_create(spec: ServiceSpec) -> ServiceSpec:
    """`spec` as the engine gets it when a container is created: every secret's and
    config's file read and checked again (under the strict_modes it was loaded with),
    what it holds still what was checked at load (`secrets_digest`), and its source the
    path it was read at, with no link left for the engine to follow again (issue 29).
    Raises MountRefused."""
    resolved: dict[str, str] = {}

    def read(m: SecretMount) -> bytes:
        raw, path = _read(m, _LOADED_STRICT.get(m.source, True))
        resolved[m.source] = str(path)
        return raw

    if _total(_hashed(spec.secrets, read), _hashed(spec.configs, read)) != spec.secrets_digest:
        raise MountRefused(
            "the files of its secrets or configs changed since the service file was last "
            "loaded and checked; no container mounts files that were not checked: they "
            "apply at the next reload (healerctl reload, or the resync)"
        )

    def moved(mounts: tuple[SecretMount, ...]) -> tuple[SecretMount, ...]:
        return tuple(dataclasses.replace(m, source=resolved[m.source]) for m in mounts)

    return dataclasses.replace(spec, secrets=moved(spec.secrets), configs=moved(spec.configs))


def _filled(
    mounts: tuple[SecretMount, ...], declared: Mapping[str, str], key: str, at: At
) -> tuple[SecretMount, ...]:
    out = []
    for m in mounts:
        source = declared.get(m.name)
        if source is None:
            at.error(
                f"uses {_kind(key)} {m.name!r}, which the file's top-level {key} does not "
                "declare (with file:)"
            )
            continue
        out.append(dataclasses.replace(m, source=source))
    return tuple(out)


def resolve(
    spec: ServiceSpec,
    body: LineDict,
    declared: tuple[Mapping[str, str], Mapping[str, str]],
    at: At,
) -> ServiceSpec:
    """`spec` with its secrets' and configs' host files and their digest."""
    if not spec.secrets and not spec.configs:
        return spec
    secret_at, config_at = at.key(body, "secrets"), at.key(body, "configs")
    found = _filled(spec.secrets, declared[0], "secrets", secret_at)
    found_configs = _filled(spec.configs, declared[1], "configs", config_at)
    targets = {m.target for m in found}
    for m in found_configs:
        if m.target in targets:
            config_at.error(f"target {m.target!r} is also a secret's")
    for v in spec.volumes:
        if v.target in targets | {m.target for m in found_configs}:
            at.key(body, "volumes").error(f"target {v.target!r} is also a secret's or config's")
    digest = _total(_digest(found, secret_at), _digest(found_configs, config_at))
    return dataclasses.replace(spec, secrets=found, configs=found_configs, secrets_digest=digest)
