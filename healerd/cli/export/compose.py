"""`healerctl export --to compose`: a plain Compose file, for leaving healerd for
`docker compose`. What only healerd does is kept under `x-healerd` (Compose ignores it)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from healerd.cli.export.attachments import compose_more, top_level
from healerd.cli.export.common import (
    Loss,
    Options,
    Rendered,
    changed,
    compose_base,
    dump,
    go_duration,
    header,
    named_volumes,
    networks,
    port_short,
    size_text,
    user_networks,
)
from healerd.cli.export.hostopts import compose_fields, depends_on, networks_with_aliases
from healerd.cli.export.variables import all_substitutions, argv_warnings, env_note, written_back
from healerd.model import PullPolicy, ServiceSpec

KEPT = (
    "priority",
    "unhealthy_grace",
    *(f"update_config.{k}" for k in asdict(ServiceSpec(name="x", image="x").update_config)),
    *(f"restart_policy.{k}" for k in ("delay", "max_delay", "window")),
)


def _durations(values: dict[str, Any]) -> dict[str, Any]:
    return {k: go_duration(v) if isinstance(v, float) else v for k, v in values.items()}


def _x_healerd(spec: ServiceSpec) -> dict[str, Any]:
    update = _durations(asdict(spec.update_config))
    update["order"] = str(spec.update_order)
    return {
        "update_config": update,
        "restart_policy": _durations(asdict(spec.restart_policy)),
        "unhealthy_grace": go_duration(spec.unhealthy_grace),
        "priority": spec.priority,
    }


def _service(spec: ServiceSpec, losses: list[Loss]) -> dict[str, Any]:
    svc = compose_base(spec)
    if spec.ports:
        svc["ports"] = [port_short(p) for p in spec.ports]
    nets = networks_with_aliases(spec, user_networks(spec))
    if nets:
        svc["networks"] = nets
    if spec.mem_limit is not None:
        svc["mem_limit"] = size_text(spec.mem_limit)
    if spec.cpus is not None:
        svc["cpus"] = spec.cpus
    svc |= compose_fields(spec)
    if spec.depends_on:
        svc["depends_on"] = depends_on(spec)
    if spec.pull_policy is not PullPolicy.BUILD:  # build: needs the build section, not exported
        svc["pull_policy"] = str(spec.pull_policy)
    # The engine restarts crashed containers; `docker stop` is not healed any more. A
    # run-once service keeps its own ("no", on-failure[:N]).
    run_once = spec.restart is not None and spec.restart.run_once
    svc["restart"] = str(spec.restart) if run_once else "always"
    svc["deploy"] = {"replicas": spec.replicas}
    compose_more(spec, svc, losses)  # secrets, configs, links, addresses, GPUs
    svc["x-healerd"] = _x_healerd(spec)
    for name, value in changed(spec, KEPT):
        losses.append(
            Loss(spec.name, name, f"{value}: kept under x-healerd, which docker compose ignores")
        )
    return svc


def render(specs: list[ServiceSpec], opts: Options) -> Rendered:
    losses: list[Loss] = []
    doc: dict[str, Any] = {}
    projects = {s.project for s in specs}
    if len(projects) == 1 and "" not in projects:
        doc["name"] = projects.pop()  # the same `<project>_default` network
    # `${VAR}` where the files had it, and the .env kept (healerd.cli.export.variables).
    doc["services"] = {
        s.name: written_back(_service(s, losses), s.substitutions, f"services.{s.name}")
        for s in specs
    }
    nets = networks(specs)
    if nets:
        # By the names they have on this engine, where they exist already.
        doc["networks"] = {n: {"external": True} for n in nets}
    doc |= written_back(top_level(specs, losses), all_substitutions(specs))
    vols = named_volumes(specs)
    if vols:
        # `name:` keeps the very volume healerd used (no project prefix): the data stays.
        doc["volumes"] = {v: {"name": v} for v in vols}
    out = Rendered(header("compose", opts.sources) + dump(doc), losses)
    out.notes += [n for n in [env_note(specs, "compose")] if n]
    for spec in specs:
        out.warnings += argv_warnings(spec, "written as ${...}")
    return out
