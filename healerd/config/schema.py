"""The published forms of the config's key tables: a JSON Schema and the reference page.

Both are generated from the tables the checker itself runs on (fields.SERVICE_FIELDS
and its nested tables, settings.SETTINGS_FIELDS), and unit tests
hold the committed files equal to what is generated here. To regenerate them:

    python -m healerd.config.schema          # writes config/healerd-services.schema.json
                                             # and docs/reference/config.md below the
                                             # current directory

The schema is for editors (YAML language servers) and is as strict as JSON Schema can be,
but some checks are beyond it: a file that passes the schema can still be refused by
healerd (duplicate keys, a host port published twice, a fixed host port with replicas
above 1, env files that are missing or untrusted, ...). `healerctl validate` has the last
word.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from healerd.config.envfile import MAX_ENV_FILE_SIZE, MAX_ENV_FILES
from healerd.config.fields import SERVICE_FIELDS
from healerd.config.keys import MAX_ENTRIES, Key
from healerd.config.project import PROJECT_NAME_RE
from healerd.config.servicefile import (
    MAX_ERRORS_PER_FILE,
    MAX_SERVICES_PER_FILE,
    SERVICE_NAME_RE,
)
from healerd.config.settings import SETTINGS_FIELDS
from healerd.config.units import MAX_DURATION, format_duration
from healerd.config.yamlload import MAX_FILE_SIZE, MAX_MERGED, MAX_MERGED_TOTAL, MAX_VALUES
from healerd.model import HealthcheckSpec, RestartPolicy, Threshold, UpdateConfig

SCHEMA_FILE = Path("config") / "healerd-services.schema.json"
REFERENCE_FILE = Path("docs") / "reference" / "config.md"
_EXTENSION = {"^x-": {"description": "Ignored by healerd: a place for YAML anchors."}}


def _value_schema(key: Key) -> dict[str, Any]:
    if key.children:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {child.name: _key_schema(child) for child in key.children},
            "patternProperties": _EXTENSION,
            "additionalProperties": False,
        }
    else:
        schema = dict(key.schema)
    return schema


def _key_schema(key: Key) -> dict[str, Any]:
    """A required key must hold a value; any other may be null, which counts as absent."""
    value = _value_schema(key)
    schema: dict[str, Any] = {"description": key.doc}
    default = _json_default(key)
    if default is not None:
        schema["default"] = default
    if key.required:
        return schema | value
    schema["anyOf"] = [{"type": "null"}, value]
    return schema


def _json_default(key: Key) -> Any:
    if key.children or key.default is None or key.default in ((), ""):
        return None
    if isinstance(key.default, float) and "duration" in key.type:
        return format_duration(key.default)
    return key.default


def service_schema() -> dict[str, Any]:
    """The JSON Schema (draft-07) of a service file."""
    service = {
        "type": "object",
        "description": "One service: containers of one image, kept running by healerd.",
        "required": [key.name for key in SERVICE_FIELDS if key.required],
        "properties": {key.name: _key_schema(key) for key in SERVICE_FIELDS},
        "patternProperties": _EXTENSION,
        "additionalProperties": False,
    }
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "healerd service file",
        "description": "A file in healerd's conf.d directory. Generated from healerd's own "
        "checks (healerd/config/schema.py); see docs/reference/config.md. healerd checks more "
        "than a schema can (duplicate keys, host ports across services, env files): "
        "`healerctl validate` has the last word.",
        "type": ["object", "null"],
        "properties": {
            "services": {
                "description": "Service names (1 to 50 letters, digits, '_', '.' or '-', "
                "starting with a letter or digit, unique across files) to services; at most "
                f"{MAX_SERVICES_PER_FILE} in a file.",
                "anyOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "propertyNames": {"pattern": f"^{SERVICE_NAME_RE.pattern}$"},
                        "additionalProperties": {"$ref": "#/definitions/service"},
                        "maxProperties": MAX_SERVICES_PER_FILE,
                    },
                ],
            },
            "name": {
                "description": "The Compose project name (default: the file's name).",
                "type": "string",
                "pattern": f"^{PROJECT_NAME_RE.pattern}$",
            },
            "version": {"description": "Accepted and ignored, as Compose does."},
            "networks": _declarations(
                "Networks of the project: `<project>_<key>` unless `name:` or `external`; "
                "`ipam` (driver, config: subnet, ip_range, gateway) and `enable_ipv6`.",
                ("name", "external", "driver", "internal", "attachable", "labels", "driver_opts"),
            ),
            "secrets": _files("Secrets: `file:`, a host file (relative to the file's directory)."),
            "configs": _files("Configs: `file:`, a host file (relative to the file's directory)."),
            "volumes": _declarations(
                "Named volumes of the project: `<project>_<key>` unless `name:` or `external`.",
                ("name", "external", "driver", "labels", "driver_opts"),
            ),
        },
        "patternProperties": _EXTENSION,
        "additionalProperties": False,
        "definitions": {"service": service},
    }


def _files(description: str) -> dict[str, Any]:
    props = {"file": {"type": "string", "minLength": 1}, "name": {"type": "string"}}
    return {
        "description": description,
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "properties": props,
            "required": ["file"],
            "additionalProperties": False,
        },
    }


_IPAM = {
    "type": "object",
    "properties": {
        "driver": {"type": "string"},
        "config": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {k: {"type": "string"} for k in ("subnet", "ip_range", "gateway")},
                "required": ["subnet"],
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}


def _declarations(description: str, keys: tuple[str, ...]) -> dict[str, Any]:
    types = {"external": "boolean", "internal": "boolean", "attachable": "boolean"}
    props: dict[str, Any] = {k: {"type": types.get(k, "string")} for k in keys}
    props["labels"] = props["driver_opts"] = {"type": ["object", "array"]}
    if "internal" in keys:  # a network's
        props |= {"ipam": _IPAM, "enable_ipv6": {"type": "boolean"}}
    return {
        "description": description,
        "type": ["object", "null"],
        "additionalProperties": {
            "type": ["object", "null"],
            "properties": props,
            "additionalProperties": False,
        },
    }


def schema_text() -> str:
    return json.dumps(service_schema(), indent=2, ensure_ascii=False) + "\n"


# --- docs/reference/config.md ----------------------------------------------------------------


def format_size(size: int) -> str:
    """33554432 -> 32Mi: how the docs and healerd.yaml write sizes (binary units)."""
    for unit, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if size and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def _default_text(key: Key) -> str:
    if key.required:
        return "required"
    if key.children:
        return "see below"
    default = key.default
    if default is None or default in ((), ""):
        return "none"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, float) and "duration" in key.type:
        return format_duration(default)
    return str(default)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`" if text else "—"


def _key_table(keys: Iterable[Key], prefix: str = "") -> list[str]:
    rows = [
        "| Key | Type | Default | Compose | Example | Meaning |",
        "|---|---|---|---|---|---|",
    ]
    for key in keys:
        compose = key.compose
        compose_text = compose if compose.startswith("(") else _code(compose)
        example = f"{key.name}: {key.example}"
        rows.append(
            f"| `{prefix}{key.name}` | {_cell(key.type)} | {_cell(_default_text(key))} "
            f"| {_cell(compose_text)} | {_cell(_code(example))} | {_cell(key.doc)} |"
        )
    return rows


def _setting_default(key: Key) -> str:
    value = key.default
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return f"[{', '.join(value)}]"
    if isinstance(value, Threshold):
        return f"{value.amount:g}%" if value.percent else format_size(int(value.amount))
    if key.type == "size" and isinstance(value, int):
        return format_size(value)
    if isinstance(value, float) and key.type.startswith("duration"):
        return format_duration(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _settings_table() -> list[str]:
    rows = ["| Key | Type | Default | Example | Meaning |", "|---|---|---|---|---|"]
    for key in SETTINGS_FIELDS:
        default = "see below" if key.children else f"`{_setting_default(key)}`"
        rows.append(
            f"| `{key.name}` | {_cell(key.type)} | {default} "
            f"| `{key.name}: {_cell(key.example)}` | {_cell(key.doc)} |"
        )
        # A nested section's keys, each a row of its own.
        for child in key.children:
            rows.append(
                f"| `{key.name}.{child.name}` | {_cell(child.type)} "
                f"| `{_setting_default(child)}` "
                f"| `{key.name}: {{{child.name}: {_cell(child.example)}}}` | {_cell(child.doc)} |"
            )
    return rows


_INTRO = """\
# Configuration reference

<!-- Generated by `python -m healerd.config.schema` from the tables healerd checks files
with (healerd/config/fields.py, healerd/config/settings.py). Do not edit by hand: a unit
test fails when this page and the tables differ. -->

healerd reads two kinds of files from its config directory (default `/etc/healerd`):
`healerd.yaml`, the daemon's settings, and the service files `conf.d/*.yaml` (`*.yml`).
How files are picked up, what happens to a file with errors, and who may write them is
told in the user guide ([Declaring services](../user-guide.md#declaring-services)); the
example files are `config/healerd.yaml` and `config/conf.d/example.yaml`.

Common value forms:

- **duration**: a number of seconds, or a string of numbers with units `h`, `m`, `s`,
  `ms`, `us` such as `500ms`, `10s`, `1m30s`, `2h`.
- **size**: a whole number of bytes, or a number with `k`, `m` or `g` (binary units:
  `256m` is 256 MiB) and an optional `b`, in either case.
- **null** counts as absent, for every key but `image`: a key whose list is all commented
  out keeps its default.
- Keys starting with `x-` are ignored at the top level and inside a service and its
  mappings (handy for YAML anchors); any other unknown key is an error, with a
  suggestion when it looks like a typo.

{limits}
Who may write the files: under `strict_modes` (the default), a service file, an env
file, a secret's or config's file and `healerd.yaml`, and every directory on the way to
each from `/`, must be owned by root or healerd's own user and not writable by group or
others (a sticky world-writable directory such as `/tmp` does not pass). healerd walks
each path from `/` one component at a time through checked directory descriptors with
`O_NOFOLLOW`: a symbolic link in a directory component is followed only when the
directory holding it passed, and its target is checked the same way. It reads what it
checked, at load and again when it reads an env file or a secret for a new container,
and then the contents must still be those checked at load (else the create waits for a
reload). A service file in `conf.d` may be a symbolic link; an env file, a secret or
`healerd.yaml` may not be one. The same rule holds for the project directory (and every
directory above it) and for every directory on the way to a bind source; the bind
source itself may be anyone's (it is the container's data). A FIFO, a device or a
socket is refused even with `strict_modes: false`, which skips only the owner and mode
checks (development only). `healerd.yaml` is always checked strictly: it is the file
that sets `strict_modes`.

Editors can check service files as they are typed with the JSON Schema
`config/healerd-services.schema.json` (generated from the same tables); put
`# yaml-language-server: $schema=<path or URL of the schema>` at the top of a file. The
schema cannot see everything healerd checks: duplicate keys, a host port used twice,
a fixed host port with more than one replica or with `order: start-first`, env files
that are missing, malformed or writable by others. `healerctl validate` runs the real
checks.

## Service files

```yaml
services:
  web:                      # the service name
    image: busybox:1.36
    replicas: 2
```

A service file holds one top-level key, `services`, mapping service names to services.
A service name is 1 to 50 letters, digits, `_`, `.` or `-`, starting with a letter or
digit, and must be unique across all files.

### Service keys
"""

_MIB = 2**20
_LIMITS = f"""\
Limits, so that no file can make healerd hang or fill its memory (each with an error
naming the file and the field):

- file sizes: a service file and `healerd.yaml` at most {MAX_FILE_SIZE // _MIB} MiB, an env file at
  most {MAX_ENV_FILE_SIZE // _MIB} MiB; a larger file is refused;
- at most {MAX_SERVICES_PER_FILE} services in a file; at most {MAX_ENTRIES} entries in a list or
  mapping of a service (`command`, `environment`, `labels`, `volumes`, `ports`,
  `networks`, ...), and at most {MAX_ENV_FILES} files in `env_file`;
- every duration at most `{format_duration(MAX_DURATION)}` (a week); the Type column gives each
  key's range;
- YAML merge keys (`<<`): at most {MAX_MERGED} entries in one mapping and {MAX_MERGED_TOTAL}
  in a file; aliases: at most {MAX_VALUES} values in all;
- at most {MAX_ERRORS_PER_FILE} errors of a file are listed, then how many more there are.
"""

_COMPOSE_NOTE = """
A service file is a Compose file: [compose.md](compose.md) says how each Compose field
is taken. The Compose specification's service fields that are not rows above are
refused with the reason in the error: Windows-only ones (`cpu_count`, `cpu_percent`,
`credential_spec`, `isolation`), Compose CLI features (`develop`, `provider`, `models`,
`attach`, `use_api_socket`), `external_links` and `volumes_from` (a service's containers
change with every heal), and, not yet, `annotations`, `blkio_config`, `cgroup`,
`extends`, `label_file`, `post_start`, `pre_stop` and `pull_refresh_after`. `build`
beside an `image` is ignored with a warning.
"""

_SETTINGS_INTRO = """
## healerd.yaml

Every key is optional and a missing file means all defaults. Unlike a service file, an
invalid `healerd.yaml` stops healerd at startup, with every error listed. It is read with
the strict owner and mode checks whatever it says about `strict_modes` (see above). The
config directory itself is chosen on the command line (`--config-dir`), not here;
`docker_host`, `socket_path`, `resync_interval`, `workers` and `log_level` can be
overridden there too.

"""


def reference_text() -> str:
    """docs/reference/config.md: every key of a service file and of healerd.yaml."""
    lines = [_INTRO.replace("{limits}\n", _LIMITS + "\n")]
    lines += _key_table(SERVICE_FIELDS)
    lines.append(_COMPOSE_NOTE)
    for key in SERVICE_FIELDS:
        if key.children:
            lines.append(f"### {key.name}\n")
            lines.append(f"{key.doc} Example: `{key.name}: {key.example}`\n")
            lines += _key_table(key.children, f"{key.name}.")
            lines.append("")
    lines.append(_SETTINGS_INTRO.rstrip("\n") + "\n")
    lines += _settings_table()
    return "\n".join(lines) + "\n"


def model_fields() -> Mapping[str, frozenset[str]]:
    """The model's attribute names for each table (tests hold the tables to them)."""
    return {
        "healthcheck": frozenset(f.name for f in fields(HealthcheckSpec)),
        "update_config": frozenset(f.name for f in fields(UpdateConfig)),
        "restart_policy": frozenset(f.name for f in fields(RestartPolicy)),
    }


def write(root: Path) -> None:
    (root / SCHEMA_FILE).write_text(schema_text(), encoding="utf-8")
    (root / REFERENCE_FILE).write_text(reference_text(), encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
