"""`extends`: a service built on another one, of the same file or of another file.

As the Compose specification says (05-services.md, "extends"): the service named by
`service` (in `file`, relative to the extending file's project directory, else in the
same file) is merged under the extending one by the merge rules
(healerd.config.merge); chains are followed; a cycle is refused. Only the service is
taken: the networks, volumes and services it names must be declared where it is used
(Compose imports none of them). docker-compose 1.29.2 refuses to extend a service that
has `links`, `volumes_from`, `depends_on` or `network_mode: service:`; the specification
(and Compose v2) merge those like any field, and so does healerd.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from healerd.config.errors import ConfigError, describe, missing_file
from healerd.config.interpolate import Made, interpolate
from healerd.config.keys import At, Context, named_at
from healerd.config.merge import merge_service
from healerd.config.relpaths import absolutize
from healerd.config.yamlload import LineDict, load_yaml_bytes, read_config_file

# Reads another file: interpolated, through the trust checks; reports its own errors
# and returns None on failure. Its extends are followed here, service by service.
Load = Callable[[Path], LineDict | None]
_Chain = tuple[tuple[str, str], ...]


@dataclasses.dataclass
class _Resolver:
    path: Path
    at: At
    load: Load
    docs: dict[str, tuple[LineDict, At] | None] = dataclasses.field(default_factory=dict)
    done: dict[tuple[str, str], Any] = dataclasses.field(default_factory=dict)

    def service(self, file: Path, services: LineDict, name: str, at: At, chain: _Chain) -> Any:
        """`services[name]` with its extends (if any) merged in; `at` is `services`'."""
        link = (str(file), name)
        if link in self.done:
            return self.done[link]
        body = services[name]
        if not isinstance(body, LineDict) or "extends" not in body:
            return body
        name_at = at.key(services, name)
        base = self._base(file, (services, at), body, name_at, (*chain, link))
        merged = merge_service(base, body, name_at) if base is not None else body
        self.done[link] = _without_extends(merged) if isinstance(merged, LineDict) else merged
        return self.done[link]

    def _base(
        self, file: Path, here: tuple[LineDict, At], body: LineDict, at: At, chain: _Chain
    ) -> Any:
        """The extended service, resolved; None (reported) when it cannot be found."""
        ext_at = at.key(body, "extends")
        target = _target(body["extends"], ext_at)
        if target is None:
            return None
        ref, other = target
        where = file if other is None else self._relative(file, other)
        others, others_at = here
        if not _same(where, file):
            ext = body["extends"]
            with named_at(ext_at.key(ext, "file") if isinstance(ext, LineDict) else ext_at):
                found = self._document(where, ext_at)
            if found is None:
                return None
            others, others_at = found
        else:
            where = file
        if ref not in others:
            in_file = "this file" if where == file else str(where)
            ext_at.here("service").error(f"no service {ref!r} in {in_file} to extend")
            return None
        if (str(where), ref) in chain:
            ext_at.error(f"is a cycle: {_cycle(chain, (str(where), ref), str(self.path))}")
            return None
        return self.service(where, others, ref, others_at, chain)

    def _relative(self, file: Path, other: str) -> Path:
        """`file:` from the project directory (the main file's) or the file's own."""
        start = (self.at.context.base_dir or self.path.parent) if file == self.path else file.parent
        return Path(posixpath.normpath(start / posixpath.expanduser(other)))

    def _document(self, where: Path, at: At) -> tuple[LineDict, At] | None:
        key = os.path.abspath(where)
        if key not in self.docs:
            self.docs[key] = self._read(where, at)
        return self.docs[key]

    def _read(self, where: Path, at: At) -> tuple[LineDict, At] | None:
        data = self.load(where)
        if data is None:
            return None
        services = data.get("services") if isinstance(data, LineDict) else None
        if not isinstance(services, LineDict):
            at.here("file").error(f"{where} declares no services to extend")
            return None
        project = self.at.context.base_dir or self.path.parent
        if where.parent != project:
            absolutize(data, where.parent)
        file_at = dataclasses.replace(self.at, file=data.file or str(where))
        return services, file_at.key(data, "services")


def _same(one: Path, other: Path) -> bool:
    return os.path.abspath(one) == os.path.abspath(other)


def _target(ext: Any, at: At) -> tuple[str, str | None] | None:
    """(service, file or None) of an extends value: a name, or {service, file}."""
    if isinstance(ext, str) and ext:
        return ext, None
    if not isinstance(ext, LineDict):
        at.error(f"must be a mapping with service (and file), not {describe(ext)}")
        return None
    for key in ext:
        if key not in ("service", "file"):
            at.key(ext, key).error("unknown key: extends takes service and file")
    service, file = ext.get("service"), ext.get("file")
    if not isinstance(service, str) or not service:
        where = at.key(ext, "service") if "service" in ext else at.here("service")
        where.error("is required: the name of the service to extend")
        return None
    if file is not None and (not isinstance(file, str) or not file):
        at.key(ext, "file").error(f"must be a path, not {describe(file)}")
        return None
    return service, file


def _cycle(chain: _Chain, back: tuple[str, str], main: str) -> str:
    start = chain.index(back)
    steps = [*chain[start:], back]
    return " -> ".join(name if file == main else f"{file}:{name}" for file, name in steps)


def _without_extends(body: LineDict) -> LineDict:
    body.pop("extends", None)
    body.tags.pop("extends", None)
    return body


def resolve_extends(data: Any, path: Path, at: At, load: Load) -> None:
    """Replaces, in place, each service of `data` (the file `path`, read and
    interpolated) that has `extends` by the merged service, without `extends`; errors
    go to `at` (the document's), each at the file and line at fault."""
    services = data.get("services") if isinstance(data, LineDict) else None
    if not isinstance(services, LineDict):
        return
    resolver = _Resolver(path, at, load)
    services_at = at.key(data, "services")
    resolver.docs[os.path.abspath(path)] = (services, services_at)  # extended from elsewhere
    for name in list(services):
        body = services[name]
        if isinstance(body, LineDict) and "extends" in body:
            resolved = resolver.service(path, services, name, services_at, ())
            services[name] = _without_extends(resolved) if resolved is body else resolved


def file_reader(
    errors: list[ConfigError], context: Context, env: Mapping[str, str], made: list[Made]
) -> Load:
    """The `load` of a single service file's extends: the other file read through the
    trust checks (as the service file is), interpolated with the same variables."""

    def load(path: Path) -> LineDict | None:
        file = str(path)
        raw, found = read_config_file(
            path, file, "file", strict=context.strict_modes, follow_symlink=True
        )
        if raw is None and not found:
            found = [missing_file(file)]
        data, more = (None, []) if raw is None else load_yaml_bytes(raw, file)
        errors.extend(found + more)
        if found or more or not isinstance(data, LineDict):
            return None
        made.extend(interpolate(data, env, At(errors, file, "", None, None, context)))
        return data

    return load
