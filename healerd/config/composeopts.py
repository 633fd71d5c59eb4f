"""The rows of Compose's secrets, configs, links, deploy, scale and gpus (issue 16); their
checks are in healerd.config.secrets, .netopts and .deploy. `deploy` and `scale` are
spellings of other keys: healerd.config.deploy.merge folds them in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from healerd.config import deploy as dp
from healerd.config import netopts, secrets
from healerd.config.keys import MAX_ENTRIES, Key

_REF = {
    "anyOf": [
        {"type": "string", "minLength": 1},
        {
            "type": "object",
            "properties": {
                "source": {"type": "string"},
                "target": {"type": "string"},
                "uid": {"type": ["string", "integer"]},
                "gid": {"type": ["string", "integer"]},
                "mode": {"type": ["string", "integer"]},
            },
            "required": ["source"],
            "additionalProperties": False,
        },
    ]
}
_REFS: Mapping[str, Any] = {"type": "array", "items": _REF, "maxItems": MAX_ENTRIES}
_DEVICE: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "capabilities": {"type": "array", "items": {"type": "string"}},
        "count": {"anyOf": [{"type": "integer", "minimum": 1}, {"const": "all"}]},
        "device_ids": {"type": "array", "items": {"type": "string"}},
        "driver": {"type": "string"},
        "options": {"type": "object"},
    },
    "additionalProperties": False,
}
_SIZE_OR_NUMBER: Mapping[str, Any] = {"type": ["string", "integer"]}
_DEPLOY: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "mode": {"const": "replicated"},
        "replicas": {"type": "integer", "minimum": 0},
        "labels": {"type": ["object", "array"]},
        "update_config": {"type": "object"},
        "restart_policy": {"type": "object"},
        "resources": {
            "type": "object",
            "properties": {
                "limits": {
                    "type": "object",
                    "properties": {
                        "cpus": {"type": ["string", "number"]},
                        "memory": _SIZE_OR_NUMBER,
                        "pids": {"type": "integer", "minimum": -1},
                    },
                    "additionalProperties": False,
                },
                "reservations": {
                    "type": "object",
                    "properties": {
                        "memory": _SIZE_OR_NUMBER,
                        "devices": {"type": "array", "items": _DEVICE},
                    },
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

COMPOSE_FIELDS: tuple[Key, ...] = (
    Key("secrets", "list of names, or of {source, target, uid, gid, mode}",
        "Secrets of the file's top-level secrets (file: a host file, relative to the "
        "file's directory), each bind-mounted read-only at /run/secrets/<target or name> as "
        "docker compose mounts them on one engine. uid, gid and mode cannot be honoured by "
        "a bind mount (the host file's own apply): warned about, as Compose does. Editing "
        "a secret's file rolls the containers.", "[db_password]", _REFS, (),
        secrets.secrets, compose="secrets"),
    Key("configs", "list of names, or of {source, target, uid, gid, mode}",
        "Configs of the file's top-level configs, bind-mounted read-only at /<target or "
        "name> (as docker compose v2 does; 1.29 mounts none).", "[{source: app, target: "
        "/etc/app.conf}]", _REFS, (), secrets.configs, compose="configs"),
    Key("links", "list of SERVICE or SERVICE:ALIAS",
        "The linking containers resolve ALIAS (and SERVICE) to the service's replicas; the "
        "service becomes a dependency (service_started), as in Compose.", '["db:database"]',
        {"type": "array", "items": {"type": "string", "pattern": "^[^:]+(:[^:]+)?$"}},
        (), netopts.links, compose="links"),
    Key("scale", "integer >= 0", "Compose's spelling of replicas (both: they must agree).",
        "2", {"type": "integer", "minimum": 0}, None, dp.scale, compose="scale"),
    Key("deploy", "mapping", "Compose's deploy, on one engine: replicas, update_config, "
        "restart_policy (healerd's own; condition and max_attempts are restart, as "
        "docker-compose reads them: none, on-failure[:N]), resources.limits (cpus, "
        "memory, pids), resources.reservations (memory, devices -> GPUs); labels are the "
        "Swarm service's and, as in Compose, not applied. mode: global, placement, "
        "endpoint_mode, rollback_config and reservations.cpus need a Swarm: errors. A "
        "setting also written directly (replicas, mem_limit, ...) must agree.",
        "{resources: {limits: {memory: 256m, cpus: '0.5'}}}", _DEPLOY, None, dp.deploy,
        compose="deploy"),
    Key("gpus", "all, or list of devices", "GPUs for the container (engine DeviceRequests "
        "with the gpu capability): all, or entries with count, device_ids, driver, "
        "options.", "all", {"anyOf": [{"const": "all"}, {"type": "array", "items": _DEVICE}]},
        (), dp.gpus, compose="gpus", attr="device_requests"),
)  # fmt: skip
