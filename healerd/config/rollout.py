"""`update_config` and `restart_policy`: how a changed spec rolls out and how a crashing
replica backs off, each mapping with its keys and its check.
"""

from __future__ import annotations

from collections.abc import Callable

from healerd.config.errors import describe
from healerd.config.keys import At, Key, optional, unknown_keys
from healerd.config.units import DURATION_SCHEMA, POSITIVE_DURATION_SCHEMA
from healerd.config.values import MAX_REPLICAS, choice, duration, whole
from healerd.config.yamlload import LineDict
from healerd.model import RestartPolicy, UpdateConfig, UpdateOrder

UPDATE_ORDERS: tuple[str, ...] = tuple(UpdateOrder)

_UPDATE_DEFAULTS = UpdateConfig()
UPDATE_CONFIG_FIELDS: tuple[Key, ...] = (
    Key(
        "parallelism",
        f"integer 1 to {MAX_REPLICAS}",
        "Containers replaced at a time during a rollout.",
        "2",
        schema={"type": "integer", "minimum": 1, "maximum": MAX_REPLICAS},
        default=_UPDATE_DEFAULTS.parallelism,
        compose="deploy.update_config.parallelism",
    ),
    Key(
        "delay",
        "duration <= 168h",
        "Pause between two steps of a rollout.",
        "5s",
        schema=DURATION_SCHEMA,
        default=_UPDATE_DEFAULTS.delay,
        compose="deploy.update_config.delay",
    ),
    Key(
        "order",
        "start-first | stop-first",
        "Start the new container before stopping the old one, or the reverse. A service with "
        "a fixed host port always goes stop-first.",
        "stop-first",
        schema={"enum": list(UPDATE_ORDERS)},
        default=_UPDATE_DEFAULTS.order,
        compose="deploy.update_config.order",
    ),
    Key(
        "min_ready_seconds",
        "duration <= 168h",
        "How long a new container must run (and be healthy, if it has a healthcheck) to count "
        "as ready.",
        "10s",
        schema=DURATION_SCHEMA,
        default=_UPDATE_DEFAULTS.min_ready_seconds,
        compose="(Kubernetes minReadySeconds)",
    ),
    Key(
        "progress_deadline",
        "duration > 0, <= 168h",
        "A rollout that makes no progress for this long halts (old containers stay).",
        "5m",
        schema=POSITIVE_DURATION_SCHEMA,
        default=_UPDATE_DEFAULTS.progress_deadline,
        compose="(Kubernetes progressDeadlineSeconds)",
    ),
)

_RESTART_DEFAULTS = RestartPolicy()
RESTART_POLICY_FIELDS: tuple[Key, ...] = (
    Key(
        "delay",
        "duration > 0, <= 168h",
        "First backoff before a crashed replica is restarted; it doubles with each crash.",
        "5s",
        schema=POSITIVE_DURATION_SCHEMA,
        default=_RESTART_DEFAULTS.delay,
        compose="deploy.restart_policy.delay",
    ),
    Key(
        "max_delay",
        "duration > 0, >= delay, <= 168h",
        "The longest backoff.",
        "2m",
        schema=POSITIVE_DURATION_SCHEMA,
        default=_RESTART_DEFAULTS.max_delay,
    ),
    Key(
        "window",
        "duration > 0, <= 168h",
        "A replica that runs this long has its backoff reset.",
        "10m",
        schema=POSITIVE_DURATION_SCHEMA,
        default=_RESTART_DEFAULTS.window,
        compose="deploy.restart_policy.window",
    ),
)

_UPDATE_CONFIG_KEYS = frozenset(key.name for key in UPDATE_CONFIG_FIELDS)
_RESTART_POLICY_KEYS = frozenset(key.name for key in RESTART_POLICY_FIELDS)


def update_config(value: object, at: At) -> UpdateConfig:
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping with keys such as parallelism, not {describe(value)}")
        return UpdateConfig()
    unknown_keys(value, at, _UPDATE_CONFIG_KEYS)
    d = UpdateConfig()

    def parallelism(v: object, a: At) -> int:
        return whole(v, a, minimum=1, maximum=MAX_REPLICAS, default=d.parallelism)

    def order(v: object, a: At) -> UpdateOrder:
        return UpdateOrder(choice(v, a, UPDATE_ORDERS, d.order))

    def deadline(v: object, a: At) -> float:
        return duration(v, a, positive=True, default=d.progress_deadline)

    return UpdateConfig(
        parallelism=optional(value, at, "parallelism", parallelism, d.parallelism),
        delay=optional(value, at, "delay", duration, d.delay),
        order=optional(value, at, "order", order, d.order),
        min_ready_seconds=optional(value, at, "min_ready_seconds", duration, d.min_ready_seconds),
        progress_deadline=optional(value, at, "progress_deadline", deadline, d.progress_deadline),
    )


def restart_policy(value: object, at: At) -> RestartPolicy:
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping with keys delay, max_delay and window, not {describe(value)}")
        return RestartPolicy()
    for key in ("condition", "max_attempts"):
        if key in value:
            at.key(value, key).error(
                "is not supported: healerd always restarts a service's containers and never "
                "gives up (restart_policy only sets its backoff: delay, max_delay, window)"
            )
    unknown_keys(value, at, _RESTART_POLICY_KEYS | {"condition", "max_attempts"})
    d = RestartPolicy()

    def positive(default: float) -> Callable[[object, At], float]:
        return lambda v, a: duration(v, a, positive=True, default=default)

    policy = RestartPolicy(
        delay=optional(value, at, "delay", positive(d.delay), d.delay),
        max_delay=optional(value, at, "max_delay", positive(d.max_delay), d.max_delay),
        window=optional(value, at, "window", positive(d.window), d.window),
    )
    if policy.max_delay < policy.delay:
        where = "max_delay" if "max_delay" in value else "delay"
        at.key(value, where).error(
            f"max_delay ({policy.max_delay:g}s) must not be less than delay ({policy.delay:g}s)"
        )
    return policy
