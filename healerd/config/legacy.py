"""Spellings of older Compose file formats that public files still carry (issue 34):
each is taken with Compose's meaning or refused with the spelling to write instead, so
a file copied from an old README never meets a bare "unknown key". The list, with the
oracle's verdict on each, is in docs/reference/compose.md ("Legacy spellings").

- `external: {name: X}` (formats 2.1 to 3.3) on a network or volume: external, named X,
  as docker-compose 1.29.2 and Compose v2 still read it.
- Format 1 (services at the top level, no `services:`): docker-compose 1.29.2 still
  runs it, without a project network and without `${VAR:-default}`; Compose v2 refuses
  it. Refused, pointing at `services:`, rather than reported key by key as unknown.
- Format 1's service keys (`net`, `log_driver`, `log_opt`, `dockerfile`, and
  `volume_driver`, which format 2 kept) in a file with `services:`: docker-compose
  1.29.2 refuses them there too; the error names the key to write.
"""

from __future__ import annotations

from healerd.config.errors import describe
from healerd.config.keys import At
from healerd.config.values import boolean
from healerd.config.yamlload import LineDict

_FORMAT_ONE = "is Compose file format 1's spelling, which docker-compose refuses beside services:"
FORMAT_ONE_KEYS: dict[str, str] = {
    "net": f"{_FORMAT_ONE} write network_mode (net: container:NAME is network_mode: "
    "service:NAME for a service of this file)",
    "log_driver": f"{_FORMAT_ONE} write logging: {{driver: ...}}",
    "log_opt": f"{_FORMAT_ONE} write logging: {{options: ...}}",
    "volume_driver": "is the spelling of Compose file formats 1 and 2.0 to 2.4, which "
    "docker-compose 1.29 refuses too: give the driver to each named volume under the "
    "top-level volumes (driver: ...)",
    "dockerfile": f"{_FORMAT_ONE} write build: {{dockerfile: ...}}",
}


def external(body: LineDict, at: At) -> tuple[bool, str | None]:
    """`external` of a top-level network or volume: (external, the name the legacy
    mapping gives, if any). `name:` beside a different `external.name` is an error, as
    in Compose v2: one object cannot have two names."""
    value = body["external"]
    ext_at = at.key(body, "external")
    if not isinstance(value, LineDict):
        return boolean(value, ext_at), None
    named: str | None = None
    for key, item in value.items():
        if isinstance(key, str) and key.startswith("x-"):
            continue
        if key != "name":
            ext_at.key(value, key).error(f"unknown key {key!r}: external takes only name")
        elif isinstance(item, str) and item:
            named = item
        else:
            ext_at.key(value, key).error(f"must be a name, not {describe(item)}")
    given = body.get("name")
    if named is not None and given is not None and given != named:
        ext_at.key(value, "name").error(
            f"{named!r} differs from name {given!r}: keep only name (external.name is its "
            "older spelling)"
        )
    return True, named


def format_one(data: LineDict, at: At, known: tuple[str, ...]) -> bool:
    """True when `data` is a format 1 file (each service with an image or build at the
    top level, no `services:`), each such key reported; `known`: the top-level keys."""
    if "services" in data:
        return False
    found = False
    for key, body in data.items():
        if key in known or (isinstance(key, str) and key.startswith("x-")):
            continue
        if isinstance(body, LineDict) and ("image" in body or "build" in body):
            found = True
            at.key(data, key).error(
                "a service at the top level is Compose file format 1, which docker compose "
                "no longer reads: put the services under services: (with network_mode for "
                "net, logging for log_driver and log_opt)"
            )
    return found
