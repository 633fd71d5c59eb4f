"""Service files: Compose-style YAML checked and normalised into ServiceSpecs.

A file is applied all-or-nothing, so checking never stops at the first problem: every
error in the file is collected and the operator can fix them in one go.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import math
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

from healerd.config.envfile import EnvFileError, env_digest, read_env_file
from healerd.config.errors import ConfigError, sort_errors, unknown_key_reason
from healerd.config.imageref import IMAGE_REFERENCE_PATTERN, image_reference_problem
from healerd.config.trust import trust_problem
from healerd.config.yamlload import LineDict, LineList, load_yaml, read_yaml_file
from healerd.model import (
    HealthcheckSpec,
    PortSpec,
    RestartPolicy,
    ServiceSpec,
    UpdateConfig,
    VolumeSpec,
)

SERVICE_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,49}")
RESERVED_LABEL_PREFIX = "io.healerd."
MAX_STOP_GRACE_PERIOD = 3600.0
PULL_POLICIES = ("always", "missing", "never")
UPDATE_ORDERS = ("start-first", "stop-first")
_HEALTHCHECK_KINDS = ("CMD", "CMD-SHELL", "NONE")
# Compose keys whose job healerd does itself, with what to write instead.
_REPLACED_KEYS = {
    "restart": "healerd restarts containers itself and never gives up; restart_policy "
    "sets its backoff",
    "deploy": "write replicas, update_config and restart_policy directly in the service",
    "container_name": "healerd names containers <service>-<hash>-<random> itself",
}

# Docker's own rule for volume names (at least two characters); networks allow one.
_VOLUME_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")
_NETWORK_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
_NUMBER_RE = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_DURATION_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(h|ms|m|s|us|µs)")
_DURATION_RE = re.compile(f"(?:{_DURATION_PART_RE.pattern})+")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
_SIZE_PATTERN = r"([0-9]+(?:\.[0-9]+)?)(?:([kmgKMG])[iI]?)?[bB]?"
_SIZE_RE = re.compile(_SIZE_PATTERN)
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_PORT_FORMAT = "[[IP:]HOST:]CONTAINER[/tcp|udp]"

T = TypeVar("T")


@dataclass(frozen=True)
class FileResult:
    """One file's verdict; `services` is None when the file has any error.

    `lines` and `columns` map each service name to where it is declared, so that later
    checks across files can point at it.
    """

    file: str
    services: dict[str, ServiceSpec] | None
    errors: tuple[ConfigError, ...] = ()
    lines: Mapping[str, int] = field(default_factory=dict, compare=False)
    columns: Mapping[str, int] = field(default_factory=dict, compare=False)


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


def describe(value: object) -> str:
    """Names YAML types the way the file's author thinks of them."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def parse_duration(value: object) -> float:
    """Seconds from a number or a Go-style string such as 1m30s, as Compose writes durations.

    Raises ValueError whose message completes a sentence about the field.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a duration such as 10s, 1m30s or 500ms, not {describe(value)}")
    if isinstance(value, str):
        if _NUMBER_RE.fullmatch(value):
            seconds = float(value)
        elif _DURATION_RE.fullmatch(value):
            parts = _DURATION_PART_RE.findall(value)
            seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
        else:
            raise ValueError(f"{value!r} is not a duration such as 10s, 1m30s or 500ms")
    else:
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    if math.isnan(seconds) or seconds < 0:
        raise ValueError("must not be negative")
    if math.isinf(seconds):
        raise ValueError("is too large")
    return seconds


def parse_size(value: object) -> int:
    """Bytes from an int or a size such as 256m (binary units, as Docker reads them)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"must be whole bytes or a size such as 256m, not {describe(value)}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE_RE.fullmatch(value.lower())
        if not match:
            raise ValueError(f"{value!r} is not a size such as 512k, 256m or 1g")
        size = int(Fraction(match[1]) * _SIZE_UNITS[match[2] or ""])
    if size <= 0:
        raise ValueError("must be greater than 0")
    if size >= 2**63:
        raise ValueError("is too large")
    return size


@dataclass(frozen=True)
class _Context:
    """What checks need beyond the text: where relative env_file paths start, and whether
    the files they name must pass the ownership and mode checks."""

    base_dir: Path | None = None
    strict_modes: bool = False


@dataclass(frozen=True)
class _At:
    """Where a value sits, so that a check can report against its field, line and column."""

    errors: list[ConfigError]
    file: str
    field: str
    line: int | None
    column: int | None = None
    context: _Context = _Context()

    def error(self, reason: str) -> None:
        self.errors.append(ConfigError(self.file, self.line, self.field, reason, self.column))

    def child(
        self, name: object, line: int | None, column: int | None = None, *, index: bool = False
    ) -> _At:
        if index:
            path = f"{self.field}[{name}]"
        else:
            path = f"{self.field}.{name}" if self.field else str(name)
        return _At(self.errors, self.file, path, line, column, self.context)

    def here(self, name: object) -> _At:
        """A child field reported at this position (for a missing key, say)."""
        return self.child(name, self.line, self.column)

    def key(self, mapping: LineDict, key: object) -> _At:
        name = mapping.key_text.get(key, key)
        return self.child(name, mapping.line_of(key), mapping.column_of(key))

    def item(self, seq: LineList, index: int, name: str | None = None) -> _At:
        line, column = seq.line_at(index), seq.column_at(index)
        if name:
            return self.child(name, line, column)
        return self.child(index, line, column, index=True)


def _string(value: object, at: _At) -> str | None:
    if isinstance(value, str):
        return value
    at.error(f"must be a string, not {describe(value)}")
    return None


def _image(value: object, at: _At) -> str:
    image = _string(value, at)
    if image is not None and (problem := image_reference_problem(image)):
        at.error(f"{image!r} is not an image reference such as busybox:1.36: {problem}")
    return image or ""


def _argv(value: object, at: _At) -> tuple[str, ...] | None:
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:
            at.error(f"cannot split into words: {exc}")
            return None
    if isinstance(value, LineList):
        for index, word in enumerate(value):
            if not isinstance(word, str):
                at.item(value, index).error(f"must be a string, not {describe(word)} (quote it)")
        return tuple(str(word) for word in value)
    at.error(f"must be a list of strings or a string, not {describe(value)}")
    return None


def _pair_key(key: object, at: _At, labels: bool) -> str | None:
    if not isinstance(key, str):
        at.error(f"keys must be strings, not {describe(key)} (quote it)")
        return None
    if not key or "=" in key:
        at.error("keys must be non-empty and without '='")
        return None
    if labels and key.startswith(RESERVED_LABEL_PREFIX):
        at.error(f"keys starting with {RESERVED_LABEL_PREFIX!r} are reserved for healerd")
        return None
    return key


def _pair_value(value: object, raw: str | None, at: _At) -> str | None:
    if value is None:
        return ""
    if isinstance(value, bool):
        at.error("true/false would be ambiguous as text: quote it, e.g. 'true'")
        return None
    if isinstance(value, int | float):
        return raw if raw is not None else str(value)  # keep 010 or 1.50 as written
    if isinstance(value, str):
        return value
    at.error(f"must be a string or a number, not {describe(value)}")
    return None


def _pairs(value: object, at: _At, *, labels: bool) -> tuple[tuple[str, str], ...]:
    """Environment and labels: a mapping or a list of KEY=value, sorted so order never matters."""
    pairs: dict[str, str] = {}
    if isinstance(value, LineDict):
        for raw_key, raw_value in value.items():
            item_at = at.key(value, raw_key)
            key = _pair_key(raw_key, item_at, labels)
            text = _pair_value(raw_value, value.raw.get(raw_key), item_at)
            if key is not None and text is not None:
                pairs[key] = text
    elif isinstance(value, LineList):
        for index, item in enumerate(value):
            if not isinstance(item, str):
                at.item(value, index).error(f"must be a 'KEY=value' string, not {describe(item)}")
                continue
            raw_key, sep, text = item.partition("=")
            item_at = at.item(value, index, raw_key or None)
            if not sep:
                item_at.error(f"{item!r} has no value: write {item}=value ({item}= for empty)")
            elif (key := _pair_key(raw_key, item_at, labels)) is None:
                pass
            elif key in pairs:
                item_at.error("is set more than once")
            else:
                pairs[key] = text
    else:
        at.error(f"must be a mapping or a list of 'KEY=value' strings, not {describe(value)}")
    return tuple(sorted(pairs.items()))


def _environment(value: object, at: _At) -> tuple[tuple[str, str], ...]:
    return _pairs(value, at, labels=False)


def _labels(value: object, at: _At) -> tuple[tuple[str, str], ...]:
    return _pairs(value, at, labels=True)


def _user(value: object, at: _At) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    user = _string(value, at)
    if user is not None and (not user or any(c.isspace() for c in user)):
        at.error("must be a user name or id such as 1000 or 1000:1000")
    return user


def _working_dir(value: object, at: _At) -> str | None:
    path = _string(value, at)
    if path is None:
        return None
    if not path.startswith("/"):
        at.error(f"{path!r} must be an absolute path")
    return posixpath.normpath(path)


def _volume(text: str, at: _At) -> VolumeSpec | None:
    parts = text.split(":")
    if len(parts) > 3 or not all(parts):
        at.error(f"{text!r} is not SOURCE:TARGET[:ro|rw] or an anonymous /path")
        return None
    if len(parts) == 1:
        source, target, mode = "", parts[0], "rw"
    elif len(parts) == 2:
        source, target, mode = parts[0], parts[1], "rw"
    else:
        source, target, mode = parts
    errors = len(at.errors)
    if mode not in ("ro", "rw"):
        at.error(f"mode {mode!r} must be ro or rw")
    if not target.startswith("/"):
        at.error(f"target {target!r} must be an absolute path")
    elif posixpath.normpath(target) == "/":
        at.error("cannot mount over /")
    if source.startswith("/"):
        source = posixpath.normpath(source)
    elif source and not _VOLUME_NAME_RE.fullmatch(source):
        at.error(f"source {source!r} must be an absolute path or a volume name (2+ characters)")
    if len(at.errors) > errors:
        return None
    return VolumeSpec(source=source, target=posixpath.normpath(target), read_only=mode == "ro")


def _volumes(value: object, at: _At) -> tuple[VolumeSpec, ...]:
    if not isinstance(value, LineList):
        at.error(f"must be a list of 'SOURCE:TARGET[:ro|rw]' strings, not {describe(value)}")
        return ()
    volumes: list[VolumeSpec] = []
    for index, item in enumerate(value):
        item_at = at.item(value, index)
        if not isinstance(item, str):
            item_at.error(f"only the short syntax SOURCE:TARGET is supported, not {describe(item)}")
            continue
        volume = _volume(item, item_at)
        if volume is not None and any(v.target == volume.target for v in volumes):
            item_at.error(f"target {volume.target!r} is mounted twice")
        elif volume is not None:
            volumes.append(volume)
    return tuple(volumes)


def _port_number(text: str, what: str, at: _At) -> int | None:
    if re.fullmatch(r"[0-9]+-[0-9]+", text):
        at.error("port ranges are not supported")
    elif re.fullmatch(r"[0-9]{1,5}", text) and 1 <= int(text) <= 65535:
        return int(text)
    else:
        at.error(f"{what} port {text!r} must be a number from 1 to 65535")
    return None


def _port(item: object, at: _At) -> PortSpec | None:
    if isinstance(item, bool) or not isinstance(item, int | str):
        at.error(f"must be a number or a '{_PORT_FORMAT}' string, not {describe(item)}")
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
        at.error(f"{item!r} is not {_PORT_FORMAT} (IPv6 addresses go in brackets)")
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


def _ports(value: object, at: _At) -> tuple[PortSpec, ...]:
    if not isinstance(value, LineList):
        at.error(f"must be a list of ports such as '8080:80', not {describe(value)}")
        return ()
    ports: list[PortSpec] = []
    for index, item in enumerate(value):
        item_at = at.item(value, index)
        port = _port(item, item_at)
        if port is None:
            continue
        if port.host_port is not None and any(
            (p.host_ip, p.host_port, p.protocol) == (port.host_ip, port.host_port, port.protocol)
            for p in ports
        ):
            item_at.error(f"host port {port.host_port}/{port.protocol} is published twice")
            continue
        ports.append(port)
    return tuple(ports)


def _networks(value: object, at: _At) -> tuple[str, ...]:
    """Networks are a set; sorted so that reordering them never replaces containers."""
    entries: list[tuple[object, _At]] = []
    if isinstance(value, LineList):
        entries = [(name, at.item(value, index)) for index, name in enumerate(value)]
    elif isinstance(value, LineDict):
        for name, options in value.items():
            entries.append((name, at.key(value, name)))
            if options is not None and options != {}:
                entries[-1][1].error("per-network options are not supported; leave it empty")
    else:
        at.error(f"must be a list of network names, not {describe(value)}")
    names: set[str] = set()
    for name, name_at in entries:
        if not isinstance(name, str) or not _NETWORK_NAME_RE.fullmatch(name):
            name_at.error(f"{name!r} is not a valid network name")
        elif name in names:
            name_at.error(f"network {name!r} is listed twice")
        else:
            names.add(name)
    return tuple(sorted(names))


def _mem_limit(value: object, at: _At) -> int | None:
    try:
        return parse_size(value)
    except ValueError as exc:
        at.error(str(exc))
        return None


def _cpus(value: object, at: _At) -> float | None:
    number = math.nan
    if isinstance(value, str) and _NUMBER_RE.fullmatch(value):  # Compose docs quote cpus
        number = float(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value) if abs(value) < 1e300 else math.inf
    if not math.isfinite(number) or number <= 0:
        at.error(f"must be a number of CPUs greater than 0, such as 0.5, not {value!r}")
        return None
    return number


def _stop_grace_period(value: object, at: _At) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        at.error(str(exc))
        return 10.0
    if seconds > MAX_STOP_GRACE_PERIOD:
        at.error(f"must be at most {MAX_STOP_GRACE_PERIOD:.0f}s")
    return seconds


def _duration(value: object, at: _At, *, positive: bool = False, default: float = 0.0) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        at.error(str(exc))
        return default
    if positive and seconds <= 0:
        at.error("must be greater than 0")
        return default
    return seconds


def _whole(value: object, at: _At, *, minimum: int, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        at.error(f"must be a whole number, not {describe(value)}")
    elif value < minimum:
        at.error(f"must be at least {minimum}")
    else:
        return value
    return default


def _bool(value: object, at: _At) -> bool:
    if isinstance(value, bool):
        return value
    at.error(f"must be true or false, not {describe(value)}")
    return False


def _choice(value: object, at: _At, choices: tuple[str, ...], default: str) -> str:
    if isinstance(value, str) and value in choices:
        return value
    at.error(f"must be one of {', '.join(choices)}, not {value!r}")
    return default


def _unknown_keys(body: LineDict, at: _At, known: frozenset[str] | tuple[str, ...]) -> None:
    for key in body:
        if not (isinstance(key, str) and key.startswith("x-")) and key not in known:
            at.key(body, key).error(unknown_key_reason(key, known))


def _healthcheck_test(value: object, at: _At) -> tuple[str, ...]:
    if isinstance(value, str):
        if not value.strip():
            at.error("must not be empty (use disable: true to turn the healthcheck off)")
            return ()
        return ("CMD-SHELL", value)
    if not isinstance(value, LineList):
        at.error(f"must be a list such as [CMD, prog, arg] or a string, not {describe(value)}")
        return ()
    words = []
    for index, word in enumerate(value):
        if not isinstance(word, str):
            at.item(value, index).error(f"must be a string, not {describe(word)} (quote it)")
        words.append(str(word))
    if not words or words[0] not in _HEALTHCHECK_KINDS:
        at.error("must start with CMD, CMD-SHELL or NONE")
    elif words[0] == "NONE" and len(words) > 1:
        at.error("NONE takes nothing after it")
    elif words[0] == "CMD" and len(words) < 2:
        at.error("CMD needs the program to run after it")
    elif words[0] == "CMD-SHELL" and len(words) != 2:
        at.error("CMD-SHELL takes exactly one string: the shell command")
    return tuple(words)


def _healthcheck(value: object, at: _At) -> HealthcheckSpec | None:
    """Compose's healthcheck; disabled in either spelling becomes one canonical value."""
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping with keys such as test and interval, not {describe(value)}")
        return None
    _unknown_keys(value, at, _HEALTHCHECK_KEYS)
    no_test: tuple[str, ...] = ()
    test = _optional(value, at, "test", _healthcheck_test, no_test)
    disable = _optional(value, at, "disable", _bool, False)
    timing: dict[str, Any] = {}
    for key in ("interval", "timeout", "start_period"):
        if value.get(key) is not None:
            positive = key != "start_period"
            timing[key] = _duration(value[key], at.key(value, key), positive=positive)
    if value.get("retries") is not None:
        timing["retries"] = _whole(value["retries"], at.key(value, "retries"), minimum=1, default=1)
    if disable and test not in ((), ("NONE",)):
        at.key(value, "disable").error("contradicts the test: leave out one of them")
    if disable or test == ("NONE",):
        return HealthcheckSpec(test=("NONE",), disable=True)
    spec = HealthcheckSpec(test=test, **timing)
    return None if spec == HealthcheckSpec() else spec


def _pull_policy(value: object, at: _At) -> str:
    if value == "build":
        at.error("build is not supported: healerd does not build images (build it, then use it)")
        return "missing"
    if value == "if_not_present":  # Compose's other name for missing
        return "missing"
    return _choice(value, at, PULL_POLICIES, "missing")


def _unhealthy_grace(value: object, at: _At) -> float:
    return _duration(value, at)


PRIORITY_RANGE = 1_000_000


def _priority(value: object, at: _At) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        at.error(f"must be a whole number, not {describe(value)}")
    elif abs(value) > PRIORITY_RANGE:
        at.error(f"must be from -{PRIORITY_RANGE} to {PRIORITY_RANGE}")
    else:
        return value
    return 0


def _update_config(value: object, at: _At) -> UpdateConfig:
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping with keys such as parallelism, not {describe(value)}")
        return UpdateConfig()
    _unknown_keys(value, at, _UPDATE_CONFIG_KEYS)
    d = UpdateConfig()

    def parallelism(v: object, a: _At) -> int:
        return _whole(v, a, minimum=1, default=d.parallelism)

    def order(v: object, a: _At) -> str:
        return _choice(v, a, UPDATE_ORDERS, d.order)

    def deadline(v: object, a: _At) -> float:
        return _duration(v, a, positive=True, default=d.progress_deadline)

    return UpdateConfig(
        parallelism=_optional(value, at, "parallelism", parallelism, d.parallelism),
        delay=_optional(value, at, "delay", _duration, d.delay),
        order=_optional(value, at, "order", order, d.order),
        min_ready_seconds=_optional(value, at, "min_ready_seconds", _duration, d.min_ready_seconds),
        progress_deadline=_optional(value, at, "progress_deadline", deadline, d.progress_deadline),
    )


def _restart_policy(value: object, at: _At) -> RestartPolicy:
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping with keys delay, max_delay and window, not {describe(value)}")
        return RestartPolicy()
    for key in ("condition", "max_attempts"):
        if key in value:
            at.key(value, key).error(
                "is not supported: healerd always restarts a service's containers and never "
                "gives up (restart_policy only sets its backoff: delay, max_delay, window)"
            )
    _unknown_keys(value, at, _RESTART_POLICY_KEYS | {"condition", "max_attempts"})
    d = RestartPolicy()

    def positive(default: float) -> Callable[[object, _At], float]:
        return lambda v, a: _duration(v, a, positive=True, default=default)

    policy = RestartPolicy(
        delay=_optional(value, at, "delay", positive(d.delay), d.delay),
        max_delay=_optional(value, at, "max_delay", positive(d.max_delay), d.max_delay),
        window=_optional(value, at, "window", positive(d.window), d.window),
    )
    if policy.max_delay < policy.delay:
        where = "max_delay" if "max_delay" in value else "delay"
        at.key(value, where).error(
            f"max_delay ({policy.max_delay:g}s) must not be less than delay ({policy.delay:g}s)"
        )
    return policy


def _env_files(value: object, at: _At) -> tuple[str, ...]:
    """Paths only: the values are secrets, read at reconcile time. Here the files must exist,
    parse and (under strict modes) be trusted; errors show the file and line, no value."""
    entries: list[tuple[object, _At]]
    if isinstance(value, LineList):
        entries = [(item, at.item(value, index)) for index, item in enumerate(value)]
    else:
        entries = [(value, at)]
    paths: list[str] = []
    base = at.context.base_dir
    for item, item_at in entries:
        if not isinstance(item, str) or not item:
            item_at.error(f"must be a path or a list of paths, not {describe(item)}")
            continue
        path = Path(item)
        if base is not None and not path.is_absolute():
            path = base / path
        path = Path(posixpath.normpath(path.absolute()))
        if str(path) in paths:
            item_at.error(f"{item!r} is listed twice")
            continue
        paths.append(str(path))
        if at.context.strict_modes and (problem := trust_problem(path, "env file")):
            item_at.error(problem)
            continue
        try:
            read_env_file(path)
        except EnvFileError as exc:
            item_at.error(f"{exc.error.where}: {exc.error.reason}")
    return tuple(paths)


def _replicas(value: object, at: _At) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        at.error(f"must be a whole number, not {describe(value)}")
    elif value < 0:
        at.error("must not be negative")
    else:
        return value
    return 1


def _optional(body: LineDict, at: _At, key: str, check: Callable[[Any, _At], T], default: T) -> T:
    """Null counts as absent, as in Compose, so commented-out lists leave a key empty."""
    value = body.get(key)
    return default if value is None else check(value, at.key(body, key))


def _service(name: str, body: object, at: _At) -> ServiceSpec | None:
    if not isinstance(body, LineDict):
        at.error(f"must be a mapping with at least an 'image', not {describe(body)}")
        return None
    for key in body:
        if key in _REPLACED_KEYS:
            at.key(body, key).error(f"unknown key {key!r}: {_REPLACED_KEYS[key]}")
        elif not (isinstance(key, str) and key.startswith("x-")) and key not in SERVICE_KEYS:
            at.key(body, key).error(unknown_key_reason(key, SERVICE_KEYS))
    if body.get("image") is None:
        at.here("image").error("is required")
    values = {
        key.attr or key.name: _optional(body, at, key.name, key.check, key.default)
        for key in SERVICE_FIELDS
        if key.check is not None
    }
    spec = ServiceSpec(name=name, source_file=at.file, **values)
    if spec.env_files:
        # Errors were reported above; a digest is only taken of files that read cleanly.
        with contextlib.suppress(EnvFileError, OSError):
            spec = dataclasses.replace(spec, env_digest=env_digest(spec))
    if spec.replicas > 1 and spec.has_fixed_host_port:
        at.key(body, "ports").error("a fixed host port allows only one replica")
    update = body.get("update_config")
    if (
        spec.has_fixed_host_port
        and isinstance(update, LineDict)
        and update.get("order") == "start-first"
    ):
        at.key(body, "update_config").key(update, "order").error(
            "start-first cannot work with a fixed host port: two containers cannot hold one "
            "fixed host port: use stop-first"
        )
    return spec


# --- the table of keys ---------------------------------------------------------------------
#
# One entry per key a service file may hold. The checker above reads its keys, checks and
# defaults from here; healerd.config.schema turns the same entries into the JSON Schema
# shipped in config/ and into CONFIG.md, so that the three cannot disagree about fields.


@dataclass(frozen=True)
class Key:
    """One key of a service file (or of a mapping inside one).

    `schema` is the JSON Schema of a value that passes `check`, as closely as JSON Schema
    can say it (checks that span several values, such as a fixed host port with
    replicas > 1, are beyond it). `default` is the model's value when the key is absent or
    null; `example` is YAML for the value. Keys of nested mappings have no `check`: their
    parent's check reads them, and `children` lists them.
    """

    name: str
    type: str
    schema: Mapping[str, Any]
    doc: str
    example: str
    default: Any = None
    check: Callable[[Any, _At], Any] | None = None
    compose: str = ""
    attr: str = ""
    required: bool = False
    children: tuple[Key, ...] = ()


_DURATION_TEXT = rf"^(?:{_NUMBER_RE.pattern}|{_DURATION_RE.pattern})$"
_ZERO_DURATION_TEXT = r"^(?:(?:0+(?:\.0*)?|\.0+)(?:h|ms|m|s|us|µs)?)+$"
DURATION_SCHEMA: Mapping[str, Any] = {
    "anyOf": [
        {"type": "number", "minimum": 0},
        {"type": "string", "pattern": _DURATION_TEXT},
    ]
}
POSITIVE_DURATION_SCHEMA: Mapping[str, Any] = {
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0},
        {
            "type": "string",
            "pattern": _DURATION_TEXT,
            "not": {"pattern": _ZERO_DURATION_TEXT},
        },
    ]
}
_PORT_NUMBER = (
    r"0*(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
)
_PORT_TEXT = (
    rf"^(?:(?:(?:[0-9]{{1,3}}(?:\.[0-9]{{1,3}}){{3}}|\[[0-9a-fA-F:.]+\])?:)?(?:{_PORT_NUMBER})?:)?"
    rf"{_PORT_NUMBER}(?:/(?:[tT][cC][pP]|[uU][dD][pP]))?$"
)
_VOLUME_TARGET = r"/(?=[^:]*[^:/.])[^:]*"  # absolute, and not / itself
_VOLUME_TEXT = (
    rf"^(?:(?:/[^:]*|{_VOLUME_NAME_RE.pattern}):{_VOLUME_TARGET}(?::(?:ro|rw))?|{_VOLUME_TARGET})$"
)
_PAIR_KEY = r"[^=]+"
_NO_RESERVED = rf"(?!{re.escape(RESERVED_LABEL_PREFIX)})"


def _pairs_schema(labels: bool) -> Mapping[str, Any]:
    prefix = _NO_RESERVED if labels else ""
    return {
        "anyOf": [
            {
                "type": "object",
                "propertyNames": {"pattern": f"^{prefix}{_PAIR_KEY}$"},
                "additionalProperties": {"type": ["string", "number", "null"]},
            },
            {
                "type": "array",
                "items": {"type": "string", "pattern": f"^{prefix}{_PAIR_KEY}="},
            },
        ]
    }


_ARGV_SCHEMA: Mapping[str, Any] = {
    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
}
_NETWORK_NAME = {"type": "string", "pattern": f"^{_NETWORK_NAME_RE.pattern}$"}
_STRINGS = {"type": "string"}
_SHELL_TEST = {"type": "string", "pattern": r"\S"}

HEALTHCHECK_FIELDS: tuple[Key, ...] = (
    Key(
        "test",
        "list of strings, or string",
        {
            "anyOf": [
                _SHELL_TEST,
                {
                    "type": "array",
                    "items": [{"const": "CMD"}],
                    "additionalItems": _STRINGS,
                    "minItems": 2,
                },
                {
                    "type": "array",
                    "items": [{"const": "CMD-SHELL"}, _STRINGS],
                    "minItems": 2,
                    "maxItems": 2,
                },
                {"type": "array", "items": [{"const": "NONE"}], "minItems": 1, "maxItems": 1},
            ]
        },
        "The check: [CMD, prog, arg...], [CMD-SHELL, command], [NONE], or a string (run by "
        "the shell, as CMD-SHELL).",
        '["CMD", "wget", "-q", "-O-", "http://127.0.0.1:8080/"]',
        default=(),
        compose="healthcheck.test",
    ),
    Key(
        "interval",
        "duration > 0",
        POSITIVE_DURATION_SCHEMA,
        "Time between checks (the image's, else the engine's 30s, when absent).",
        "5s",
        compose="healthcheck.interval",
    ),
    Key(
        "timeout",
        "duration > 0",
        POSITIVE_DURATION_SCHEMA,
        "How long one check may take.",
        "2s",
        compose="healthcheck.timeout",
    ),
    Key(
        "retries",
        "integer >= 1",
        {"type": "integer", "minimum": 1},
        "Failed checks in a row before the container is unhealthy.",
        "3",
        compose="healthcheck.retries",
    ),
    Key(
        "start_period",
        "duration",
        DURATION_SCHEMA,
        "Time after the start during which failed checks do not count.",
        "10s",
        compose="healthcheck.start_period",
    ),
    Key(
        "disable",
        "boolean",
        {"type": "boolean"},
        "true turns off the image's healthcheck (same as test: [NONE]).",
        "true",
        default=False,
        compose="healthcheck.disable",
    ),
)

_UPDATE_DEFAULTS = UpdateConfig()
UPDATE_CONFIG_FIELDS: tuple[Key, ...] = (
    Key(
        "parallelism",
        "integer >= 1",
        {"type": "integer", "minimum": 1},
        "Containers replaced at a time during a rollout.",
        "2",
        default=_UPDATE_DEFAULTS.parallelism,
        compose="deploy.update_config.parallelism",
    ),
    Key(
        "delay",
        "duration",
        DURATION_SCHEMA,
        "Pause between two steps of a rollout.",
        "5s",
        default=_UPDATE_DEFAULTS.delay,
        compose="deploy.update_config.delay",
    ),
    Key(
        "order",
        "start-first | stop-first",
        {"enum": list(UPDATE_ORDERS)},
        "Start the new container before stopping the old one, or the reverse. A service with "
        "a fixed host port always goes stop-first.",
        "stop-first",
        default=_UPDATE_DEFAULTS.order,
        compose="deploy.update_config.order",
    ),
    Key(
        "min_ready_seconds",
        "duration",
        DURATION_SCHEMA,
        "How long a new container must run (and be healthy, if it has a healthcheck) to count "
        "as ready.",
        "10s",
        default=_UPDATE_DEFAULTS.min_ready_seconds,
        compose="(Kubernetes minReadySeconds)",
    ),
    Key(
        "progress_deadline",
        "duration > 0",
        POSITIVE_DURATION_SCHEMA,
        "A rollout that makes no progress for this long halts (old containers stay).",
        "5m",
        default=_UPDATE_DEFAULTS.progress_deadline,
        compose="(Kubernetes progressDeadlineSeconds)",
    ),
)

_RESTART_DEFAULTS = RestartPolicy()
RESTART_POLICY_FIELDS: tuple[Key, ...] = (
    Key(
        "delay",
        "duration > 0",
        POSITIVE_DURATION_SCHEMA,
        "First backoff before a crashed replica is restarted; it doubles with each crash.",
        "5s",
        default=_RESTART_DEFAULTS.delay,
        compose="deploy.restart_policy.delay",
    ),
    Key(
        "max_delay",
        "duration > 0, >= delay",
        POSITIVE_DURATION_SCHEMA,
        "The longest backoff.",
        "2m",
        default=_RESTART_DEFAULTS.max_delay,
    ),
    Key(
        "window",
        "duration > 0",
        POSITIVE_DURATION_SCHEMA,
        "A replica that runs this long has its backoff reset.",
        "10m",
        default=_RESTART_DEFAULTS.window,
        compose="deploy.restart_policy.window",
    ),
)

SERVICE_FIELDS: tuple[Key, ...] = (
    Key(
        "image",
        "image reference",
        {"type": "string", "pattern": IMAGE_REFERENCE_PATTERN},
        "The image to run, as Docker names it: [registry/]path[:tag][@sha256:digest].",
        "busybox:1.36",
        check=_image,
        default="",
        compose="image",
        required=True,
    ),
    Key(
        "replicas",
        "integer >= 0",
        {"type": "integer", "minimum": 0},
        "How many identical containers to keep running; 0 stops them all.",
        "3",
        check=_replicas,
        default=1,
        compose="deploy.replicas",
    ),
    Key(
        "command",
        "list of strings, or string",
        _ARGV_SCHEMA,
        "Arguments to the entrypoint; a string is split into words as a shell would (without "
        "expanding variables). Absent: the image's CMD.",
        '["httpd", "-f", "-p", "8080"]',
        check=_argv,
        compose="command",
    ),
    Key(
        "entrypoint",
        "list of strings, or string",
        _ARGV_SCHEMA,
        "The program to run, in the same forms as command. Absent: the image's ENTRYPOINT.",
        '["/bin/sh", "-c"]',
        check=_argv,
        compose="entrypoint",
    ),
    Key(
        "environment",
        "mapping, or list of KEY=value",
        _pairs_schema(labels=False),
        "Environment variables. Values are strings or numbers (quote true/false); null or "
        "KEY= gives an empty value. Overrides env_file.",
        "{TZ: UTC, LOG_LEVEL: info}",
        check=_environment,
        default=(),
        compose="environment",
    ),
    Key(
        "env_file",
        "path, or list of paths",
        {
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
            ]
        },
        "Files of KEY=VALUE lines, relative to the service file's directory, read when "
        "containers are created and never logged (see Secrets in README.md). Later files "
        "override earlier ones.",
        "[web.env]",
        check=_env_files,
        default=(),
        compose="env_file",
        attr="env_files",
    ),
    Key(
        "labels",
        "mapping, or list of key=value",
        _pairs_schema(labels=True),
        f"Container labels; keys starting with {RESERVED_LABEL_PREFIX} are reserved.",
        "{team: platform}",
        check=_labels,
        default=(),
        compose="labels",
    ),
    Key(
        "user",
        "string or integer",
        {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^\S+$"}]},
        "User (and group) to run as: name, uid or uid:gid. Absent: the image's USER.",
        '"1000:1000"',
        check=_user,
        compose="user",
    ),
    Key(
        "working_dir",
        "absolute path",
        {"type": "string", "pattern": "^/"},
        "The working directory inside the container. Absent: the image's WORKDIR.",
        "/app",
        check=_working_dir,
        compose="working_dir",
    ),
    Key(
        "volumes",
        "list of SOURCE:TARGET[:ro|rw]",
        {"type": "array", "items": {"type": "string", "pattern": _VOLUME_TEXT}},
        "Mounts, short syntax only: SOURCE is an absolute host path or a volume name, TARGET "
        "an absolute path in the container; a bare /path is an anonymous volume.",
        '["data:/var/lib/app", "/srv/conf:/etc/app:ro"]',
        check=_volumes,
        default=(),
        compose="volumes",
    ),
    Key(
        "ports",
        f"list of {_PORT_FORMAT}",
        {
            "type": "array",
            "items": {
                "anyOf": [
                    {"type": "integer", "minimum": 1, "maximum": 65535},
                    {"type": "string", "pattern": _PORT_TEXT},
                ]
            },
        },
        "Published ports, short syntax only. Without HOST the engine picks a free host port "
        "for each replica; a fixed HOST port allows only one replica and stop-first rollouts.",
        '["8080", "127.0.0.1:8081:80", "9000:9000/udp"]',
        check=_ports,
        default=(),
        compose="ports",
    ),
    Key(
        "networks",
        "list of names, or mapping of names to null",
        {
            "anyOf": [
                {"type": "array", "items": _NETWORK_NAME, "uniqueItems": True},
                {
                    "type": "object",
                    "propertyNames": _NETWORK_NAME,
                    "additionalProperties": {"type": ["object", "null"], "maxProperties": 0},
                },
            ]
        },
        "Existing networks to connect the containers to (healerd does not create them).",
        "[backend]",
        check=_networks,
        default=(),
        compose="networks",
    ),
    Key(
        "mem_limit",
        "size",
        {
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {
                    "type": "string",
                    "pattern": f"^{_SIZE_PATTERN}$",
                    # What parses to 0 bytes: 0, 0Mi, 0.5 (no unit), ...
                    "not": {
                        "pattern": "^(?:0*(?:\\.[0-9]+)?[bB]?|0*(?:\\.0+)?[kmgKMG][iI]?[bB]?)$"
                    },
                },
            ]
        },
        "Memory limit: bytes, or a number with k, m or g (binary units) and an optional b.",
        "256m",
        check=_mem_limit,
        compose="mem_limit",
    ),
    Key(
        "cpus",
        "number > 0",
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0},
                {
                    "type": "string",
                    "pattern": f"^(?:{_NUMBER_RE.pattern})$",
                    "not": {"pattern": r"^0*\.?0*$"},
                },
            ]
        },
        "CPU limit, in CPUs.",
        "0.5",
        check=_cpus,
        compose="cpus",
    ),
    Key(
        "stop_grace_period",
        f"duration <= {MAX_STOP_GRACE_PERIOD:.0f}s",
        {
            "anyOf": [
                {"type": "number", "minimum": 0, "maximum": MAX_STOP_GRACE_PERIOD},
                {"type": "string", "pattern": _DURATION_TEXT},
            ]
        },
        "How long the engine waits after SIGTERM before it kills a container.",
        "30s",
        check=_stop_grace_period,
        default=10.0,
        compose="stop_grace_period",
    ),
    Key(
        "healthcheck",
        "mapping",
        {},
        "The container's healthcheck, overriding the image's. An unhealthy container is "
        "replaced after unhealthy_grace.",
        "{test: [CMD, /bin/check], interval: 5s}",
        check=_healthcheck,
        compose="healthcheck",
        children=HEALTHCHECK_FIELDS,
    ),
    Key(
        "pull_policy",
        "always | missing | never",
        {"enum": [*PULL_POLICIES, "if_not_present"]},
        "When to pull the image: before every container create, only when it is not present "
        "(if_not_present is a synonym), or never.",
        "always",
        check=_pull_policy,
        default="missing",
        compose="pull_policy",
    ),
    Key(
        "unhealthy_grace",
        "duration",
        DURATION_SCHEMA,
        "How long a container may stay unhealthy before healerd replaces it.",
        "30s",
        check=_unhealthy_grace,
        default=0.0,
    ),
    Key(
        "priority",
        "integer",
        {"type": "integer", "minimum": -PRIORITY_RANGE, "maximum": PRIORITY_RANGE},
        "When the host has no room for every container that should start (see the pressure "
        "settings in healerd.yaml), services with a higher priority start first and lower "
        "ones wait. Changing it never replaces containers.",
        "10",
        check=_priority,
        default=0,
    ),
    Key(
        "update_config",
        "mapping",
        {},
        "How a changed spec rolls out to the running containers.",
        "{parallelism: 1, order: stop-first}",
        check=_update_config,
        default=UpdateConfig(),
        compose="deploy.update_config",
        children=UPDATE_CONFIG_FIELDS,
    ),
    Key(
        "restart_policy",
        "mapping",
        {},
        "Backoff for a replica that keeps crashing. healerd always restarts and never gives "
        "up, so Compose's condition and max_attempts are refused.",
        "{delay: 5s, max_delay: 2m}",
        check=_restart_policy,
        default=RestartPolicy(),
        compose="deploy.restart_policy",
        children=RESTART_POLICY_FIELDS,
    ),
)

SERVICE_KEYS = frozenset(key.name for key in SERVICE_FIELDS)
_HEALTHCHECK_KEYS = frozenset(key.name for key in HEALTHCHECK_FIELDS)
_UPDATE_CONFIG_KEYS = frozenset(key.name for key in UPDATE_CONFIG_FIELDS)
_RESTART_POLICY_KEYS = frozenset(key.name for key in RESTART_POLICY_FIELDS)


_Positions = dict[str, tuple[int, int | None]]


def _document(data: object, at: _At) -> tuple[dict[str, ServiceSpec], _Positions]:
    specs: dict[str, ServiceSpec] = {}
    lines: _Positions = {}
    if data is None:
        return specs, lines  # an empty file declares nothing, and that is fine
    if not isinstance(data, LineDict):
        line = data.line if isinstance(data, LineList) else 1
        column = data.column if isinstance(data, LineList) else 1
        at.child("", line, column).error(
            f"must be a mapping with a 'services' key, not {describe(data)}"
        )
        return specs, lines
    for key in data:
        if key != "services" and not (isinstance(key, str) and key.startswith("x-")):
            at.key(data, key).error(unknown_key_reason(key, ["services"]))
    services = data.get("services")
    services_at = at.key(data, "services")
    if services is not None and not isinstance(services, LineDict):
        services_at.error(f"must map service names to services, not {describe(services)}")
    elif services is not None:
        for name, body in services.items():
            name_at = services_at.key(services, name)
            if not isinstance(name, str):
                name_at.error(f"service names must be strings, not {describe(name)} (quote it)")
                continue
            if not SERVICE_NAME_RE.fullmatch(name):
                name_at.error(
                    f"{name!r} is not a valid service name: 1 to 50 letters, digits, '_', '.' "
                    "or '-', starting with a letter or digit"
                )
                continue
            spec = _service(name, body, name_at)
            if spec is None:
                continue
            for other in specs.values():
                if (port := port_clash(other, spec)) is not None:
                    ports_at = name_at.key(body, "ports")
                    ports_at.error(
                        f"{describe_port(port)} is also published by service {other.name!r} "
                        "in this file: two containers cannot hold one fixed host port"
                    )
                    break
            specs[name] = spec
            lines[name] = (name_at.line or 1, name_at.column)
    return specs, lines


def _result(data: object, errors: list[ConfigError], file: str, context: _Context) -> FileResult:
    found = list(errors)
    specs, positions = _document(data, _At(found, file, "", None, None, context))
    lines = {name: line for name, (line, _) in positions.items()}
    columns = {name: col for name, (_, col) in positions.items() if col is not None}
    if found:
        return FileResult(file, None, sort_errors(found), lines, columns)
    return FileResult(file, specs, (), lines, columns)


def parse_service_text(
    text: str, file: str, *, base_dir: Path | None = None, strict_modes: bool = False
) -> FileResult:
    """Checks YAML text as if it were the file `file`; never raises.

    Relative env_file paths start at `base_dir`, by default the directory of `file`.
    """
    data, errors = load_yaml(text, file)
    base = Path(file).parent if base_dir is None else base_dir
    return _result(data, errors, file, _Context(base, strict_modes))


def load_service_file(
    path: Path, display_name: str | None = None, *, strict_modes: bool = False
) -> FileResult:
    """Reads and checks one service file; read errors become ConfigErrors, never exceptions.

    With `strict_modes`, a file (or an env file it names) that others than root or
    healerd's user could write is refused: see healerd.config.trust.
    """
    file = str(path) if display_name is None else display_name
    if strict_modes and (problem := trust_problem(path)):
        return FileResult(file, None, (ConfigError(file, None, "file", problem),))
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            # A file truncated to be rewritten (cp, `>` redirection) is empty for a moment:
            # that must not read as "remove its services". Delete the file for that.
            return FileResult(
                file,
                None,
                (
                    ConfigError(
                        file,
                        None,
                        "file",
                        "empty (still being written?): its services keep their last good state; "
                        "delete the file to remove them, or write `services: {}`",
                    ),
                ),
            )
    data, errors = read_yaml_file(path, file)
    return _result(data, errors, file, _Context(path.parent, strict_modes))
