"""depends_on at run time: whether a service's dependencies are ready, from the same one
list call the pass observes (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from healerd.core.planner import history
from healerd.core.readiness import dependency_unmet
from healerd.model import ObservedContainer, ServiceSpec


def unmet(
    spec: ServiceSpec,
    containers: Sequence[ObservedContainer],
    services: Mapping[str, ServiceSpec],
) -> str:
    """Why `spec`'s containers may not be created yet ("" when they may): the first
    dependency whose condition does not hold (healerd.core.readiness). One scaled to 0,
    or with `required: false`, is no reason to wait."""
    for dep in spec.depends_on:
        other = services.get(dep.service)
        if not dep.required or other is None or other.replicas == 0:
            # required: false never holds a service back (Compose only warns); an
            # undeclared required one was refused with the file.
            continue
        theirs = [c for c in containers if c.service == dep.service]
        kept = history(theirs)
        why = dependency_unmet(dep, other, [c for c in theirs if c not in kept])
        if why:
            return why
    return ""


def outdated(
    spec: ServiceSpec,
    mine: Sequence[ObservedContainer],
    containers: Sequence[ObservedContainer],
) -> dict[str, str]:
    """Running containers of `spec` to recreate, with why (level-triggered, both):

    - depends_on's `restart: true`: one made before the newest running container of such a
      dependency was made has not seen that one (it was replaced since). Whole seconds,
      strictly older: a dependent made in the same second as its dependency stays.
    - network_mode service:NAME: one whose network namespace was a container of NAME that
      runs no more (only `lo` is left in it), once NAME runs again; or one that joined it
      before that container was restarted in place (a new run has a new namespace). A
      start in place is timed to the moment, a create to its whole second: one made in
      the second of the restart may be made once more, never left without a network.
    """
    live = [c for c in mine if c.running and c.spec_hash == spec.spec_hash]
    out: dict[str, str] = {}
    newest = [
        max((c.created for c in containers if c.service == d.service and c.running), default=None)
        for d in spec.depends_on
        if d.restart
    ]
    since = max((t for t in newest if t is not None), default=None)
    if since is not None:
        why = "a dependency was replaced (depends_on restart: true)"
        out |= {c.id: why for c in live if c.created < since}
    mode = spec.network_mode or ""
    if mode.startswith("service:"):
        out |= _joined(mode, live, containers)
    return out


def _joined(
    mode: str, live: Sequence[ObservedContainer], containers: Sequence[ObservedContainer]
) -> dict[str, str]:
    name = mode.removeprefix("service:")
    owners = {c.id: c for c in containers if c.service == name and c.running}
    if not owners:
        return {}
    gone = f"the {name} container whose network it joined is gone (network_mode {mode})"
    again = f"the {name} container whose network it joined was restarted (network_mode {mode})"
    out: dict[str, str] = {}
    for c in live:
        owner = owners.get(c.network_of)
        if c.network_of and owner is None:
            out[c.id] = gone
        elif owner is not None and owner.started and owner.run_started > c.run_started:
            out[c.id] = again
    return out
