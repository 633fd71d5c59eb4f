"""Lifecycle hooks: Compose's `post_start` and `pre_stop`, and x-healerd's `pre_update`.

Each is a list of hooks, as the Compose specification writes them: a mapping with a
`command` (a list, or a string split into words as `command` is) and optionally `user`,
`privileged`, `working_dir` and `environment` (a mapping or a list of KEY=value, added
to the container's own). The checks are the service's own keys' checks, so that a hook
reads as the service does; healerd.core.hooks runs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from healerd.config.errors import describe
from healerd.config.keys import MAX_ENTRIES, At, Key, optional, unknown_keys
from healerd.config.pairs import environment, pairs_schema
from healerd.config.units import format_duration
from healerd.config.values import argv, boolean, user, working_dir
from healerd.config.yamlload import LineDict, LineList
from healerd.model import HOOK_TIMEOUT, PRE_STOP_FLOOR, Hook

_USER_SCHEMA = {
    "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^\S+$"}]
}


def hook_fields(parent: str) -> tuple[Key, ...]:
    """The keys of one hook of `parent` (post_start, pre_stop: Compose's; pre_update:
    healerd's own, no Compose field)."""
    compose = f"{parent}.{{}}" if parent in ("post_start", "pre_stop") else ""
    return (
        Key(
            "command",
            "list of strings, or string",
            "The command to run in the container (required); a string is split into words "
            "as the service's command is.",
            '["/bin/sh", "-c", "echo ready > /tmp/ready"]',
            schema={
                "anyOf": [
                    {"type": "string", "pattern": r"\S"},
                    {"type": "array", "items": {"type": "string"}, "minItems": 1},
                ]
            },
            compose=compose.format("command"),
            required=True,
        ),
        Key(
            "user",
            "string or integer",
            "The user to run it as (name, uid or uid:gid). Absent: the container's user.",
            "root",
            schema=_USER_SCHEMA,
            compose=compose.format("user"),
        ),
        Key(
            "privileged",
            "boolean",
            "Run it with extended privileges.",
            "true",
            schema={"type": "boolean"},
            default=False,
            compose=compose.format("privileged"),
        ),
        Key(
            "working_dir",
            "absolute path",
            "Where it runs. Absent: the container's working directory.",
            "/app",
            schema={"type": "string", "pattern": "^/"},
            compose=compose.format("working_dir"),
        ),
        Key(
            "environment",
            "mapping, or list of KEY=value",
            "Variables added to (or overriding) the container's own environment for this "
            "command. No log line or event shows their values.",
            "{MODE: drain}",
            schema=pairs_schema(labels=False),
            default=(),
            compose=compose.format("environment"),
        ),
    )


HOOK_FIELDS = hook_fields("post_start")
_HOOK_KEYS = frozenset(key.name for key in HOOK_FIELDS)
_REQUIRED = tuple(key.name for key in HOOK_FIELDS if key.required)


def hooks_schema() -> Mapping[str, Any]:
    """A list of hooks, each a mapping of HOOK_FIELDS (command required)."""
    return {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {key.name: dict(key.schema) for key in HOOK_FIELDS},
            "required": list(_REQUIRED),
            "patternProperties": {"^x-": {}},
            "additionalProperties": False,
        },
        "maxItems": MAX_ENTRIES,
    }


def _hook(value: object, at: At) -> Hook | None:
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping with at least a command, not {describe(value)}")
        return None
    unknown_keys(value, at, _HOOK_KEYS)
    command = value.get("command")
    if command is None:
        at.here("command").error("is required")
        return None
    words = argv(command, at.key(value, "command"))
    if words is not None and not words:
        at.key(value, "command").error("must not be empty")
    return Hook(
        command=words or (),
        user=optional(value, at, "user", user, None),
        privileged=optional(value, at, "privileged", boolean, False),
        working_dir=optional(value, at, "working_dir", working_dir, None),
        environment=optional(value, at, "environment", environment, ()),
    )


def hooks(value: object, at: At) -> tuple[Hook, ...]:
    """A list of hooks (post_start, pre_stop, x-healerd's pre_update), in order."""
    if not isinstance(value, LineList):
        at.error(f"must be a list of hooks such as [{{command: [...]}}], not {describe(value)}")
        return ()
    if len(value) > MAX_ENTRIES:
        at.error(f"has {len(value)} entries; at most {MAX_ENTRIES} are allowed")
        return ()
    found = (_hook(item, at.item(value, index)) for index, item in enumerate(value))
    return tuple(hook for hook in found if hook is not None)


_TIMEOUT = format_duration(HOOK_TIMEOUT)
_FAILED = (
    "A hook that exits non-zero or passes its time is logged, with its exit code and last "
    "lines of output (the service's and the hook's environment values masked), and "
    "recorded as a hook-failed event; the hooks after it do not run."
)

HOOK_SERVICE_FIELDS: tuple[Key, ...] = (
    Key(
        "post_start",
        "list of hooks",
        "Commands run in each container healerd starts (created, or started again in "
        "place), one after the other, once the start is done and reported (a heal does "
        f"not wait for them), all within {_TIMEOUT}. {_FAILED} The container keeps "
        "running, as with docker compose. Not run when the engine restarts a container "
        "by itself (its restart policy, while healerd is stopped). Changing them replaces "
        "the containers, as in Compose.",
        '[{command: [/bin/sh, -c, "echo ready > /tmp/ready"], user: root}]',
        schema=hooks_schema(),
        check=hooks,
        default=(),
        compose="post_start",
        children=hook_fields("post_start"),
    ),
    Key(
        "pre_stop",
        "list of hooks",
        "Commands run in a running container before healerd stops or removes it (fewer "
        "replicas, a rollout, a replacement, replicas: 0; not a service no longer declared), one "
        "after the other, all within stop_grace_period (at least "
        f"{format_duration(PRE_STOP_FLOOR)}); the stop then has its own stop_grace_period. "
        f"{_FAILED} The stop goes on either way. Not run for a container that stopped by "
        "itself (a crash, docker kill). Changing them replaces no container: the next "
        "stop runs the new ones.",
        "[{command: [/usr/local/bin/drain], environment: {MODE: fast}}]",
        schema=hooks_schema(),
        check=hooks,
        default=(),
        compose="pre_stop",
        children=hook_fields("pre_stop"),
    ),
)

__all__ = ["HOOK_FIELDS", "HOOK_SERVICE_FIELDS", "hook_fields", "hooks", "hooks_schema"]
