"""Compose's `deploy`, `scale` and `gpus` (issue 16): spellings of settings a service
has anyway, on one engine.

- `deploy.replicas` and `scale` are `replicas`; `deploy.update_config` and
  `deploy.restart_policy` are healerd's own `update_config` and `restart_policy` (with
  their keys), but for `restart_policy.condition` and `max_attempts`, which are
  `restart` as docker-compose reads them on one engine (`any`: healerd's healing,
  `none`: "no", `on-failure` with `max_attempts: N`: on-failure:N).
- `deploy.resources.limits` `cpus`, `memory`, `pids` are `cpus`, `mem_limit`,
  `pids_limit`; `reservations.memory` is `mem_reservation`; `reservations.devices` and
  `gpus` become the engine's DeviceRequests (GPUs), as Compose sends them.
- Two spellings of one setting that disagree (`replicas: 2` and `deploy.replicas: 3`)
  are an error naming both; equal ones are fine.
- `deploy.labels` label the Swarm service, not its containers: on one engine Compose
  ignores them, and so does healerd (accepted, checked as labels).
- `deploy.mode: global`, `placement`, `endpoint_mode`, `rollback_config`,
  `reservations.cpus` and `generic_resources` need a Swarm (or a scheduler): each is an
  error saying why. `mode: replicated` is what a service is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from healerd.config import hostchecks as hc
from healerd.config.errors import describe
from healerd.config.keys import At
from healerd.config.pairs import labels
from healerd.config.rollout import restart_policy, update_config
from healerd.config.values import cpus, mem_limit, replicas, whole
from healerd.config.yamlload import LineDict, LineList
from healerd.model import DeviceRequest, RestartPolicy
from healerd.vocabulary import Restart, RestartMode

log = logging.getLogger("healerd.config")
_WARNED: set[tuple[str, str]] = set()  # (file, field): told once, not every reload
# One spelling of a setting: (value, where it is written, how it is spelled).
Spelling = tuple[Any, At, str]
Spellings = dict[str, list[Spelling]]

_SWARM_ONLY = {
    "placement": "places tasks on the nodes of a Swarm; healerd runs on this one host",
    "endpoint_mode": "chooses a Swarm's service discovery (vip, dnsrr); here every replica "
    "answers to the service name on its networks",
    "rollback_config": "rolls a Swarm service back; healerd halts a failed rollout and keeps "
    "the old containers serving (see update_config.progress_deadline)",
}
_DEPLOY_KEYS = ("mode", "replicas", "labels", "update_config", "restart_policy", "resources")
_RESOURCES: dict[str, dict[str, tuple[str, Callable[[object, At], Any]]]] = {
    "limits": {"cpus": ("cpus", cpus), "memory": ("mem_limit", mem_limit),
               "pids": ("pids_limit", hc.pids_limit)},
    "reservations": {"memory": ("mem_reservation", hc.size)},
}  # fmt: skip


def _warn_once(at: At, what: str) -> None:
    if (at.file, at.field) not in _WARNED:
        _WARNED.add((at.file, at.field))
        log.warning("%s:%s: %s: %s", at.file, at.line, at.field, what)


def _note(out: Spellings, attr: str, value: Any, at: At, spelled: str) -> None:
    if value is not None:
        out.setdefault(attr, []).append((value, at, spelled))


def _without(value: LineDict, keys: tuple[str, ...]) -> LineDict:
    trimmed = LineDict(value.line, value.column)
    for k, v in value.items():
        if k not in keys:
            trimmed[k] = v
            trimmed.key_lines[k] = value.line_of(k) or 0
            trimmed.key_columns[k] = value.column_of(k) or 0
    return trimmed


_CONDITIONS = {"none": RestartMode.NO, "on-failure": RestartMode.ON_FAILURE}


def _restart_policy(value: object, at: At) -> tuple[RestartPolicy, Restart | None]:
    """`condition` and `max_attempts` are Compose's `restart` spelled for a Swarm, and
    docker-compose reads them so on one engine: `any` is healing (what healerd does
    anyway), `none` is `restart: "no"`, `on-failure` with `max_attempts: N` is
    `on-failure:N` (0: no limit). The other keys are healerd's backoff."""
    if not isinstance(value, LineDict) or not {"condition", "max_attempts"} & set(value):
        return restart_policy(value, at), None
    condition = value.get("condition", "any")
    attempts = None
    if "max_attempts" in value:
        attempts = whole(value["max_attempts"], at.key(value, "max_attempts"), minimum=0, default=0)
        if condition != "on-failure":
            at.key(value, "max_attempts").error(
                "goes with condition: on-failure (the engine gives no other policy a limit)"
            )
    restart = None
    if isinstance(condition, str) and condition in _CONDITIONS:
        restart = Restart(_CONDITIONS[condition], attempts or None)
    elif condition != "any":
        at.key(value, "condition").error(f"{condition!r} is not any, none or on-failure")
    return restart_policy(_without(value, ("condition", "max_attempts")), at), restart


def _capabilities(value: object, at: At) -> tuple[str, ...]:
    caps = hc.strings(value, at, single=False)
    return tuple(caps)


def _device(item: object, at: At, *, gpu: bool) -> DeviceRequest | None:
    if not isinstance(item, LineDict):
        at.error(f"must be a mapping (capabilities, count, device_ids ...), not {describe(item)}")
        return None
    for option in item:
        if option not in ("capabilities", "count", "device_ids", "driver", "options"):
            at.key(item, option).error(
                f"unknown key {option!r}: takes capabilities, count, device_ids, driver, options"
            )
    caps = (
        _capabilities(item["capabilities"], at.key(item, "capabilities"))
        if item.get("capabilities")
        else ()
    )
    if gpu and "gpu" not in caps:
        caps = ("gpu", *caps)
    elif not caps:
        at.here("capabilities").error("is required (such as [gpu])")
    count: int | None = None
    if item.get("count") is not None:
        raw = item["count"]
        if raw == "all":
            count = -1
        elif isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1:
            count = raw
        else:
            at.key(item, "count").error(f"must be a number of devices or all, not {describe(raw)}")
    ids = (
        hc.strings(item["device_ids"], at.key(item, "device_ids"), single=False)
        if item.get("device_ids")
        else ()
    )
    if count is not None and ids:
        at.key(item, "count").error("cannot be combined with device_ids")
    driver = hc.text(item["driver"], at.key(item, "driver")) if item.get("driver") else ""
    options = labels(item["options"], at.key(item, "options")) if item.get("options") else ()
    if count is None and not ids:
        count = -1  # Compose's default: all of them
    return DeviceRequest(driver or "", count, tuple(ids), caps, options)


def gpus(value: object, at: At) -> tuple[DeviceRequest, ...]:
    """`gpus: all`, or a list of devices as under deploy.resources.reservations.devices."""
    if value == "all":
        return (DeviceRequest(count=-1, capabilities=("gpu",)),)
    if not isinstance(value, LineList):
        at.error(f"must be all or a list of devices, not {describe(value)}")
        return ()
    out = [_device(item, at.item(value, i), gpu=True) for i, item in enumerate(value)]
    return tuple(d for d in out if d is not None)


def _resources(value: object, at: At, out: Spellings) -> None:
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping with limits and reservations, not {describe(value)}")
        return
    for kind in value:
        kind_at, body = at.key(value, kind), value[kind]
        if kind not in _RESOURCES:
            kind_at.error(f"unknown key {kind!r}: resources takes limits and reservations")
            continue
        if not isinstance(body, LineDict):
            kind_at.error(f"must be a mapping, not {describe(body)}")
            continue
        for key in body:
            _resource(kind, key, body, kind_at, out)


def _resource(kind: str, key: object, body: LineDict, at: At, out: Spellings) -> None:
    key_at = at.key(body, key)
    if kind == "reservations" and key == "devices":
        devices = body[key]
        if not isinstance(devices, LineList):
            key_at.error(f"must be a list of devices, not {describe(devices)}")
            return
        found = [_device(d, key_at.item(devices, i), gpu=False) for i, d in enumerate(devices)]
        _note(out, "device_requests", tuple(d for d in found if d is not None), key_at, "")
    elif kind == "reservations" and key in ("cpus", "generic_resources"):
        key_at.error(
            f"is not supported: no engine setting reserves {key} for one container "
            "(cpu_shares gives a relative weight)"
        )
    elif isinstance(key, str) and key in _RESOURCES[kind]:
        attr, check = _RESOURCES[kind][key]
        _note(out, attr, check(body[key], key_at), key_at, f"deploy.resources.{kind}.{key}")
    else:
        known = ", ".join([*_RESOURCES[kind], *(("devices",) if kind == "reservations" else ())])
        key_at.error(f"unknown key {key!r}: {kind} takes {known}")


_PLAIN: dict[str, tuple[str, Callable[[object, At], Any]]] = {
    "replicas": ("replicas", replicas),
    "update_config": ("update_config", update_config),
}


def deploy(value: object, at: At) -> Spellings:
    """The settings `deploy` spells, by ServiceSpec attribute (merged by `merge`)."""
    out: Spellings = {}
    if not isinstance(value, LineDict):
        at.error(f"must be a mapping (replicas, resources, ...), not {describe(value)}")
        return out
    for key in value:
        key_at = at.key(value, key)
        if key in _SWARM_ONLY:
            key_at.error(f"is not supported: it {_SWARM_ONLY[key]}")
        elif key == "mode":
            if value[key] not in ("replicated", None):
                key_at.error(
                    f"{value[key]!r} is not supported: global runs one task on each node of a "
                    "Swarm; on one host write replicas: 1"
                )
        elif key == "labels":
            labels(value[key], key_at)  # the Swarm service's labels: checked, not applied
            _warn_once(
                key_at,
                "the Swarm service's labels: not applied to containers (as in "
                "docker compose; write labels for container labels)",
            )
        elif key == "resources":
            _resources(value[key], key_at, out)
        elif key == "restart_policy":
            policy, restart = _restart_policy(value[key], key_at)
            _note(out, "restart_policy", policy, key_at, "deploy.restart_policy")
            _note(out, "restart", restart, key_at, "deploy.restart_policy.condition")
        elif isinstance(key, str) and key in _PLAIN:
            attr, check = _PLAIN[key]
            _note(out, attr, check(value[key], key_at), key_at, f"deploy.{key}")
        else:
            known = ", ".join([*_DEPLOY_KEYS, *_SWARM_ONLY])
            key_at.error(f"unknown key {key!r}: deploy takes {known}")
    return out


def scale(value: object, at: At) -> Spellings:
    return {"replicas": [(replicas(value, at), at, "scale")]}


def merge(values: dict[str, Any], body: LineDict, at: At) -> None:
    """Folds `deploy` and `scale` (popped from `values`, the checked keys by attribute)
    into the settings they spell; two spellings that disagree are an error."""
    spelled: Spellings = {}
    for key in ("scale", "deploy"):
        for attr, found in (values.pop(key, None) or {}).items():
            spelled.setdefault(attr, []).extend(found)
    requests = [v for v, _, _ in spelled.pop("device_requests", [])]
    if requests:
        values["device_requests"] = tuple(values.get("device_requests") or ()) + tuple(
            d for found in requests for d in found
        )
    for attr, found in spelled.items():
        if body.get(attr) is not None:
            found.insert(0, (values.get(attr), at.key(body, attr), attr))
        first, _, first_name = found[0]
        for value, where, name in found[1:]:
            if value != first:
                where.error(
                    f"{name} and {first_name} are one setting and disagree ({_shown(value)} "
                    f"vs {_shown(first)}): write it once"
                )
        values[attr] = first


def _shown(value: Any) -> str:
    """A value as the file writes it (`on-failure:3`, not the dataclass)."""
    if not isinstance(value, Restart):
        return repr(value)
    mode = value.mode.value
    return repr(mode if value.max_retries is None else f"{mode}:{value.max_retries}")
