"""The check of each healerd.yaml value: what it must be, and the value it becomes.

Each raises ValueError with the reason an operator reads next to the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from healerd.config.errors import (
    describe,
)
from healerd.config.units import format_duration, parse_duration, parse_size
from healerd.model import Threshold

LOG_LEVELS = ("debug", "info", "warning", "error")
MAX_WORKERS = 64
MAX_HISTORY = 10
MAX_CALLS = 1_000_000  # engine_calls_per_second and engine_call_burst
# A group name as useradd/groupadd take it (Debian's default NAME_REGEX, and `$`).
GROUP_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,30}\$?")


def engine_address(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError("must be an engine address such as unix:///var/run/docker.sock")
    return value


def absolute_path(value: object) -> Path:
    if not isinstance(value, str | Path) or not str(value).startswith("/"):
        raise ValueError(f"must be an absolute path, not {value!r}")
    return Path(value)


def optional_path(value: object) -> Path | None:
    return None if value is None else absolute_path(value)


def _at_least(minimum: float) -> Callable[[object], float]:
    """A duration check: above 0, at least `minimum`, at most units.MAX_DURATION. A
    resync or timeout of a microsecond would be a busy loop, not a setting."""

    def check(value: object) -> float:
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError("must be greater than 0")
        if seconds < minimum:
            raise ValueError(f"must be at least {format_duration(minimum)}")
        return seconds

    return check


interval = _at_least(1.0)
backoff_seconds = _at_least(0.001)


def worker_count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise ValueError(f"must be a whole number from 1 to {MAX_WORKERS}, not {value!r}")
    return value


def group_name(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not GROUP_NAME_RE.fullmatch(value):
        raise ValueError(f"must be a group name such as healerd-logs, not {value!r}")
    return value


def history_limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_HISTORY:
        raise ValueError(f"must be a whole number from 0 to {MAX_HISTORY}, not {value!r}")
    return value


def boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {value!r}")
    return value


def threshold(value: object) -> Threshold:
    """A percentage such as 10% of the total, or an amount such as 100Mi (or a count)."""
    if isinstance(value, Threshold):
        return value
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            pct = float(value.strip()[:-1])
        except ValueError:
            raise ValueError(f"{value!r} is not a percentage such as 10%") from None
        if not 0 <= pct < 100:
            raise ValueError("a percentage must be from 0% to below 100%")
        return Threshold(pct, percent=True)
    if value == 0:
        return Threshold(0.0)
    try:
        return Threshold(float(parse_size(value)))
    except ValueError as exc:
        raise ValueError(
            f"must be a percentage such as 10% or an amount such as 100Mi: {exc}"
        ) from None


def size(value: object) -> int:
    return parse_size(value) if not isinstance(value, int) or value else 0


def rate(value: object) -> float:
    # Below 1 call/s a single heal (list, create, start) would wait for seconds per call,
    # and a queue of waiting workers for minutes: the cap would hurt more than the storm.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= MAX_CALLS:
        raise ValueError(
            f"must be a number of calls per second from 1 to {MAX_CALLS}, not {value!r}"
        )
    return float(value)


def burst(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CALLS:
        raise ValueError(f"must be a whole number of calls from 1 to {MAX_CALLS}, not {value!r}")
    return value


MAX_VARIABLES = 1000
_VARIABLE = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")


def variable_names(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or len(value) > MAX_VARIABLES:
        raise ValueError(f"must be a list of at most {MAX_VARIABLES} variable names")
    for name in value:
        if not isinstance(name, str) or not _VARIABLE.fullmatch(name):
            shown = repr(name)[:60] if isinstance(name, str) else describe(name)
            raise ValueError(f"{shown} is not a variable name (letters, digits and _)")
    return tuple(dict.fromkeys(value))


def log_level(value: object) -> str:
    if not isinstance(value, str) or value.lower() not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, not {value!r}")
    return value.lower()
