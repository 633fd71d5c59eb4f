"""`ports`: Compose's short syntax [[IP:]HOST:]CONTAINER[/tcp|udp], and when two published
ports would need the same host port (within a service, a file, or across files).
"""

from __future__ import annotations

import ipaddress
import re

from healerd.config.errors import describe
from healerd.config.keys import At
from healerd.config.yamlload import LineList
from healerd.model import PortSpec, ServiceSpec

PORT_FORMAT = "[[IP:]HOST:]CONTAINER[/tcp|udp]"


def ports_clash(a: PortSpec, b: PortSpec) -> bool:
    """Whether two published ports would need the same host port: same number and protocol,
    and the same address or one of them on every address."""
    if a.host_port is None or b.host_port is None:
        return False
    if (a.host_port, a.protocol) != (b.host_port, b.protocol):
        return False
    wildcard = ("", "0.0.0.0", "::")
    return a.host_ip == b.host_ip or a.host_ip in wildcard or b.host_ip in wildcard


def port_clash(a: ServiceSpec, b: ServiceSpec) -> PortSpec | None:
    """A fixed host port of `b` that `a` also publishes, if any."""
    for pb in b.ports:
        if any(ports_clash(pa, pb) for pa in a.ports):
            return pb
    return None


def describe_port(port: PortSpec) -> str:
    address = f"{port.host_ip}:" if port.host_ip else ""
    return f"host port {address}{port.host_port}/{port.protocol}"


def _port_number(text: str, what: str, at: At) -> int | None:
    if re.fullmatch(r"[0-9]+-[0-9]+", text):
        at.error("port ranges are not supported")
    elif re.fullmatch(r"[0-9]{1,5}", text) and 1 <= int(text) <= 65535:
        return int(text)
    else:
        at.error(f"{what} port {text!r} must be a number from 1 to 65535")
    return None


def _port(item: object, at: At) -> PortSpec | None:
    if isinstance(item, bool) or not isinstance(item, int | str):
        at.error(f"must be a number or a '{PORT_FORMAT}' string, not {describe(item)}")
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
        at.error(f"must be a list of ports such as '8080:80', not {describe(value)}")
        return ()
    found: list[PortSpec] = []
    for index, item in enumerate(value):
        item_at = at.item(value, index)
        port = _port(item, item_at)
        if port is None:
            continue
        if port.host_port is not None and any(
            (p.host_ip, p.host_port, p.protocol) == (port.host_ip, port.host_port, port.protocol)
            for p in found
        ):
            item_at.error(f"host port {port.host_port}/{port.protocol} is published twice")
            continue
        found.append(port)
    return tuple(found)


_PORT_NUMBER = (
    r"0*(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
)
PORT_TEXT = (
    rf"^(?:(?:(?:[0-9]{{1,3}}(?:\.[0-9]{{1,3}}){{3}}|\[[0-9a-fA-F:.]+\])?:)?(?:{_PORT_NUMBER})?:)?"
    rf"{_PORT_NUMBER}(?:/(?:[tT][cC][pP]|[uU][dD][pP]))?$"
)
