"""Checks for Compose's container settings (healerd.config.hostopts holds their rows).

Each normalises a value the way `docker compose` reads it, so that the engine gets the
same create request from healerd as from Compose; sets (capabilities, DNS servers) are
kept in the order written, as Compose passes them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from healerd.config.errors import describe
from healerd.config.keys import At
from healerd.config.netopts import network_mode as shared_network_mode
from healerd.config.pairs import labels
from healerd.config.units import parse_size
from healerd.config.values import boolean, whole
from healerd.config.yamlload import LineDict, LineList
from healerd.model import Dependency, LoggingSpec, Ulimit
from healerd.vocabulary import Condition, Restart, RestartMode

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
CAPABILITY_RE = re.compile(r"(?:CAP_)?[A-Z][A-Z_]*|ALL", re.IGNORECASE)
SIGNAL_RE = re.compile(r"(?:SIG)?[A-Z][A-Z0-9+-]*|[1-9][0-9]?", re.IGNORECASE)
EXPOSE_RE = re.compile(r"[0-9]{1,5}(?:-[0-9]{1,5})?(?:/(?:tcp|udp|sctp))?")
_DEVICE_PERMS = re.compile(r"[rwm]{1,3}")
_ULIMIT_NAMES = (
    "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile",
    "nproc", "rss", "rtprio", "rttime", "sigpending", "stack",
)  # fmt: skip
NAMESPACE_MODES = ("host", "private", "shareable", "none", "")


def text(value: object, at: At) -> str | None:
    """A non-empty string; numbers are taken as their text, as YAML authors expect."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        at.error(f"must be a string, not {describe(value)}")
        return None
    if not str(value).strip():
        at.error("must not be empty")
        return None
    return str(value)


def items(value: object, at: At, *, single: bool = True) -> list[tuple[str, At]]:
    """The non-empty strings of a list (or one string, where Compose allows it), each
    with where it sits."""
    if single and isinstance(value, str | int) and not isinstance(value, bool):
        one = text(value, at)
        return [(one, at)] if one else []
    if not isinstance(value, LineList):
        what = "a string or a list of strings" if single else "a list of strings"
        at.error(f"must be {what}, not {describe(value)}")
        return []
    out = []
    for index, item in enumerate(value):
        item_at = at.item(value, index)
        got = text(item, item_at)
        if got is not None:
            out.append((got, item_at))
    return out


def checked(
    value: object, at: At, ok: Callable[[str], object], reason: str, *, single: bool = True
) -> tuple[str, ...]:
    """The strings of `value`, each that fails `ok` reported at its place as
    `'<entry>' <reason>`."""
    found = items(value, at, single=single)
    for entry, entry_at in found:
        if not ok(entry):
            entry_at.error(f"{entry!r} {reason}")
    return tuple(entry for entry, _ in found)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def strings(value: object, at: At, *, single: bool = True) -> tuple[str, ...]:
    return tuple(entry for entry, _ in items(value, at, single=single))


def flag(value: object, at: At) -> bool:
    return boolean(value, at)


def optional_flag(value: object, at: At) -> bool | None:
    return boolean(value, at)


# Docker's rule for container names.
CONTAINER_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")


def container_name(value: object, at: At) -> str | None:
    """Empty (`${NAME}` unset) means none, as in Compose."""
    if value == "":
        return None
    name = text(value, at)
    if name is not None and (len(name) > 128 or not CONTAINER_NAME_RE.fullmatch(name)):
        at.error(f"{name!r} is not a container name ([a-zA-Z0-9][a-zA-Z0-9_.-]+, <= 128)")
        return None
    return name


def hostname(value: object, at: At) -> str | None:
    name = text(value, at)
    if name is not None and (len(name) > 253 or not HOSTNAME_RE.fullmatch(name)):
        at.error(f"{name!r} is not a valid host name (letters, digits, '-' and dots)")
        return None
    return name


def capabilities(value: object, at: At) -> tuple[str, ...]:
    reason = "is not a capability (such as NET_ADMIN or ALL)"
    return checked(value, at, CAPABILITY_RE.fullmatch, reason, single=False)


def dns_servers(value: object, at: At) -> tuple[str, ...]:
    return checked(value, at, _is_ip, "is not an IP address")


def extra_hosts(value: object, at: At) -> tuple[str, ...]:
    """`host:ip` (or Compose's `host=ip`) entries, or a mapping of host to ip; the engine
    takes `host:ip`."""
    entries: list[tuple[str, str, At]] = []
    if isinstance(value, LineDict):
        for host, ip in value.items():
            entries.append((str(host), str(ip), at.key(value, host)))
    elif isinstance(value, LineList):
        for index, item in enumerate(value):
            item_at = at.item(value, index)
            entry = text(item, item_at)
            if entry is None:
                continue
            sep = "=" if "=" in entry else ":"
            host, found, ip = entry.partition(sep)
            if not found:
                item_at.error(f"{entry!r} is not host:ip")
                continue
            entries.append((host, ip, item_at))
    else:
        at.error(f"must be a list of host:ip or a mapping of host to ip, not {describe(value)}")
    out = []
    for host, ip, entry_at in entries:
        address = ip.strip("[]")
        if address != "host-gateway" and not _is_ip(address):
            entry_at.error(f"{ip!r} is not an IP address (or host-gateway)")
            continue
        out.append(f"{host}:{address}")
    return tuple(out)


def string_list(value: object, at: At) -> tuple[str, ...]:
    return strings(value, at, single=False)


def _device_ok(entry: str) -> bool:
    parts = entry.split(":")
    if len(parts) > 3 or not parts[0].startswith("/"):
        return False
    if len(parts) == 2:
        return parts[1].startswith("/") or bool(_DEVICE_PERMS.fullmatch(parts[1]))
    if len(parts) == 3:
        return parts[1].startswith("/") and bool(_DEVICE_PERMS.fullmatch(parts[2]))
    return True


def devices(value: object, at: At) -> tuple[str, ...]:
    """Short syntax: HOST[:CONTAINER[:PERMISSIONS]], HOST an absolute path."""
    reason = "is not HOST[:CONTAINER[:PERMISSIONS]] (absolute paths; rwm)"
    return checked(value, at, _device_ok, reason, single=False)


def tmpfs(value: object, at: At) -> tuple[str, ...]:
    return checked(
        value, at, lambda e: e.startswith("/"), "is not an absolute path in the container"
    )


def sysctls(value: object, at: At) -> tuple[tuple[str, str], ...]:
    return labels(value, at)


def _ulimit(name: object, value: object, at: At) -> Ulimit | None:
    if not isinstance(name, str) or name not in _ULIMIT_NAMES:
        at.error(f"{name!r} is not a ulimit ({', '.join(_ULIMIT_NAMES)})")
        return None
    if isinstance(value, LineDict):
        unknown = sorted(str(k) for k in value if k not in ("soft", "hard"))
        if unknown or "soft" not in value or "hard" not in value:
            at.error("must be a number, or a mapping with soft and hard")
            return None
        soft = whole(value["soft"], at.key(value, "soft"), minimum=-1, default=0)
        hard = whole(value["hard"], at.key(value, "hard"), minimum=-1, default=0)
        if hard != -1 and soft > hard:
            at.error(f"soft {soft} is above hard {hard}")
        return Ulimit(name, soft, hard)
    limit = whole(value, at, minimum=-1, default=0)
    return Ulimit(name, limit, limit)


def ulimits(value: object, at: At) -> tuple[Ulimit, ...]:
    if not isinstance(value, LineDict):
        at.error(f"must map ulimit names to a number or to soft and hard, not {describe(value)}")
        return ()
    out = [_ulimit(name, v, at.key(value, name)) for name, v in value.items()]
    return tuple(sorted((u for u in out if u is not None), key=lambda u: u.name))


def size(value: object, at: At) -> int | None:
    try:
        return parse_size(value)
    except ValueError as exc:
        at.error(str(exc))
        return None


def swap_size(value: object, at: At) -> int | None:
    """memswap_limit: a size, or -1 for unlimited swap."""
    if value == -1 or value == "-1":
        return -1
    return size(value, at)


def stop_signal(value: object, at: At) -> str | None:
    sig = text(value, at)
    if sig is not None and not SIGNAL_RE.fullmatch(sig):
        at.error(f"{sig!r} is not a signal (such as SIGINT, QUIT or 9)")
        return None
    return sig


def logging(value: object, at: At) -> LoggingSpec | None:
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping with driver and options, not {describe(value)}")
        return None
    for key in value:
        if key not in ("driver", "options"):
            at.key(value, key).error(f"unknown key {key!r}: logging takes driver and options")
    driver = value.get("driver")
    name = text(driver, at.key(value, "driver")) if driver is not None else ""
    options = value.get("options")
    pairs = labels(options, at.key(value, "options")) if options is not None else ()
    return LoggingSpec(name or "", pairs)


def pids_limit(value: object, at: At) -> int | None:
    return whole(value, at, minimum=-1, default=0)


def cpu_shares(value: object, at: At) -> int | None:
    return whole(value, at, minimum=2, maximum=262144, default=1024)


def cpuset(value: object, at: At) -> str | None:
    got = text(value, at)
    if got is not None and not re.fullmatch(r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*", got):
        at.error(f"{got!r} is not a CPU list such as 0-3 or 0,2")
        return None
    return got


def oom_score_adj(value: object, at: At) -> int | None:
    return whole(value, at, minimum=-1000, maximum=1000, default=0)


def microseconds(value: object, at: At) -> int | None:
    """cpu_period, cpu_quota, cpu_rt_*: whole microseconds, as Docker takes them."""
    return whole(value, at, minimum=0, maximum=10**9, default=0)


def swappiness(value: object, at: At) -> int | None:
    return whole(value, at, minimum=0, maximum=100, default=0)


def uts(value: object, at: At) -> str | None:
    mode = text(value, at)
    if mode is not None and mode != "host":
        at.error(f"{mode!r} is not host (the only UTS mode besides the default)")
        return None
    return mode


MAC_RE = re.compile(r"(?:[0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}")


def mac_address(value: object, at: At) -> str | None:
    got = text(value, at)
    if got is not None and not MAC_RE.fullmatch(got):
        at.error(f"{got!r} is not a MAC address such as 02:42:ac:11:00:02")
        return None
    return got


def namespace(value: object, at: At) -> str | None:
    """ipc / pid / userns_mode: host, private, ..., or container:NAME. Compose's
    service:NAME needs the other service's container: not yet."""
    mode = text(value, at)
    if mode is None:
        return None
    if mode.startswith("service:"):
        at.error(f"{mode!r}: sharing a namespace with another service is not supported yet")
        return None
    if mode not in NAMESPACE_MODES and not mode.startswith("container:"):
        at.error(f"{mode!r} is not host, private, shareable, none or container:NAME")
        return None
    return mode


def network_mode(value: object, at: At) -> str | None:
    mode = text(value, at)
    if mode is None:
        return None
    if mode.startswith(("service:", "container:")):
        return shared_network_mode(mode, at)
    if mode not in ("host", "none", "bridge", "default"):
        at.error(f"{mode!r} is not host, none, bridge, default, service:NAME or container:NAME")
        return None
    return mode


def expose(value: object, at: At) -> tuple[str, ...]:
    reason = "is not PORT[/PROTOCOL] (tcp, udp or sctp)"
    return checked(value, at, EXPOSE_RE.fullmatch, reason, single=False)


RESTARTS = tuple(m.value for m in RestartMode)


def restart(value: object, at: At) -> Restart | None:
    """Compose's restart; an unquoted `no` is YAML 1.1's false, which Compose (YAML 1.2)
    reads as the string "no"."""
    if value is False:
        return Restart(RestartMode.NO)
    mode = text(value, at)
    if mode is None:
        return None
    try:
        return Restart.parse(mode)
    except ValueError:
        at.error(f'{mode!r} is not always, unless-stopped, on-failure[:N] (N >= 1) or "no"')
        return None


CONDITIONS = tuple(c.value for c in Condition)


def _dependency(name: object, body: object, at: At) -> Dependency | None:
    if not isinstance(name, str) or not name:
        at.error(f"must name a service, not {describe(name)}")
        return None
    if body is None:
        return Dependency(name)
    if not isinstance(body, LineDict):
        at.error(f"must be a mapping with condition and required, not {describe(body)}")
        return None
    for key in body:
        if key not in ("condition", "required", "restart"):
            at.key(body, key).error(
                f"unknown key {key!r}: depends_on takes condition, required, restart"
            )
    condition = body.get("condition", Condition.STARTED)
    if condition not in CONDITIONS:
        at.key(body, "condition").error(
            f"must be one of {', '.join(CONDITIONS)}, not {condition!r}"
        )
        condition = Condition.STARTED  # the file is refused: any will do
    required = boolean(body["required"], at.key(body, "required")) if "required" in body else True
    restart = boolean(body["restart"], at.key(body, "restart")) if "restart" in body else False
    return Dependency(name, Condition(condition), required, bool(restart))


def depends_on(value: object, at: At) -> tuple[Dependency, ...]:
    """Short syntax (a list of services) or long (service: {condition, required})."""
    if isinstance(value, LineList):
        out = [_dependency(name, None, at.item(value, i)) for i, name in enumerate(value)]
    elif isinstance(value, LineDict):
        out = [_dependency(name, body, at.key(value, name)) for name, body in value.items()]
    else:
        at.error(f"must be a list of services or a mapping, not {describe(value)}")
        return ()
    return tuple(sorted((d for d in out if d is not None), key=lambda d: d.service))
