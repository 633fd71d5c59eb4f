"""A service file is a Compose project (issue 16): its name, its networks and volumes.

- The project name is the top-level `name:`, else the file's name without `.yaml`,
  lowered to what Compose allows (a-z, 0-9, `_`, `-`).
- Every service that names no network (and has no network_mode) joins
  `<project>_default`, as in Compose; a network declared under top-level `networks:` is
  `<project>_<key>` (or its `name:`; `external: true` means it exists and is never
  created). Every replica joins each of its networks with the service name as an alias
  (and the `aliases` it declares): services reach each other by name.
- A named volume declared under top-level `volumes:` is `<project>_<key>` (or its
  `name:`, or external). healerd creates declared networks and volumes when missing,
  before the containers, and never removes a volume.
- A network or volume a service names that the file does not declare is used by that
  exact name, as healerd did before it read Compose projects (Compose would refuse it).

`version:` is accepted and ignored, as Compose does.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath

from healerd.config import legacy, netopts, secrets, snapshotkeys
from healerd.config.errors import describe
from healerd.config.keys import At, top_section
from healerd.config.pairs import labels
from healerd.config.values import boolean
from healerd.config.yamlload import LineDict, LineList
from healerd.model import NetworkDecl, NetworkEndpoint, ServiceSpec, VolumeDecl, VolumeSpec

PROJECT_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
TOP_LEVEL_KEYS = ("services", "name", "version", "networks", "volumes", "secrets", "configs")
_NETWORK_KEYS = (
    "name", "external", "driver", "internal", "attachable", "labels", "driver_opts", "ipam",
    "enable_ipv6",
)  # fmt: skip
_VOLUME_KEYS = ("name", "external", "driver", "labels", "driver_opts")
_NO_ALIAS_NETWORKS = ("bridge", "host", "none")


@dataclass(frozen=True)
class Declared:
    """What one declared network or volume is on the engine."""

    name: str
    external: bool
    network: NetworkDecl | None = None
    volume: VolumeDecl | None = None


@dataclass(frozen=True)
class Project:
    name: str
    networks: Mapping[str, Declared]
    volumes: Mapping[str, Declared]
    # Top-level secrets and configs: name -> the host file (healerd.config.secrets).
    secrets: Mapping[str, str] = dataclasses.field(default_factory=dict)
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)


def default_name(file: str) -> str:
    """Compose's normalisation of a directory name, applied to the file's stem."""
    return normalised_name(PurePath(file).name.rsplit(".", 1)[0])


def normalised_name(text: str) -> str:
    """Compose's normalisation of a project name: lower case, only a-z, 0-9, `_`, `-`."""
    cleaned = re.sub(r"[^a-z0-9_-]", "", text.lower()).lstrip("_-")
    return cleaned or "default"


def _name(data: LineDict, at: At) -> str:
    value = data.get("name")
    fallback = at.context.project_name or default_name(at.file)
    if value is None:
        return fallback
    if not isinstance(value, str) or not PROJECT_NAME_RE.fullmatch(value):
        at.key(data, "name").error(
            f"{value!r} is not a project name: lower-case letters, digits, '_' and '-', "
            "starting with a letter or digit"
        )
        return fallback
    return value


def _options(body: LineDict, known: tuple[str, ...], at: At) -> None:
    for key in body:
        if key not in known:
            at.key(body, key).error(f"{key!r} is not supported yet (supported: {', '.join(known)})")


def _declared(key: str, body: object, project: str, at: At, *, network: bool) -> Declared:
    engine_name = f"{project}_{key}"
    if body is None:
        body = LineDict()
    if not isinstance(body, LineDict):
        at.error(f"must be a mapping (or empty), not {describe(body)}")
        return Declared(engine_name, False)
    _options(body, _NETWORK_KEYS if network else _VOLUME_KEYS, at)
    external, legacy_name = legacy.external(body, at) if "external" in body else (False, None)
    given = body.get("name")
    if given is not None and not (isinstance(given, str) and given):
        at.key(body, "name").error(f"must be a name, not {describe(given)}")
        given = None
    name = given or legacy_name or (key if external else engine_name)
    pairs = {
        field: labels(body[field], at.key(body, field)) if body.get(field) is not None else ()
        for field in ("labels", "driver_opts")
    }
    driver = body.get("driver")
    if driver is not None and not isinstance(driver, str):
        at.key(body, "driver").error(f"must be a string, not {describe(driver)}")
        driver = None
    if external:
        return Declared(name, True)
    if network:
        flags = {
            f: boolean(body[f], at.key(body, f)) if f in body else False
            for f in ("internal", "attachable")
        }
        decl = NetworkDecl(
            name, project, key, driver or "bridge", flags["internal"], flags["attachable"],
            pairs["labels"], pairs["driver_opts"],
        )  # fmt: skip
        return Declared(name, False, network=netopts.network_options(decl, body, at))
    vol = VolumeDecl(name, project, key, driver or "local", pairs["labels"], pairs["driver_opts"])
    return Declared(name, False, volume=vol)


def _section(data: LineDict, key: str, project: str, at: At) -> dict[str, Declared]:
    found = top_section(data, key, at)
    if found is None:
        return {}
    section, section_at = found
    return {
        str(k): _declared(str(k), v, project, section_at.key(section, k), network=key == "networks")
        for k, v in section.items()
    }


def read_project(data: LineDict, at: At) -> Project:
    """The project a file's top level declares (its errors reported through `at`)."""
    name = _name(data, at)
    networks = _section(data, "networks", name, at)
    networks.setdefault(
        "default",
        Declared(f"{name}_default", False, network=NetworkDecl(f"{name}_default", name, "default")),
    )
    return Project(
        name,
        networks,
        _section(data, "volumes", name, at),
        secrets.read_sources(data, "secrets", at),
        secrets.read_sources(data, "configs", at),
    )


def built_image_name(project: str, service: str) -> str:
    """The tag of a service that builds and names no image, as `docker compose` (v2)
    tags it; docker-compose 1.x used `<project>_<service>`. Lower case: the engine
    refuses capitals in a repository name."""
    return f"{project}-{service}".lower()


def _aliases(body: LineDict, key: str, at: At) -> tuple[str, ...]:
    nets = body.get("networks")
    if not isinstance(nets, LineDict) or not isinstance(nets.get(key), LineDict):
        return ()
    raw = nets[key].get("aliases")
    if raw is None:
        return ()
    alias_at = at.key(body, "networks").key(nets, key).key(nets[key], "aliases")
    if not isinstance(raw, LineList) or not all(isinstance(a, str) and a for a in raw):
        alias_at.error(f"must be a list of names, not {describe(raw)}")
        return ()
    return tuple(raw)


def resolve(spec: ServiceSpec, body: LineDict, project: Project, at: At) -> ServiceSpec:
    """`spec` with the engine's names of its networks and volumes, and what to create."""
    keys = spec.networks
    if not keys and spec.network_mode is None:
        keys = ("default",)
    nets: list[str] = []
    aliases: list[tuple[str, tuple[str, ...]]] = []
    create_nets: list[NetworkDecl] = []
    endpoints: list[NetworkEndpoint] = []
    priority: dict[str, int] = {}
    for key in keys:
        declared = project.networks.get(key)
        name = declared.name if declared is not None else key
        nets.append(name)
        decl = declared.network if declared is not None else None
        endpoint, priority[name] = netopts.service_endpoint(body, key, name, decl, at)
        endpoints += [endpoint] if endpoint is not None else []
        extra = _aliases(body, key, at)
        if extra and name not in _NO_ALIAS_NETWORKS:
            aliases.append((name, extra))
        if declared is not None and declared.network is not None:
            create_nets.append(declared.network)
    spec = snapshotkeys.snapshot(spec, body, project.volumes, at)  # before the names change
    vols: list[VolumeSpec] = []
    create_vols: list[VolumeDecl] = []
    for v in spec.volumes:
        declared = (
            project.volumes.get(v.source) if v.source and not v.source.startswith("/") else None
        )
        if declared is None:
            vols.append(v)
            continue
        vols.append(dataclasses.replace(v, source=declared.name))
        if declared.volume is not None:
            create_vols.append(declared.volume)
    resolved = dataclasses.replace(
        spec,
        image=spec.image or built_image_name(project.name, spec.name),
        # Joined by decreasing priority (the first is the one created on), then by name.
        networks=tuple(sorted(set(nets), key=lambda n: (-priority.get(n, 0), n))),
        network_aliases=tuple(sorted(aliases)),
        network_endpoints=tuple(sorted(endpoints, key=lambda e: e.network)),
        volumes=tuple(vols),
        project=project.name,
        networks_to_create=tuple(create_nets),
        volumes_to_create=tuple(create_vols),
    )
    return secrets.resolve(resolved, body, (project.secrets, project.configs), at)
