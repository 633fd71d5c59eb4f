"""The published forms of the config's key tables: a JSON Schema and the reference page.

Both are generated from the tables the checker itself runs on (fields.SERVICE_FIELDS
and its nested tables, settingkeys.SETTINGS_FIELDS), as are the man pages
(healerd.config.manpages), and unit tests hold the committed files equal to what is
generated. To regenerate them all:

    python -m healerd.config.schema          # writes config/healerd-services.schema.json,
                                             # docs/reference/config.md and
                                             # packaging/man/healerd{-services,.yaml}.5
                                             # below the current directory

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

from healerd.config.fields import SERVICE_FIELDS
from healerd.config.keydocs import (
    COMPOSE_REFUSED,
    LIMITS,
    SETTINGS_TEXT,
    TRUST,
    VALUE_FORMS,
    child_example,
    default_text,
    setting_default_doc,
)
from healerd.config.keys import Key
from healerd.config.manpages import MAN_PAGES, man_text
from healerd.config.project import PROJECT_NAME_RE
from healerd.config.servicefile import MAX_SERVICES_PER_FILE, SERVICE_NAME_RE
from healerd.config.settingkeys import SETTINGS_FIELDS
from healerd.config.units import format_duration
from healerd.model import HealthcheckSpec, RestartPolicy, UpdateConfig

SCHEMA_FILE = Path("config") / "healerd-services.schema.json"
REFERENCE_FILE = Path("docs") / "reference" / "config.md"
_EXTENSION = {"^x-": {"description": "Ignored by healerd: a place for YAML anchors."}}


def _value_schema(key: Key) -> dict[str, Any]:
    """A nested mapping's from its children, unless the key has a schema of its own (a
    list of mappings: the lifecycle hooks)."""
    if key.children and not key.schema:
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


_ONE_OF = ("image", "build")


def service_schema() -> dict[str, Any]:
    """The JSON Schema (draft-07) of a service file."""
    service = {
        "type": "object",
        "description": "One service: containers of one image, kept running by healerd.",
        # An image to run, or a build that makes one (tagged <project>-<service>).
        "anyOf": [{"required": [key.name]} for key in SERVICE_FIELDS if key.name in _ONE_OF],
        # pull_policy build needs something to build.
        "if": {"properties": {"pull_policy": {"const": "build"}}, "required": ["pull_policy"]},
        "then": {"required": ["build"]},
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
                "properties": {
                    **{k: {"type": "string"} for k in ("subnet", "ip_range", "gateway")},
                    "aux_addresses": {"type": "object", "additionalProperties": {"type": "string"}},
                },
                "required": ["subnet"],
                "additionalProperties": False,
            },
        },
        "options": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}


def _declarations(description: str, keys: tuple[str, ...]) -> dict[str, Any]:
    types = {"external": "boolean", "internal": "boolean", "attachable": "boolean"}
    props: dict[str, Any] = {k: {"type": types.get(k, "string")} for k in keys}
    props["labels"] = props["driver_opts"] = {"type": ["object", "array"]}
    # `external: {name: X}`: the older spelling of `external: true` with `name: X`.
    props["external"] = {
        "type": ["boolean", "object"],
        "properties": {"name": {"type": "string"}},
        "patternProperties": {"^x-": {}},
        "additionalProperties": False,
    }
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
            f"| `{prefix}{key.name}` | {_cell(key.type)} | {_cell(default_text(key))} "
            f"| {_cell(compose_text)} | {_cell(_code(example))} | {_cell(key.doc)} |"
        )
    return rows


def _settings_table() -> list[str]:
    rows = ["| Key | Type | Default | Example | Meaning |", "|---|---|---|---|---|"]
    for key in SETTINGS_FIELDS:
        default = "see below" if key.children else setting_default_doc(key)
        rows.append(
            f"| `{key.name}` | {_cell(key.type)} | {default} "
            f"| `{key.name}: {_cell(key.example)}` | {_cell(key.doc)} |"
        )
        # A nested section's keys, each a row of its own.
        for child in key.children:
            rows.append(
                f"| `{key.name}.{child.name}` | {_cell(child.type)} "
                f"| {_cell(setting_default_doc(child))} "
                f"| `{_cell(child_example(key, child))}` | {_cell(child.doc)} |"
            )
    return rows


_INTRO = """\
# Configuration reference

<!-- Generated by `python -m healerd.config.schema` from the tables healerd checks files
with (healerd/config/fields.py, healerd/config/settingkeys.py). Do not edit by hand: a unit
test fails when this page and the tables differ. -->

healerd reads two kinds of files from its config directory (default `/etc/healerd`):
`healerd.yaml`, the daemon's settings, and the service files `conf.d/*.yaml` (`*.yml`).
How files are picked up, what happens to a file with errors, and who may write them is
told in the user guide ([Declaring services](../user-guide.md#declaring-services)); the
example files are `config/healerd.yaml` and `config/conf.d/example.yaml`.

Common value forms:

{value_forms}
{limits}
{trust}
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

_COMPOSE_NOTE = """
A service file is a Compose file: [compose.md](compose.md) says how each Compose field
is taken. The Compose specification's service fields that are not rows above are
refused with the reason in the error: {refused}"""

_SETTINGS_INTRO = """
## healerd.yaml

{settings}
"""


def reference_text() -> str:
    """docs/reference/config.md: every key of a service file and of healerd.yaml."""
    lines = [
        _INTRO.replace("{value_forms}", VALUE_FORMS)
        .replace("{limits}\n", LIMITS + "\n")
        .replace("{trust}", TRUST)
    ]
    lines += _key_table(SERVICE_FIELDS)
    lines.append(_COMPOSE_NOTE.replace("{refused}", COMPOSE_REFUSED))
    for key in SERVICE_FIELDS:
        if key.children:
            lines.append(f"### {key.name}\n")
            lines.append(f"{key.doc} Example: `{key.name}: {key.example}`\n")
            lines += _key_table(key.children, f"{key.name}.")
            lines.append("")
    lines.append(_SETTINGS_INTRO.replace("{settings}", SETTINGS_TEXT).rstrip("\n") + "\n")
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
    for page in MAN_PAGES:
        (root / page).write_text(man_text(page), encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
