"""depends_on (issue 16): read as Compose reads it, checked across the file, and kept by
the loop: a service's containers are not created before its dependencies are running
(service_started) or healthy (service_healthy); meanwhile it is Waiting, with the reason."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from healerd.config import parse_service_text
from healerd.core.dependencies import unmet
from healerd.core.lifecycle import ServiceState
from healerd.model import ContainerState, Dependency, Health, HealthcheckSpec
from healerd.vocabulary import Condition
from tests.unit.harness.builders import container, spec
from tests.unit.harness.loop import desired, drive, make


def parsed(text: str) -> tuple[dict[str, object], list[str]]:
    result = parse_service_text(textwrap.dedent(text), "p.yaml", env={})
    return dict(result.services or {}), [str(e) for e in result.errors]


def test_short_and_long_syntax() -> None:
    services, errors = parsed(
        """\
        services:
          db: {image: postgres:16}
          cache: {image: redis:7}
          app:
            image: busybox
            depends_on: [db, cache]
          worker:
            image: busybox
            depends_on:
              db: {condition: service_healthy}
              metrics: {condition: service_started, required: false}
        """
    )
    assert errors == []
    assert services["app"].depends_on == (Dependency("cache"), Dependency("db"))  # type: ignore[attr-defined]
    assert services["worker"].depends_on == (  # type: ignore[attr-defined]
        Dependency("db", Condition.HEALTHY),
        Dependency("metrics", Condition.STARTED, required=False),
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("depends_on: [nope]", "depends on 'nope', which this file does not declare"),
        ("depends_on: [a]", "service 'a' depends on itself"),
        (
            "depends_on: {c: {condition: service_completed_successfully}}",
            "waits for 'c' to exit with code 0, but it has restart: always",
        ),
        ("depends_on: {b: {condition: started}}", "must be one of service_started"),
        ("depends_on: {b: {restart: 1}}", "must be true or false"),
        ("depends_on: b", "must be a list of services or a mapping"),
    ],
)
def test_bad_dependencies_are_refused_with_file_line_and_field(body: str, message: str) -> None:
    text = (
        f"services:\n  a:\n    image: busybox\n    {body}\n  b: {{image: busybox}}\n"
        "  c: {image: busybox, restart: always}\n"
    )
    _, errors = parsed(text)
    assert any(e.startswith("p.yaml:4:") and message in e for e in errors), errors


def test_a_cycle_is_refused_naming_it() -> None:
    _, errors = parsed(
        "services:\n  a: {image: x, depends_on: [b]}\n  b: {image: x, depends_on: [c]}\n"
        "  c: {image: x, depends_on: [a]}\n"
    )
    assert len(errors) == 1 and "depends_on makes a cycle: a -> b -> c -> a" in errors[0]


def test_readiness_from_one_observation() -> None:
    db = spec("db", 1, healthcheck=HealthcheckSpec(test=("CMD", "true")))
    app = spec("app", 1, depends_on=(Dependency("db", Condition.HEALTHY),))
    starting = dataclasses.replace(container(db), health=Health.STARTING)
    services = {"db": db, "app": app}
    assert unmet(app, [], services) == "waiting for db to be healthy (depends_on)"
    assert unmet(app, [starting], services) == "waiting for db to be healthy (depends_on)"
    assert unmet(app, [dataclasses.replace(starting, health=Health.HEALTHY)], services) == ""
    started = dataclasses.replace(app, depends_on=(Dependency("db"),))
    assert unmet(started, [starting], services) == ""
    assert unmet(started, [container(db, ContainerState.EXITED)], services) != ""
    # Scaled to 0, or optional (declared or not): nothing to wait for.
    assert unmet(started, [], {"db": dataclasses.replace(db, replicas=0)}) == ""
    optional = dataclasses.replace(app, depends_on=(Dependency("db", required=False),))
    assert unmet(optional, [], {}) == "" and unmet(optional, [], services) == ""
    # A dependency without a healthcheck is never healthy: the reason says why.
    bare = dataclasses.replace(starting, health=None)
    assert unmet(app, [bare], services) == "waiting for db to be healthy: it has no healthcheck"


def test_the_loop_waits_for_the_dependency_then_creates() -> None:
    ctrl, engine, clock = make()
    db = spec("db", 1, healthcheck=HealthcheckSpec(test=("CMD", "true")))
    app = spec("app", 2, depends_on=(Dependency("db", Condition.HEALTHY),))
    ctrl.set_desired(desired(db, app))
    drive(ctrl, clock, max_seconds=5)
    (db_c,) = engine.running("db")
    assert db_c.health is Health.STARTING  # as the engine lists it until a check ran
    assert engine.running("app") == [], "db is not healthy yet"
    status = {s.name: s for s in ctrl.statuses()}["app"]
    assert status.state == ServiceState.WAITING
    assert status.reason == "waiting for db to be healthy (depends_on)"
    engine.run_health_checks()
    drive(ctrl, clock, max_seconds=5)
    assert len(engine.running("app")) == 2
    # Once running, the dependents are not touched when the dependency goes down.
    engine.kill(db_c.id)
    ctrl.reconcile_now("app")
    drive(ctrl, clock, max_seconds=1)
    assert len(engine.running("app")) == 2


def test_restart_true_recreates_dependents_made_before_the_dependency_was_replaced() -> None:
    from healerd.core.dependencies import outdated
    from healerd.core.planner import PlanContext, plan
    from healerd.model import ActionKind
    from tests.unit.harness.builders import container, spec

    db = spec("db")
    app = spec("app", depends_on=(Dependency("db", restart=True),))
    plain = spec("app", depends_on=(Dependency("db"),))
    a = container(app, created=100.0)
    same_second = container(db, created=100.0)
    assert outdated(app, [a], [a, same_second]) == {}
    newer = container(db, created=200.0)
    why = "a dependency was replaced (depends_on restart: true)"
    assert outdated(app, [a], [a, newer]) == {a.id: why}
    assert outdated(plain, [a], [a, newer]) == {}  # without restart: true
    p = plan("app", app, [a], PlanContext(now=300.0, recreate={a.id: why}))
    assert [x.kind for x in p.actions] == [ActionKind.STOP, ActionKind.CREATE, ActionKind.REMOVE]
    assert "depends_on restart: true" in p.actions[0].reason
    # Held while the dependency is not ready (the pass replans without rollout steps).
    held = PlanContext(now=300.0, recreate={a.id: why}, rollout_allowed=False)
    assert plan("app", app, [a], held).actions == ()


def test_a_container_whose_network_owner_is_gone_is_recreated_once_it_runs_again() -> None:
    import dataclasses

    from healerd.core.dependencies import outdated
    from tests.unit.harness.builders import container, spec

    vpn = spec("vpn")
    app = spec("app", network_mode="service:vpn")
    old_vpn, new_vpn = container(vpn), container(vpn)
    a = dataclasses.replace(container(app), network_of=old_vpn.id)
    assert outdated(app, [a], [a, old_vpn]) == {}  # its owner runs
    assert outdated(app, [a], [a]) == {}  # nothing to join yet: left alone
    assert outdated(app, [a], [a, new_vpn]) == {
        a.id: "the vpn container whose network it joined is gone (network_mode service:vpn)"
    }


def test_a_container_that_joined_a_network_owner_restarted_in_place_is_recreated() -> None:
    """network_mode service:NAME: a start in place gives its owner a new network
    namespace; what joined the old one is left with `lo` (issue 28)."""
    import dataclasses

    from healerd.core.dependencies import outdated
    from tests.unit.harness.builders import container, spec

    vpn = spec("vpn")
    app = spec("app", network_mode="service:vpn")
    owner = dataclasses.replace(container(vpn), created=100.0)
    a = dataclasses.replace(container(app), network_of=owner.id, created=101.0)
    assert outdated(app, [a], [a, owner]) == {}
    restarted = dataclasses.replace(owner, started=150.5)  # started again in place
    assert outdated(app, [a], [a, restarted]) == {
        a.id: "the vpn container whose network it joined was restarted (network_mode service:vpn)"
    }
    # Made after that restart: left alone.
    later = dataclasses.replace(a, created=151.0)
    assert outdated(app, [later], [later, restarted]) == {}
