"""One service's mapping checked into a ServiceSpec: its keys through the table in
healerd.config.fields, then the checks that span several keys.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping

from healerd.config import netopts
from healerd.config.deploy import merge as merge_spellings
from healerd.config.envfile import EnvFileError, env_digest
from healerd.config.errors import describe, unknown_key_reason
from healerd.config.extension import auto_update, notify, pre_update
from healerd.config.fields import SERVICE_FIELDS, SERVICE_KEYS
from healerd.config.keys import MAX_ENTRIES, At, check_keys
from healerd.config.unsupported import UNSUPPORTED
from healerd.config.updatekeys import update_policy
from healerd.config.yamlload import LineDict, LineList
from healerd.model import Hook, PullPolicy, ServiceSpec
from healerd.model.updatepolicy import UpdatePolicy
from healerd.vocabulary import AutoUpdate


def _build_policy(spec: ServiceSpec, body: LineDict, at: At) -> ServiceSpec:
    """A service that builds goes by pull_policy build unless it says otherwise
    (rebuilt when its context changes); build as a pull_policy needs a build section."""
    if spec.build is not None and body.get("pull_policy") is None:
        return dataclasses.replace(spec, pull_policy=PullPolicy.BUILD)
    if spec.build is None and spec.pull_policy is PullPolicy.BUILD and "build" not in body:
        at.key(body, "pull_policy").error("build needs a build section to build from")
    return spec


def _unknown_keys(body: LineDict, at: At) -> None:
    for key in body:
        if key in UNSUPPORTED:
            at.key(body, key).error(UNSUPPORTED[key])
        elif not (isinstance(key, str) and key.startswith("x-")) and key not in SERVICE_KEYS:
            at.key(body, key).error(unknown_key_reason(key, SERVICE_KEYS))


def _bounded(body: LineDict, at: At) -> Mapping[object, object]:
    """`body` without the lists and mappings over MAX_ENTRIES entries, each reported."""
    bounded = {}
    for key, value in body.items():
        if isinstance(value, LineList | LineDict) and len(value) > MAX_ENTRIES:
            at.key(body, key).error(f"has {len(value)} entries; at most {MAX_ENTRIES} are allowed")
        else:
            bounded[key] = value
    return bounded


def _across_keys(spec: ServiceSpec, body: LineDict, at: At) -> None:
    """What no single key's check can see."""
    if spec.replicas > 1 and spec.has_fixed_host_port:
        at.key(body, "ports").error("a fixed host port allows only one replica")
    if spec.network_mode is not None and spec.networks:
        at.key(body, "network_mode").error("cannot be combined with networks")
    if spec.cpus is not None and (spec.cpu_period or spec.cpu_quota):
        key = "cpu_period" if spec.cpu_period else "cpu_quota"
        at.key(body, key).error("cannot be combined with cpus (which sets the CPU quota)")
    netopts.across_keys(spec, body, at)
    update = body.get("update_config")
    if (
        spec.has_fixed_host_port
        and isinstance(update, LineDict)
        and update.get("order") == "start-first"
    ):
        at.key(body, "update_config").key(update, "order").error(
            "start-first cannot work with a fixed host port: two containers cannot hold one "
            "fixed host port: use stop-first"
        )


def check_service(name: str, body: object, at: At) -> ServiceSpec | None:
    """The service `name` declares, or None when `body` is not a mapping at all.

    A spec comes back even when a key has an error (the caller drops the whole file then),
    so that checks across services still run.
    """
    if not isinstance(body, LineDict):
        at.error(f"must be a mapping with at least an 'image', not {describe(body)}")
        return None
    _unknown_keys(body, at)
    if body.get("image") is None and "build" not in body:
        at.here("image").error("is required")
    values, _ = check_keys(_bounded(body, at), SERVICE_FIELDS, lambda key: at.key(body, key))
    merge_spellings(values, body, at)  # deploy and scale
    spec = ServiceSpec(name=name, source_file=at.file, **values)
    if spec.env_files:
        # Errors were reported above; a digest is only taken of files that read cleanly.
        with contextlib.suppress(EnvFileError, OSError):
            spec = dataclasses.replace(spec, env_digest=env_digest(spec))
    _across_keys(spec, body, at)
    spec = _build_policy(spec, body, at)
    at_labels = at.key(body, "labels") if "labels" in body else at
    mode = auto_update(spec.auto_update, spec.labels, at_labels)
    if spec.build is not None and mode in (AutoUpdate.REGISTRY, AutoUpdate.NOTIFY):
        where = at.key(body, "x-healerd") if "x-healerd" in body else at_labels
        where.error(
            f"auto_update {mode} follows a tag in a registry; a service that builds its "
            "image follows its build context instead (drop one of them)"
        )
    ext = body.get("x-healerd")
    before: tuple[Hook, ...]
    told, before, policy = True, (), UpdatePolicy()
    if ext is not None:
        ext_at = at.key(body, "x-healerd")
        told, before = notify(ext, ext_at), pre_update(ext, ext_at)
        policy = update_policy(ext, ext_at)
    if mode == spec.auto_update and told and not before and policy == spec.update_policy:
        return spec
    return dataclasses.replace(
        spec, auto_update=mode, notify=told, pre_update=before, update_policy=policy
    )
