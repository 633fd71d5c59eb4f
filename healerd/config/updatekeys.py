"""The update keys of `x-healerd:` and of healerd.yaml's `updates:` (their defaults):
`update_window`, `update_delay`, `update_lock` (healerd.model.updatepolicy)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from healerd.config.errors import describe, unknown_key_reason
from healerd.config.keys import At
from healerd.config.values import duration
from healerd.config.yamlload import LineDict
from healerd.model import ServiceSpec
from healerd.model.updatepolicy import DAYS, WEEK, UpdatePolicy, UpdateWindow
from healerd.vocabulary import AutoUpdate

AUTO_UPDATE_MODES = tuple(m.value for m in AutoUpdate if m is not AutoUpdate.NEVER)

_WINDOW_RE = re.compile(r"\s*(?:(?P<days>[A-Za-z][A-Za-z,.\- ]*?)\s+)?(?P<span>\S+)\s*")
_SPAN_RE = re.compile(r"([0-9]{1,2}):([0-9]{2})-([0-9]{1,2}):([0-9]{2})")
WINDOW_EXAMPLE = '"Sat,Sun 02:00-05:00"'


def _day(word: str) -> int:
    w = word.strip()[:3].capitalize()
    if w not in DAYS or len(word.strip()) < 3:
        raise ValueError(f"{word.strip()!r} is not a day (Mon, Tue, ... Sun)")
    return DAYS.index(w)


def _days(text: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        first, sep, last = part.replace("..", "-").partition("-")
        a = _day(first)
        b = _day(last) if sep else a
        out.update((a + i) % 7 for i in range((b - a) % 7 + 1))
    return frozenset(out)


def parse_window(text: str) -> UpdateWindow:
    """`[DAYS ]HH:MM-HH:MM` in local time; DAYS such as `Sat,Sun`, `Mon-Fri` or
    `Mon..Fri` (systemd's calendar spelling). Raises ValueError (a sentence's end)."""
    m = _WINDOW_RE.fullmatch(text)
    span = _SPAN_RE.fullmatch(m.group("span")) if m else None
    if m is None or span is None:
        raise ValueError(f"{text!r} is not a window such as {WINDOW_EXAMPLE} or 22:00-04:00")
    h1, m1, h2, m2 = (int(g) for g in span.groups())
    if h1 > 23 or m1 > 59 or h2 > 24 or m2 > 59 or (h2 == 24 and m2):
        raise ValueError(f"{text!r}: the hours are 00:00 to 24:00")
    start, end = h1 * 60 + m1, h2 * 60 + m2
    if start == end:
        raise ValueError(f"{text!r}: the window begins where it ends (for any time, leave it out)")
    days = _days(m.group("days")) if m.group("days") else WEEK
    return UpdateWindow(days, start, end % (24 * 60) if end != 24 * 60 else end, text.strip())


def windows(value: object, at: At) -> tuple[UpdateWindow, ...] | None:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        at.error(
            f"must be a window such as {WINDOW_EXAMPLE} or a list of them, not {describe(value)}"
        )
        return None
    out = []
    for item in items:
        if not isinstance(item, str):
            at.error(f"must be a window such as {WINDOW_EXAMPLE}, not {describe(item)}")
            continue
        try:
            out.append(parse_window(item))
        except ValueError as exc:
            at.error(str(exc))
    return tuple(out) if len(out) == len(items) else None


def lock_path(value: object, at: At) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        at.error(
            "must be an absolute path in the container, such as /run/lock/app.update, "
            f"not {describe(value)}"
        )
        return ""
    return value


def update_policy(value: object, at: At) -> UpdatePolicy:
    """The update keys of a mapping (x-healerd, or healerd.yaml's updates); what it does
    not say stays None (the default applies)."""
    if not isinstance(value, dict):
        return UpdatePolicy()

    def where(key: str) -> At:
        return at.key(value, key) if isinstance(value, LineDict) else at.child(key, at.line)

    found = UpdatePolicy()
    if value.get("update_window") is not None:
        found = replace(found, windows=windows(value["update_window"], where("update_window")))
    if value.get("update_delay") is not None:
        found = replace(found, delay=duration(value["update_delay"], where("update_delay")))
    if value.get("update_lock") is not None:
        found = replace(found, lock=lock_path(value["update_lock"], where("update_lock")))
    return found


def mode(value: object, at: At) -> AutoUpdate:
    """`auto_update`: NEVER when absent (a default may apply), DISABLED when said."""
    if value is None:
        return AutoUpdate.NEVER
    if value not in AUTO_UPDATE_MODES:
        at.error(
            "must be registry (follow the tag's digest and roll out), notify (tell of a new "
            f"digest only) or disabled, not {describe(value)}"
        )
        return AutoUpdate.NEVER
    return AutoUpdate(value)


@dataclass(frozen=True)
class UpdateDefaults:
    """healerd.yaml's `updates:`: what a service's x-healerd does not say."""

    auto_update: AutoUpdate = AutoUpdate.NEVER
    policy: UpdatePolicy = field(default_factory=UpdatePolicy)


SECTION_KEYS = ("auto_update", "update_window", "update_delay", "update_lock")


def check_update_defaults(value: Any, at: At) -> UpdateDefaults | None:
    """The `updates:` section as a mapping from healerd.yaml, or already built."""
    if isinstance(value, UpdateDefaults):
        return value
    if value is None:
        return UpdateDefaults()
    if not isinstance(value, dict):
        at.error(f"must be a mapping of {', '.join(SECTION_KEYS)}, not {describe(value)}")
        return None
    before = len(at.errors)
    for key in value:
        if key not in SECTION_KEYS and not (isinstance(key, str) and key.startswith("x-")):
            where = at.key(value, key) if isinstance(value, LineDict) else at.child(key, at.line)
            where.error(unknown_key_reason(key, SECTION_KEYS))
    where = at.key(value, "auto_update") if isinstance(value, LineDict) else at
    found = UpdateDefaults(mode(value.get("auto_update"), where), update_policy(value, at))
    return found if len(at.errors) == before else None


def with_defaults(spec: ServiceSpec, defaults: UpdateDefaults) -> ServiceSpec:
    """`spec` with what its x-healerd does not say of updates taken from healerd.yaml. A
    service that builds its image has no tag in a registry to follow."""
    mode_ = spec.auto_update if spec.auto_update is not AutoUpdate.NEVER else defaults.auto_update
    if spec.build is not None:
        mode_ = spec.auto_update
    policy = spec.update_policy.over(defaults.policy)
    if mode_ is spec.auto_update and policy == spec.update_policy:
        return spec
    return replace(spec, auto_update=mode_, update_policy=policy)


__all__ = [
    "AUTO_UPDATE_MODES",
    "SECTION_KEYS",
    "WINDOW_EXAMPLE",
    "UpdateDefaults",
    "check_update_defaults",
    "lock_path",
    "mode",
    "parse_window",
    "update_policy",
    "windows",
    "with_defaults",
]
