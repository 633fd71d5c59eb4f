"""depends_on across the services of one file (a Compose project): each names a service
of the project (unless `required: false`), none itself, and no cycle."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from healerd.config.keys import At
from healerd.config.yamlload import LineDict
from healerd.model import ServiceSpec
from healerd.vocabulary import Condition, Restart, RestartMode


def _cycle(start: str, specs: Mapping[str, ServiceSpec]) -> list[str] | None:
    """A dependency path from `start` back to itself, if there is one."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        name, path = stack.pop()
        for dep in specs[name].depends_on if name in specs else ():
            if dep.service == start:
                return [*path, start]
            if dep.service not in seen and dep.service in specs:
                seen.add(dep.service)
                stack.append((dep.service, [*path, dep.service]))
    return None


def check_dependencies(
    specs: Mapping[str, ServiceSpec], bodies: Mapping[str, tuple[LineDict, At]]
) -> dict[str, ServiceSpec]:
    """The checks, and the specs with run-once jobs made out (see `_jobs`)."""
    reported: set[frozenset[str]] = set()
    for name, spec in specs.items():
        if not spec.depends_on:
            continue
        body, at = bodies[name]
        dep_at = at.key(body, "depends_on")
        for dep in spec.depends_on:
            if dep.service == name:
                dep_at.error(f"service {name!r} depends on itself")
            elif dep.service not in specs and dep.required:
                dep_at.error(
                    f"depends on {dep.service!r}, which this file does not declare "
                    "(declare it here, or mark it required: false)"
                )
        cycle = _cycle(name, specs)
        if cycle is not None and frozenset(cycle) not in reported:
            reported.add(frozenset(cycle))
            dep_at.error(f"depends_on makes a cycle: {' -> '.join(cycle)}")
    return _jobs(specs, bodies)


def _jobs(
    specs: Mapping[str, ServiceSpec], bodies: Mapping[str, tuple[LineDict, At]]
) -> dict[str, ServiceSpec]:
    """A service others wait for with service_completed_successfully is a run-once job:
    without a `restart` of its own it gets "no" (Compose's default; healerd's is to
    replace every container that stops). One that says always cannot ever complete."""
    out = dict(specs)
    for name, spec in specs.items():
        for dep in spec.depends_on:
            job = out.get(dep.service)
            if dep.condition is not Condition.COMPLETED_SUCCESSFULLY or job is None:
                continue
            if job.restart is None:
                out[dep.service] = dataclasses.replace(job, restart=Restart(RestartMode.NO))
            elif not job.restart.run_once:
                body, at = bodies[name]
                at.key(body, "depends_on").error(
                    f"service_completed_successfully waits for {dep.service!r} to exit with "
                    f"code 0, but it has restart: {job.restart} (healerd replaces every "
                    'container of it that stops); give it restart: "no" or on-failure'
                )
    return out
