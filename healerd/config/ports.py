"""`ports`: Compose's short syntax [[IP:]HOST:]CONTAINER[/tcp|udp] and its long syntax (a
mapping: target, published, host_ip, protocol, mode, name, app_protocol), and when two
published ports would need the same host port (within a service, a file, or across files).
"""

from __future__ import annotations

import ipaddress
import re

from healerd.config.errors import describe
from healerd.config.keys import At, unknown_keys
from healerd.config.yamlload import LineDict, LineList
from healerd.model import PortSpec, ServiceSpec

PORT_FORMAT = "[[IP:]HOST:]CONTAINER[/tcp|udp]"
_LONG_KEYS = ("target", "published", "host_ip", "protocol", "mode", "name", "app_protocol")
_WILDCARDS = ("", "0.0.0.0", "::")  # host addresses that mean every address


def ports_clash(a: PortSpec, b: PortSpec) -> bool:
    """Whether two published ports would need the same host port: same number and protocol,
    and the same address or one of them on every address."""
    if a.host_port is None or b.host_port is None:
        return False
    if (a.host_port, a.protocol) != (b.host_port, b.protocol):
        return False
    return a.host_ip == b.host_ip or a.host_ip in _WILDCARDS or b.host_ip in _WILDCARDS


def port_clash(a: ServiceSpec, b: ServiceSpec) -> PortSpec | None:
    """A fixed host port of `b` that `a` also publishes, if any."""
    for pb in b.ports:
        if any(ports_clash(pa, pb) for pa in a.ports):
            return pb
    return None


class HostPorts:
    """Fixed host ports claimed so far, each clash found in constant time (port_clash
    over every pair of services would be quadratic in a file's services and ports).

    Owners are numbered in claim order; a lookup gives the first owner that clashes.
    """

    def __init__(self) -> None:
        self._exact: dict[tuple[str, int, str], int] = {}  # (address, port, protocol)
        self._wildcard: dict[tuple[int, str], int] = {}  # claimed on every address
        self._any: dict[tuple[int, str], int] = {}  # claimed on some address

    def owner(self, port: PortSpec) -> int | None:
        if port.host_port is None:
            return None
        key = (port.host_port, port.protocol)
        if port.host_ip in _WILDCARDS:
            return self._any.get(key)
        found = [
            o
            for o in (self._exact.get((port.host_ip, *key)), self._wildcard.get(key))
            if o is not None
        ]
        return min(found, default=None)

    def claim(self, port: PortSpec, owner: int) -> None:
        if port.host_port is None:
            return
        key = (port.host_port, port.protocol)
        self._any.setdefault(key, owner)
        if port.host_ip in _WILDCARDS:
            self._wildcard.setdefault(key, owner)
        else:
            self._exact.setdefault((port.host_ip, *key), owner)

    def clash(self, spec: ServiceSpec) -> tuple[int, PortSpec] | None:
        """The first owner whose ports clash with `spec`'s, and the first such port of
        `spec` (what port_clash against each earlier service in turn would find)."""
        found: tuple[int, PortSpec] | None = None
        for port in spec.ports:
            owner = self.owner(port)
            if owner is not None and (found is None or owner < found[0]):
                found = (owner, port)
        return found


def describe_port(port: PortSpec) -> str:
    address = f"{port.host_ip}:" if port.host_ip else ""
    return f"host port {address}{port.host_port}/{port.protocol}"


def _port_number(text: str, what: str, at: At) -> int | None:
    if re.fullmatch(r"[0-9]+-[0-9]+", text):
        at.error(f"port ranges ({text}) are not supported: list each port on its own")
    elif re.fullmatch(r"[0-9]{1,5}", text) and 1 <= int(text) <= 65535:
        return int(text)
    else:
        at.error(f"{what} port {text!r} must be a number from 1 to 65535")
    return None


def _number(body: LineDict, key: str, what: str, at: At) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    key_at = at.key(body, key)
    if isinstance(value, bool) or not isinstance(value, int | str):
        key_at.error(f"must be a port number, not {describe(value)}")
        return None
    return _port_number(str(value), what, key_at)


def _text(body: LineDict, key: str, choices: tuple[str, ...], at: At) -> str:
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or not value or (choices and value.lower() not in choices):
        wanted = " or ".join(choices) if choices else "a non-empty string"
        at.key(body, key).error(f"must be {wanted}, not {value!r}")
        return ""
    return value.lower() if choices else value


def _long_port(body: LineDict, at: At) -> PortSpec | None:
    """Compose's long syntax. `mode: ingress` publishes as `host` does on one engine (as
    Compose does); `name` and `app_protocol` are information, accepted and not used."""
    unknown_keys(body, at, _LONG_KEYS)
    errors = len(at.errors)
    if body.get("target") is None:
        at.here("target").error("is required: the port in the container")
    container_port = _number(body, "target", "container", at)
    host_port = _number(body, "published", "host", at)
    protocol = _text(body, "protocol", ("tcp", "udp"), at) or "tcp"
    _text(body, "mode", ("host", "ingress"), at)
    for key in ("name", "app_protocol"):
        _text(body, key, (), at)
    host_ip = _text(body, "host_ip", (), at)
    try:
        host_ip = str(ipaddress.ip_address(host_ip)) if host_ip else ""
    except ValueError:
        at.key(body, "host_ip").error(f"{host_ip!r} is not an IP address")
    if len(at.errors) > errors or container_port is None:
        return None
    return PortSpec(container_port, protocol, host_ip, host_port)


def _port(item: object, at: At) -> PortSpec | None:
    if isinstance(item, LineDict):
        return _long_port(item, at)
    if isinstance(item, bool) or not isinstance(item, int | str):
        at.error(f"must be a number, a '{PORT_FORMAT}' string or a mapping, not {describe(item)}")
        return None
    text, protocol, host_ip = str(item), "tcp", ""
    if "/" in text:
        text, protocol = text.rsplit("/", 1)
        if protocol.lower() not in ("tcp", "udp"):
            at.error(f"protocol {protocol!r} must be tcp or udp")
            return None
    if text.startswith("[") and "]:" in text:  # [IPv6]:HOST:CONTAINER
        host_ip, _, text = text[1:].partition("]:")
        parts = ["", *text.split(":")] if text.count(":") == 1 else []
    else:
        parts = text.split(":")
        parts = [""] * (3 - len(parts)) + parts  # pad to IP, HOST, CONTAINER
    if len(parts) != 3:
        at.error(f"{item!r} is not {PORT_FORMAT} (IPv6 addresses go in brackets)")
        return None
    host_ip, host, container = host_ip or parts[0], parts[1], parts[2]
    errors = len(at.errors)
    try:
        host_ip = str(ipaddress.ip_address(host_ip)) if host_ip else ""
    except ValueError:
        at.error(f"{host_ip!r} is not an IP address")
    container_port = _port_number(container, "container", at)
    host_port = _port_number(host, "host", at) if host else None
    if len(at.errors) > errors or container_port is None:
        return None
    return PortSpec(container_port, protocol.lower(), host_ip, host_port)


def ports(value: object, at: At) -> tuple[PortSpec, ...]:
    if not isinstance(value, LineList):
        at.error(f"must be a list of ports such as '8080:80' or mappings, not {describe(value)}")
        return ()
    found: list[PortSpec] = []
    fixed: set[tuple[str, int, str]] = set()
    for index, item in enumerate(value):
        item_at = at.item(value, index)
        port = _port(item, item_at)
        if port is None:
            continue
        if port.host_port is not None:
            key = (port.host_ip, port.host_port, port.protocol)
            if key in fixed:
                item_at.error(f"host port {port.host_port}/{port.protocol} is published twice")
                continue
            fixed.add(key)
        found.append(port)
    return tuple(found)


_PORT_NUMBER = (
    r"0*(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
)
PORT_TEXT = (
    rf"^(?:(?:(?:[0-9]{{1,3}}(?:\.[0-9]{{1,3}}){{3}}|\[[0-9a-fA-F:.]+\])?:)?(?:{_PORT_NUMBER})?:)?"
    rf"{_PORT_NUMBER}(?:/(?:[tT][cC][pP]|[uU][dD][pP]))?$"
)
_PORT_VALUE = {
    "anyOf": [
        {"type": "integer", "minimum": 1, "maximum": 65535},
        {"type": "string", "pattern": f"^{_PORT_NUMBER}$"},
    ]
}
LONG_PORT_SCHEMA = {
    "type": "object",
    "required": ["target"],
    "properties": {
        "target": _PORT_VALUE,
        "published": _PORT_VALUE,
        "host_ip": {
            "type": "string",
            "pattern": r"^(?:[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9a-fA-F:.]+)$",
        },
        "protocol": {"type": "string", "pattern": "^(?:[tT][cC][pP]|[uU][dD][pP])$"},
        "mode": {"enum": ["host", "ingress"]},
        "name": {"type": "string", "minLength": 1},
        "app_protocol": {"type": "string", "minLength": 1},
    },
    "additionalProperties": False,
    "patternProperties": {"^x-": {}},
}
