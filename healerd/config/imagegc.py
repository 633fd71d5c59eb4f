"""The `image_gc:` section of healerd.yaml: when healerd removes images it pulled.

Kubelet's image garbage collection, with kubelet's defaults: when the engine's data root
is at least `high_threshold_percent` full, unused images are removed, oldest first,
until it is at most `low_threshold_percent` full; an image must have been unused for
`min_age` first. Which images may go at all is healerd.core.imagegc's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from healerd.config.errors import describe, unknown_key_reason
from healerd.config.keys import At, Key
from healerd.config.units import format_duration, parse_duration
from healerd.config.yamlload import LineDict


@dataclass(frozen=True)
class ImageGcSettings:
    """Durations in seconds, thresholds in percent of the data root's filesystem."""

    enabled: bool = True
    high_threshold_percent: int = 85
    low_threshold_percent: int = 80
    min_age: float = 120.0
    interval: float = 300.0


_DEFAULTS = ImageGcSettings()


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {describe(value)}")
    return value


def _percent(low: int, high: int) -> Any:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"must be a whole percentage from {low} to {high}, not {value!r}")
        return value

    return check


def _min_age(value: object) -> float:
    return parse_duration(value)


def _interval(value: object) -> float:
    seconds = parse_duration(value)
    if seconds < 1.0:
        raise ValueError("must be at least 1s")
    return seconds


# (name, type, doc, example, parse): the rows of docs/reference/config.md and the checks.
_ROWS: tuple[tuple[str, str, str, str, Any], ...] = (
    (
        "enabled",
        "boolean",
        "false: healerd never removes an image on its own (the auto-updater's trim after "
        "an update included).",
        "false",
        _bool,
    ),
    (
        "high_threshold_percent",
        "integer 1 to 100",
        "When the engine's data root filesystem is at least this full, unused images of "
        "the declared services' repositories (and of images healerd pulled) are removed, "
        "whoever pulled them (kubelet's imageGCHighThresholdPercent).",
        "90",
        _percent(1, 100),
    ),
    (
        "low_threshold_percent",
        "integer 0 to 99, < high_threshold_percent",
        "Images are removed until the filesystem is at most this full "
        "(kubelet's imageGCLowThresholdPercent).",
        "70",
        _percent(0, 99),
    ),
    (
        "min_age",
        "duration 0s to 168h",
        "An image is removed only once healerd has seen it unused this long (kubelet's "
        "imageMinimumGCAge): by the threshold runs and by the trim after an update alike.",
        "10m",
        _min_age,
    ),
    (
        "interval",
        "duration 1s to 168h",
        "How often the disk is checked (kubelet's image GC period).",
        "1m",
        _interval,
    ),
)

IMAGE_GC_CHILDREN: tuple[Key, ...] = tuple(
    Key(name, type, doc, example, default=getattr(_DEFAULTS, name))
    for name, type, doc, example, _ in _ROWS
)
_PARSERS = {name: parse for name, _, _, _, parse in _ROWS}


def check_image_gc(value: Any, at: At) -> ImageGcSettings | None:
    """The section as a mapping from healerd.yaml, or already built (check_settings);
    each bad value is reported under its own key (`image_gc.min_age`)."""
    if isinstance(value, ImageGcSettings):
        fields: dict[Any, Any] = {n: getattr(value, n) for n in _PARSERS}
        body: LineDict | None = None
    elif isinstance(value, dict):
        fields, body = value, value if isinstance(value, LineDict) else None
    else:
        at.error(f"must be a mapping of {', '.join(_PARSERS)}, not {describe(value)}")
        return None

    def at_key(key: object) -> At:
        return at.key(body, key) if body is not None else at.child(key, at.line)

    before = len(at.errors)
    good: dict[str, Any] = {}
    for key, raw in fields.items():
        parse = _PARSERS.get(key) if isinstance(key, str) else None
        if parse is None:
            if not (isinstance(key, str) and key.startswith("x-")):
                at_key(key).error(unknown_key_reason(key, _PARSERS))
            continue
        try:
            good[key] = parse(raw)
        except ValueError as exc:
            at_key(key).error(str(exc))
    settings = ImageGcSettings(**good)
    if (
        "high_threshold_percent" in good or "low_threshold_percent" in good
    ) and settings.low_threshold_percent >= settings.high_threshold_percent:
        key = (
            "low_threshold_percent" if "low_threshold_percent" in good else "high_threshold_percent"
        )
        at_key(key).error(
            f"low_threshold_percent ({settings.low_threshold_percent}) must be below "
            f"high_threshold_percent ({settings.high_threshold_percent})"
        )
    return settings if len(at.errors) == before else None


def describe_image_gc(settings: ImageGcSettings) -> str:
    """One line for the log at start."""
    if not settings.enabled:
        return "image garbage collection off"
    return (
        f"image garbage collection above {settings.high_threshold_percent}% down to "
        f"{settings.low_threshold_percent}% of the data root, images unused "
        f"{format_duration(settings.min_age)}, every {format_duration(settings.interval)}"
    )


__all__ = ["IMAGE_GC_CHILDREN", "ImageGcSettings", "check_image_gc", "describe_image_gc"]
