"""The table of service keys: one row per key a service may hold.

The checker (healerd.config.service) reads each key's check and default from here, and
healerd.config.schema turns the same rows into the JSON Schema shipped in config/ and
into docs/reference/config.md, so that the three cannot disagree about fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from healerd.config.build import build
from healerd.config.composeopts import COMPOSE_FIELDS
from healerd.config.envfile import MAX_ENV_FILES
from healerd.config.envfilekey import env_files
from healerd.config.extension import EXTENSION_FIELDS, x_healerd
from healerd.config.healthcheck import HEALTHCHECK_FIELDS, healthcheck
from healerd.config.hooks import HOOK_SERVICE_FIELDS
from healerd.config.hostopts import HOST_FIELDS
from healerd.config.imageref import IMAGE_REFERENCE_PATTERN
from healerd.config.keys import MAX_ENTRIES, Key
from healerd.config.pairs import RESERVED_LABEL_PREFIX, environment, labels, pairs_schema
from healerd.config.ports import LONG_PORT_SCHEMA, PORT_FORMAT, PORT_TEXT, ports
from healerd.config.rollout import (
    RESTART_POLICY_FIELDS,
    UPDATE_CONFIG_FIELDS,
    restart_policy,
    update_config,
)
from healerd.config.units import DURATION_SCHEMA, DURATION_TEXT, NUMBER_RE, SIZE_PATTERN
from healerd.config.values import (
    MAX_CPUS,
    MAX_REPLICAS,
    MAX_STOP_GRACE_PERIOD,
    MIN_CPUS,
    MIN_MEM_LIMIT,
    NETWORK_NAME_RE,
    PRIORITY_RANGE,
    PULL_POLICIES,
    argv,
    cpus,
    image,
    mem_limit,
    networks,
    priority,
    pull_policy,
    replicas,
    stop_grace_period,
    unhealthy_grace,
    user,
    working_dir,
)
from healerd.config.volumes import MOUNT_SCHEMA, VOLUME_TEXT, volumes
from healerd.model import PullPolicy, RestartPolicy, UpdateConfig
from healerd.vocabulary import AutoUpdate

_ARGV_SCHEMA: Mapping[str, Any] = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "maxItems": MAX_ENTRIES},
    ]
}
_NETWORK_NAME = {"type": "string", "pattern": f"^{NETWORK_NAME_RE.pattern}$"}

SERVICE_FIELDS: tuple[Key, ...] = (
    Key(
        "image",
        "image reference",
        "The image to run, as Docker names it: [registry/]path[:tag][@sha256:digest].",
        "busybox:1.36",
        schema={"type": "string", "pattern": IMAGE_REFERENCE_PATTERN},
        check=image,
        default="",
        compose="image",
        required=True,
    ),
    Key(
        "replicas",
        f"integer 0 to {MAX_REPLICAS}",
        "How many identical containers to keep running; 0 stops them all.",
        "3",
        schema={"type": "integer", "minimum": 0, "maximum": MAX_REPLICAS},
        check=replicas,
        default=1,
        compose="deploy.replicas",
    ),
    Key(
        "command",
        "list of strings, or string",
        "Arguments to the entrypoint; a string is split into words as a shell would (without "
        "expanding variables). Absent: the image's CMD.",
        '["httpd", "-f", "-p", "8080"]',
        schema=_ARGV_SCHEMA,
        check=argv,
        compose="command",
    ),
    Key(
        "entrypoint",
        "list of strings, or string",
        "The program to run, in the same forms as command. Absent: the image's ENTRYPOINT.",
        '["/bin/sh", "-c"]',
        schema=_ARGV_SCHEMA,
        check=argv,
        compose="entrypoint",
    ),
    Key(
        "environment",
        "mapping, or list of KEY=value",
        "Environment variables. Names are letters, digits, '_', '.' or '-', not starting "
        "with a digit; values are strings or numbers (quote true/false); null or KEY= gives "
        "an empty value. Overrides env_file. No error shows a value.",
        "{TZ: UTC, LOG_LEVEL: info}",
        schema=pairs_schema(labels=False),
        check=environment,
        default=(),
        compose="environment",
    ),
    Key(
        "env_file",
        f"path, or list of at most {MAX_ENV_FILES} paths or {{path, required}} mappings",
        "Files of KEY=VALUE lines (at most 1 MiB each), relative to the service file's "
        "directory, read when containers are created and never logged (see Secrets in "
        "docs/user-guide.md). Later files override earlier ones. A KEY alone is left out "
        "(docker compose gives it the project's variable; healerd reads env files "
        "without them). Long syntax: `path`, `required` (default true; false skips a "
        "file missing at load); `format` is refused. Each file is checked like a "
        "service file, at load and at every read: a symbolic link, a FIFO or a device is "
        "refused.",
        "[web.env, {path: local.env, required: false}]",
        schema={
            "anyOf": [
                {"type": "string", "minLength": 1},
                {
                    "type": "array",
                    "items": {
                        "anyOf": [
                            {"type": "string", "minLength": 1},
                            {
                                "type": "object",
                                "properties": {
                                    "path": {"type": "string", "minLength": 1},
                                    "required": {"type": "boolean", "default": True},
                                },
                                "required": ["path"],
                                "additionalProperties": False,
                            },
                        ]
                    },
                    "uniqueItems": True,
                    "maxItems": MAX_ENV_FILES,
                },
            ]
        },
        check=env_files,
        default=(),
        compose="env_file",
        attr="env_files",
    ),
    Key(
        "labels",
        "mapping, or list of key=value",
        f"Container labels; keys starting with {RESERVED_LABEL_PREFIX} are reserved.",
        "{team: platform}",
        schema=pairs_schema(labels=True),
        check=labels,
        default=(),
        compose="labels",
    ),
    Key(
        "user",
        "string or integer",
        "User (and group) to run as: name, uid or uid:gid. Absent: the image's USER.",
        '"1000:1000"',
        schema={
            "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^\S+$"}]
        },
        check=user,
        compose="user",
    ),
    Key(
        "working_dir",
        "absolute path",
        "The working directory inside the container. Absent: the image's WORKDIR.",
        "/app",
        schema={"type": "string", "pattern": "^/"},
        check=working_dir,
        compose="working_dir",
    ),
    Key(
        "volumes",
        "list of SOURCE:TARGET[:MODE], or of mounts",
        "Mounts. Short syntax: SOURCE is a host path (absolute, or ./ ../ .x ~ relative to the "
        "file's directory, as Compose takes it) or a volume name (the project's "
        "`<project>_<name>` when declared at the top level), TARGET an absolute path in "
        "the container, MODE a comma list: ro|rw, z|Z (SELinux), a propagation (shared, "
        "rshared, slave, rslave, private, rprivate; host paths), nocopy (volumes), "
        "cached|delegated|consistent (no effect on Linux); a bare /path is an anonymous "
        "volume. Long syntax, a mapping: `type` bind|volume|tmpfs, `source` (a bind's host "
        "path, a volume's name; none: an anonymous volume), `target`, `read_only`, "
        "`consistency`, `bind: {propagation, create_host_path, selinux, recursive}` "
        "(create_host_path defaults to true: a missing host path is made, as the short "
        "syntax does; recursive: enabled (default), disabled, or with read_only: true "
        "writable or readonly, which need Docker 25 (API 1.44): refused at create time, "
        "as the service's error, on an older engine), `volume: {nocopy}`, "
        "`tmpfs: {size, mode}`. Refused, with why: type npipe, cluster and image, "
        "volume.subpath (newer engine API than healerd takes yet).",
        '["data:/var/lib/app", "/srv/conf:/etc/app:ro,z", '
        "{type: tmpfs, target: /cache, tmpfs: {size: 64m}}]",
        schema={
            "type": "array",
            "items": {"anyOf": [{"type": "string", "pattern": VOLUME_TEXT}, MOUNT_SCHEMA]},
            "maxItems": MAX_ENTRIES,
        },
        check=volumes,
        default=(),
        compose="volumes",
    ),
    Key(
        "ports",
        f"list of {PORT_FORMAT}, or of mappings",
        "Published ports. Without HOST the engine picks a free host port for each replica; "
        "a fixed HOST port allows only one replica and stop-first rollouts. Long syntax, a "
        "mapping: `target`, `published` (a number or its text; ranges are refused, as in "
        "the short syntax), `host_ip`, `protocol` tcp|udp, `mode` host|ingress (the same "
        "on one engine, as in Compose), `name` and `app_protocol` (information only).",
        '["8080", "127.0.0.1:8081:80", "9000:9000/udp", '
        "{target: 80, published: 8082, host_ip: 127.0.0.1}]",
        schema={
            "type": "array",
            "items": {
                "anyOf": [
                    {"type": "integer", "minimum": 1, "maximum": 65535},
                    {"type": "string", "pattern": PORT_TEXT},
                    LONG_PORT_SCHEMA,
                ]
            },
            "maxItems": MAX_ENTRIES,
        },
        check=ports,
        default=(),
        compose="ports",
    ),
    Key(
        "networks",
        "list of names, or mapping of names to null or {aliases, ipv4_address, ...}",
        "Networks the containers join, with the service name (and `aliases`) as aliases: one "
        "declared under the file's top-level networks is the project's (`<project>_<key>`, "
        "made by healerd), another name an existing network. Absent: `<project>_default`. "
        "Per network: `ipv4_address`/`ipv6_address` (one replica only; within a declared "
        "subnet), `link_local_ips`, `priority` (joined by decreasing priority).",
        "[backend]",
        schema={
            "anyOf": [
                {
                    "type": "array",
                    "items": _NETWORK_NAME,
                    "uniqueItems": True,
                    "maxItems": MAX_ENTRIES,
                },
                {
                    "type": "object",
                    "propertyNames": _NETWORK_NAME,
                    "additionalProperties": {
                        "type": ["object", "null"],
                        "properties": {
                            "aliases": {"type": "array", "items": {"type": "string"}},
                            "ipv4_address": {"type": "string"},
                            "ipv6_address": {"type": "string"},
                            "link_local_ips": {"type": "array", "items": {"type": "string"}},
                            "priority": {"type": "integer"},
                        },
                        "additionalProperties": False,
                    },
                    "maxProperties": MAX_ENTRIES,
                },
            ]
        },
        check=networks,
        default=(),
        compose="networks",
    ),
    Key(
        "mem_limit",
        "size >= 6m",
        "Memory limit: bytes, or a number with k, m or g (binary units) and an optional b. "
        "At least 6m (Docker's minimum), less than 2^63 bytes.",
        "256m",
        schema={
            "anyOf": [
                {"type": "integer", "minimum": MIN_MEM_LIMIT, "maximum": 2**63 - 1},
                {
                    "type": "string",
                    "pattern": f"^{SIZE_PATTERN}$",
                    # What parses to 0 bytes: 0, 0Mi, 0.5 (no unit), ...
                    "not": {
                        "pattern": "^(?:0*(?:\\.[0-9]+)?[bB]?|0*(?:\\.0+)?[kmgKMG][iI]?[bB]?)$"
                    },
                },
            ]
        },
        check=mem_limit,
        compose="mem_limit",
    ),
    Key(
        "cpus",
        f"number {MIN_CPUS:g} to {MAX_CPUS:g}",
        f"CPU limit, in CPUs (Docker refuses less than {MIN_CPUS:g}).",
        "0.5",
        schema={
            "anyOf": [
                {"type": "number", "minimum": MIN_CPUS, "maximum": MAX_CPUS},
                {
                    "type": "string",
                    "pattern": f"^(?:{NUMBER_RE.pattern})$",
                    "not": {"pattern": r"^0*\.?0*$"},
                },
            ]
        },
        check=cpus,
        compose="cpus",
    ),
    Key(
        "stop_grace_period",
        f"duration <= {MAX_STOP_GRACE_PERIOD:.0f}s",
        "How long the engine waits after SIGTERM before it kills a container.",
        "30s",
        schema={
            "anyOf": [
                {"type": "number", "minimum": 0, "maximum": MAX_STOP_GRACE_PERIOD},
                {"type": "string", "pattern": DURATION_TEXT},
            ]
        },
        check=stop_grace_period,
        default=10.0,
        compose="stop_grace_period",
    ),
    Key(
        "healthcheck",
        "mapping",
        "The container's healthcheck, overriding the image's. An unhealthy container is "
        "replaced after unhealthy_grace.",
        "{test: [CMD, /bin/check], interval: 5s}",
        schema={},
        check=healthcheck,
        compose="healthcheck",
        children=HEALTHCHECK_FIELDS,
    ),
    Key(
        "pull_policy",
        "always | missing | never | build",
        "When to pull the image: before every container create, only when it is not present "
        "(if_not_present is a synonym), or never. With build: build (the default there) "
        "builds when the image is missing or its context changed, missing only when it is "
        "missing, never never, always pulls and builds when the pull fails.",
        "always",
        schema={"enum": [*PULL_POLICIES, "if_not_present"]},
        check=pull_policy,
        default=PullPolicy.MISSING,
        compose="pull_policy",
    ),
    Key(
        "build",
        "context directory, or mapping",
        "Build the image from a local context (context, dockerfile, dockerfile_inline, args, "
        "target, labels, cache_from, network, shm_size, extra_hosts), tagged as image, else "
        "<project>-<service>; rebuilt when the context's content changes (pull_policy).",
        "{context: ., args: {VERSION: '1.2'}}",
        schema={"anyOf": [{"type": "string"}, {"type": "object"}]},
        check=build,
        compose="build",
    ),
    Key(
        "x-healerd",
        "mapping",
        "healerd's own keys for this service (Compose ignores x- keys).",
        "{auto_update: registry}",
        schema={},
        check=x_healerd,
        default=AutoUpdate.NEVER,
        attr="auto_update",
        children=EXTENSION_FIELDS,
    ),
    Key(
        "unhealthy_grace",
        "duration <= 168h",
        "How long a container may stay unhealthy before healerd replaces it.",
        "30s",
        schema=DURATION_SCHEMA,
        check=unhealthy_grace,
        default=0.0,
    ),
    Key(
        "priority",
        f"integer -{PRIORITY_RANGE} to {PRIORITY_RANGE}",
        "When the host has no room for every container that should start (see the pressure "
        "settings in healerd.yaml), services with a higher priority start first and lower "
        "ones wait. Changing it never replaces containers.",
        "10",
        schema={"type": "integer", "minimum": -PRIORITY_RANGE, "maximum": PRIORITY_RANGE},
        check=priority,
        default=0,
    ),
    Key(
        "update_config",
        "mapping",
        "How a changed spec rolls out to the running containers.",
        "{parallelism: 1, order: stop-first}",
        schema={},
        check=update_config,
        default=UpdateConfig(),
        compose="deploy.update_config",
        children=UPDATE_CONFIG_FIELDS,
    ),
    Key(
        "restart_policy",
        "mapping",
        "Backoff for a replica that keeps crashing. healerd always restarts and never gives "
        "up, so condition and max_attempts are refused here (under deploy.restart_policy "
        "they spell restart).",
        "{delay: 5s, max_delay: 2m}",
        schema={},
        check=restart_policy,
        default=RestartPolicy(),
        compose="deploy.restart_policy",
        children=RESTART_POLICY_FIELDS,
    ),
)

SERVICE_FIELDS += HOST_FIELDS
SERVICE_FIELDS += COMPOSE_FIELDS
SERVICE_FIELDS += HOOK_SERVICE_FIELDS
SERVICE_KEYS = frozenset(key.name for key in SERVICE_FIELDS)
