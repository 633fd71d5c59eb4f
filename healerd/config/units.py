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


DURATION_TEXT = rf"^(?:{NUMBER_RE.pattern}|{_DURATION_RE.pattern})$"
_ZERO_DURATION_TEXT = r"^(?:(?:0+(?:\.0*)?|\.0+)(?:h|ms|m|s|us|µs)?)+$"
DURATION_SCHEMA: Mapping[str, Any] = {
    "anyOf": [
        {"type": "number", "minimum": 0},
        {"type": "string", "pattern": DURATION_TEXT},
    ]
}
POSITIVE_DURATION_SCHEMA: Mapping[str, Any] = {
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0},
        {
            "type": "string",
            "pattern": DURATION_TEXT,
            "not": {"pattern": _ZERO_DURATION_TEXT},
        },
    ]
}
