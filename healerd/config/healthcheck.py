"""`healthcheck`: Compose's healthcheck mapping, its keys and its check."""

from __future__ import annotations

from typing import Any

from healerd.config.errors import describe
from healerd.config.keys import At, Key, optional, unknown_keys
from healerd.config.units import duration_schema
from healerd.config.values import boolean, duration, whole
from healerd.config.yamlload import LineDict, LineList
from healerd.model import HealthcheckSpec

_HEALTHCHECK_KINDS = ("CMD", "CMD-SHELL", "NONE")
# A check more often than once a second (or one given less than a second) is a typo for
# seconds, and an exec storm in the container: interval and timeout are at least this,
# start_period is 0 or at least this. All are at most units.MAX_DURATION.
MIN_HEALTHCHECK_TIME = 1.0
MAX_RETRIES = 100
_HEALTHCHECK_TIME_SCHEMA = duration_schema(positive=True, minimum=MIN_HEALTHCHECK_TIME)
_START_PERIOD_SCHEMA = duration_schema(minimum=MIN_HEALTHCHECK_TIME)
_STRINGS = {"type": "string"}
_SHELL_TEST = {"type": "string", "pattern": r"\S"}

HEALTHCHECK_FIELDS: tuple[Key, ...] = (
    Key(
        "test",
        "list of strings, or string",
        "The check: [CMD, prog, arg...], [CMD-SHELL, command], [NONE], or a string (run by "
        "the shell, as CMD-SHELL).",
        '["CMD", "wget", "-q", "-O-", "http://127.0.0.1:8080/"]',
        schema={
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
        default=(),
        compose="healthcheck.test",
    ),
    Key(
        "interval",
        "duration 1s to 168h",
        "Time between checks (the image's, else the engine's 30s, when absent).",
        "5s",
        schema=_HEALTHCHECK_TIME_SCHEMA,
        compose="healthcheck.interval",
    ),
    Key(
        "timeout",
        "duration 1s to 168h",
        "How long one check may take.",
        "2s",
        schema=_HEALTHCHECK_TIME_SCHEMA,
        compose="healthcheck.timeout",
    ),
    Key(
        "retries",
        f"integer 1 to {MAX_RETRIES}",
        "Failed checks in a row before the container is unhealthy.",
        "3",
        schema={"type": "integer", "minimum": 1, "maximum": MAX_RETRIES},
        compose="healthcheck.retries",
    ),
    Key(
        "start_period",
        "duration: 0, or 1s to 168h",
        "Time after the start during which failed checks do not count.",
        "10s",
        schema=_START_PERIOD_SCHEMA,
        compose="healthcheck.start_period",
    ),
    Key(
        "disable",
        "boolean",
        "true turns off the image's healthcheck (same as test: [NONE]).",
        "true",
        schema={"type": "boolean"},
        default=False,
        compose="healthcheck.disable",
    ),
)
_HEALTHCHECK_KEYS = frozenset(key.name for key in HEALTHCHECK_FIELDS)


def _test(value: object, at: At) -> tuple[str, ...]:
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


def healthcheck(value: object, at: At) -> HealthcheckSpec | None:
    """Compose's healthcheck; disabled in either spelling becomes one canonical value."""
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping with keys such as test and interval, not {describe(value)}")
        return None
    unknown_keys(value, at, _HEALTHCHECK_KEYS)
    no_test: tuple[str, ...] = ()
    test = optional(value, at, "test", _test, no_test)
    disable = optional(value, at, "disable", boolean, False)
    timing: dict[str, Any] = {}
    for key in ("interval", "timeout", "start_period"):
        if value.get(key) is not None:
            positive = key != "start_period"
            timing[key] = duration(
                value[key], at.key(value, key), positive=positive, minimum=MIN_HEALTHCHECK_TIME
            )
    if value.get("retries") is not None:
        retries_at = at.key(value, "retries")
        timing["retries"] = whole(
            value["retries"], retries_at, minimum=1, maximum=MAX_RETRIES, default=1
        )
    if disable and test not in ((), ("NONE",)):
        at.key(value, "disable").error("contradicts the test: leave out one of them")
    if disable or test == ("NONE",):
        return HealthcheckSpec(test=("NONE",), disable=True)
    spec = HealthcheckSpec(test=test, **timing)
    return None if spec == HealthcheckSpec() else spec
