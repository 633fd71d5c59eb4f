"""Durations and sizes, written as Compose and Docker write them, and their JSON Schema forms.

Service files and healerd.yaml share these, so `10s` or `256m` means the same everywhere.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from healerd.config.errors import describe

NUMBER_RE = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_DURATION_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(h|ms|m|s|us|µs)")
_DURATION_RE = re.compile(f"(?:{_DURATION_PART_RE.pattern})+")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
SIZE_PATTERN = r"([0-9]+(?:\.[0-9]+)?)(?:([kmgKMG])[iI]?)?[bB]?"
_SIZE_RE = re.compile(SIZE_PATTERN)
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
# The longest duration any key takes: a week. Longer is a mistake (and 1e300 seconds
# overflows the engine's nanoseconds and Python's timedelta).
MAX_DURATION = 7 * 24 * 3600.0


def parse_duration(value: object) -> float:
    """Seconds from a number or a Go-style string such as 1m30s, as Compose writes durations.

    Raises ValueError whose message completes a sentence about the field.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a duration such as 10s, 1m30s or 500ms, not {describe(value)}")
    if isinstance(value, str):
        if NUMBER_RE.fullmatch(value):
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
    if seconds > MAX_DURATION:
        raise ValueError(f"must be at most {format_duration(MAX_DURATION)} (a week)")
    return seconds


def format_duration(seconds: float) -> str:
    """10.0 -> 10s, 600.0 -> 10m, 0.25 -> 250ms: how the docs and messages write durations."""
    if seconds == 0:
        return "0s"
    for unit, size in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and math.isclose(seconds / size, round(seconds / size)):
            return f"{round(seconds / size)}{unit}"
    return f"{round(seconds * 1000)}ms"


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


DURATION_TEXT = rf"^(?:{NUMBER_RE.pattern}|{_DURATION_RE.pattern})$"
_ZERO_DURATION_TEXT = r"^(?:(?:0+(?:\.0*)?|\.0+)(?:h|ms|m|s|us|µs)?)+$"


def duration_schema(*, positive: bool = False, minimum: float = 0.0) -> Mapping[str, Any]:
    """The JSON Schema of a duration, bounded as values.duration bounds it. Numbers are
    bounded exactly; of strings, a pattern can refuse only zero, not compare amounts."""
    number: dict[str, Any] = {"type": "number"}
    if positive and not minimum:
        number["exclusiveMinimum"] = 0
    else:
        number["minimum"] = minimum if positive else 0
    number["maximum"] = MAX_DURATION
    string: dict[str, Any] = {"type": "string", "pattern": DURATION_TEXT}
    if positive:
        string["not"] = {"pattern": _ZERO_DURATION_TEXT}
    if minimum and not positive:
        number["not"] = {"exclusiveMinimum": 0, "exclusiveMaximum": minimum}
    return {"anyOf": [number, string]}


DURATION_SCHEMA = duration_schema()
POSITIVE_DURATION_SCHEMA = duration_schema(positive=True)
