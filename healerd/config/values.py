"""Checks of single values: the shared building blocks (string, whole number, choice,
duration) and the checks of the service keys whose value needs no module of its own.

Each reports through an At and returns a usable value even after an error, so that the
checks that span keys still run and every error of a file is found in one pass.
"""

from __future__ import annotations

import math
import posixpath
import re
import shlex

from healerd.config.errors import describe
from healerd.config.imageref import image_reference_problem
from healerd.config.keys import At
from healerd.config.units import NUMBER_RE, format_duration, parse_duration, parse_size
from healerd.config.yamlload import LineDict, LineList
from healerd.model import PullPolicy

MAX_STOP_GRACE_PERIOD = 3600.0
PULL_POLICIES: tuple[str, ...] = tuple(PullPolicy)
PRIORITY_RANGE = 1_000_000
# Bounds of the service keys that are quantities (durations: units.MAX_DURATION).
MAX_REPLICAS = 1000
# Docker refuses fewer than 0.01 CPUs (and turns less than 1e-9 into no limit at all).
MIN_CPUS = 0.01
MAX_CPUS = 1024.0
# Docker refuses a memory limit below 6 MiB at every create.
MIN_MEM_LIMIT = 6 * 2**20
# Docker's rule for network names (one character is enough, unlike volumes).
NETWORK_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")


def string(value: object, at: At) -> str | None:
    if isinstance(value, str):
        return value
    at.error(f"must be a string, not {describe(value)}")
    return None


def boolean(value: object, at: At) -> bool:
    if isinstance(value, bool):
        return value
    at.error(f"must be true or false, not {describe(value)}")
    return False


def whole(value: object, at: At, *, minimum: int, default: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        at.error(f"must be a whole number, not {describe(value)}")
    elif value < minimum:
        at.error(f"must be at least {minimum}")
    elif maximum is not None and value > maximum:
        at.error(f"must be at most {maximum}")
    else:
        return value
    return default


def choice(value: object, at: At, choices: tuple[str, ...], default: str) -> str:
    if isinstance(value, str) and value in choices:
        return value
    at.error(f"must be one of {', '.join(choices)}, not {value!r}")
    return default


def duration(
    value: object, at: At, *, positive: bool = False, minimum: float = 0.0, default: float = 0.0
) -> float:
    """A duration up to units.MAX_DURATION; `positive`: above 0; `minimum`: 0 or at least
    that (with `positive`, at least that)."""
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        at.error(str(exc))
        return default
    if positive and seconds <= 0:
        at.error("must be greater than 0")
        return default
    if seconds and seconds < minimum:
        zero = "" if positive else "0 or "
        at.error(f"must be {zero}at least {format_duration(minimum)}")
        return default
    return seconds


def image(value: object, at: At) -> str:
    text = string(value, at)
    if text is not None and (problem := image_reference_problem(text)):
        at.error(f"{text!r} is not an image reference such as busybox:1.36: {problem}")
    return text or ""


def argv(value: object, at: At) -> tuple[str, ...] | None:
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


def user(value: object, at: At) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    name = string(value, at)
    if name is not None and (not name or any(c.isspace() for c in name)):
        at.error("must be a user name or id such as 1000 or 1000:1000")
    return name


def working_dir(value: object, at: At) -> str | None:
    path = string(value, at)
    if path is None:
        return None
    if not path.startswith("/"):
        at.error(f"{path!r} must be an absolute path")
    return posixpath.normpath(path)


# What a service may say of each of its networks (checked by healerd.config.netopts).
NETWORK_ENDPOINT_KEYS = ("aliases", "ipv4_address", "ipv6_address", "link_local_ips", "priority")


def networks(value: object, at: At) -> tuple[str, ...]:
    """Networks are a set; sorted so that reordering them never replaces containers."""
    entries: list[tuple[object, At]] = []
    if isinstance(value, LineList):
        entries = [(name, at.item(value, index)) for index, name in enumerate(value)]
    elif isinstance(value, LineDict):
        for name, options in value.items():
            entries.append((name, at.key(value, name)))
            if isinstance(options, LineDict):
                for key in options:
                    if key not in NETWORK_ENDPOINT_KEYS:
                        entries[-1][1].key(options, key).error(
                            f"{key!r} is not supported (supported: "
                            f"{', '.join(NETWORK_ENDPOINT_KEYS)})"
                        )
            elif options is not None:
                entries[-1][1].error(f"must be a mapping with aliases, not {describe(options)}")
    else:
        at.error(f"must be a list of network names, not {describe(value)}")
    names: set[str] = set()
    for name, name_at in entries:
        if not isinstance(name, str) or not NETWORK_NAME_RE.fullmatch(name):
            name_at.error(f"{name!r} is not a valid network name")
        elif name in names:
            name_at.error(f"network {name!r} is listed twice")
        else:
            names.add(name)
    return tuple(sorted(names))


def mem_limit(value: object, at: At) -> int | None:
    try:
        size = parse_size(value)
    except ValueError as exc:
        at.error(str(exc))
        return None
    if size < MIN_MEM_LIMIT:
        at.error(f"must be at least 6m: Docker refuses a smaller memory limit, not {value!r}")
        return None
    return size


def cpus(value: object, at: At) -> float | None:
    number = math.nan
    if isinstance(value, str) and NUMBER_RE.fullmatch(value):  # Compose docs quote cpus
        number = float(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value) if abs(value) < 1e300 else math.inf
    if not math.isfinite(number) or number <= 0:
        at.error(f"must be a number of CPUs greater than 0, such as 0.5, not {value!r}")
        return None
    if not MIN_CPUS <= number <= MAX_CPUS:
        at.error(f"must be from {MIN_CPUS:g} to {MAX_CPUS:g} CPUs, not {value!r}")
        return None
    return number


def stop_grace_period(value: object, at: At) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        at.error(str(exc))
        return 10.0
    if seconds > MAX_STOP_GRACE_PERIOD:
        at.error(f"must be at most {MAX_STOP_GRACE_PERIOD:.0f}s")
    return seconds


def pull_policy(value: object, at: At) -> PullPolicy:
    if value == "if_not_present":  # Compose's other name for missing
        return PullPolicy.MISSING
    return PullPolicy(choice(value, at, PULL_POLICIES, "missing"))


def unhealthy_grace(value: object, at: At) -> float:
    return duration(value, at)


def priority(value: object, at: At) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        at.error(f"must be a whole number, not {describe(value)}")
    elif abs(value) > PRIORITY_RANGE:
        at.error(f"must be from -{PRIORITY_RANGE} to {PRIORITY_RANGE}")
    else:
        return value
    return 0


def replicas(value: object, at: At) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        at.error(f"must be a whole number, not {describe(value)}")
    elif value < 0:
        at.error("must not be negative")
    elif value > MAX_REPLICAS:
        at.error(f"must be at most {MAX_REPLICAS}")
    else:
        return value
    return 1
