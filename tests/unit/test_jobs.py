"""Run-once services (issue 16, point 5): Compose's restart "no" and on-failure[:N], and
depends_on's service_completed_successfully. Planner, context and dependency rules are
pure, so they are tested here with built inputs."""

from __future__ import annotations

import dataclasses
import textwrap

from healerd.config import parse_service_text
from healerd.core.context import Recall, plan_context
from healerd.core.dependencies import unmet
from healerd.core.jobs import restart_limit, run_once, verdict
from healerd.core.planner import PlanContext, plan
from healerd.core.readiness import finished
from healerd.model import ActionKind, ContainerState, Dependency, ObservedContainer, ServiceSpec
from healerd.vocabulary import Condition, Restart
from tests.unit.harness.builders import container, spec

R = Restart.parse  # as a service file writes it
EXITED = ContainerState.EXITED
NOW = PlanContext(now=1000.0)


def exited(s: ServiceSpec, code: int, *, restarts: int = 0, **kw: object) -> ObservedContainer:
    c = container(s, EXITED, **kw)  # type: ignore[arg-type]
    return dataclasses.replace(c, exit_code=code, restarts=restarts)


def test_the_restart_modes() -> None:
    assert not run_once(spec()) and not run_once(spec(restart=R("always")))
    assert run_once(spec(restart=R("no"))) and run_once(spec(restart=R("on-failure")))
    assert restart_limit(spec(restart=R("on-failure:3"))) == 3
    assert restart_limit(spec(restart=R("on-failure"))) is None
    assert restart_limit(spec(restart=R("no"))) is None


def test_a_job_that_exited_is_finished_whatever_its_code_and_never_replaced() -> None:
    for code in (0, 1, 137):
        s = spec(restart=R("no"))
        c = exited(s, code)
        assert finished(c, s)
        p = plan("web", s, [c], NOW)
        assert p.actions == () and p.finished == 1 and p.converged


def test_with_always_the_same_exit_is_restarted() -> None:
    s = spec(restart=R("always"))
    p = plan("web", s, [exited(s, 0)], NOW)
    assert [a.kind for a in p.actions] == [ActionKind.START]


def test_on_failure_restarts_a_non_zero_exit_only() -> None:
    s = spec(restart=R("on-failure"))
    assert plan("web", s, [exited(s, 0)], NOW).actions == ()
    p = plan("web", s, [exited(s, 1)], NOW)
    # In place, as Docker's on-failure does; the count goes on: on-failure:N counts them.
    assert [a.kind for a in p.actions] == [ActionKind.START]
    assert p.actions[0].restarts == 1


def test_on_failure_n_gives_up_after_n_restarts() -> None:
    s = spec(restart=R("on-failure:2"))
    assert [a.kind for a in plan("web", s, [exited(s, 1, restarts=1)], NOW).actions] == [
        ActionKind.START
    ]
    last = exited(s, 1, restarts=2)
    p = plan("web", s, [last], NOW)
    assert p.actions == () and p.finished == 1
    ok, why = verdict(s, [last])
    assert not ok and f"{last.name} exited with code 1 after 2 restart(s) (on-failure:2)" == why


def test_a_finished_job_of_an_older_spec_runs_again_with_the_new_one() -> None:
    s = spec(restart=R("no"))
    old = exited(s, 0, spec_hash="old")
    p = plan("web", s, [old], NOW)
    assert [a.kind for a in p.actions] == [ActionKind.CREATE]
    assert p.actions[0].container == old  # the old run stays as history


def test_a_running_job_counts_and_replicas_fill_with_finished_ones() -> None:
    s = spec(restart=R("no"), replicas=3)
    p = plan("web", s, [exited(s, 0), container(s)], NOW)
    assert [a.kind for a in p.actions] == [ActionKind.CREATE]
    p = plan("web", s, [exited(s, 0), container(s), exited(s, 2)], NOW)
    assert p.actions == () and p.finished == 2 and p.alive == 1
    # Scaled down: finished ones go first (they serve nothing).
    s1 = dataclasses.replace(s, replicas=1)
    done = [exited(s1, 0), exited(s1, 2)]
    p = plan("web", s1, [done[0], container(s1), done[1]], NOW)
    assert [a.kind for a in p.actions] == [ActionKind.REMOVE] * 2
    assert {a.container.id for a in p.actions if a.container} == {c.id for c in done}


def test_health_never_replaces_a_job_container() -> None:
    s = spec(restart=R("on-failure"))
    c = container(s)
    recall = Recall(unhealthy_since={c.id: 0.0})
    ctx, _, _ = plan_context(s, [c], 1000.0, recall)
    assert ctx.failed_running == frozenset()
    ctx, _, _ = plan_context(dataclasses.replace(s, restart=R("always")), [c], 1000.0, recall)
    assert ctx.failed_running == {c.id}


def test_verdicts() -> None:
    s = spec(restart=R("no"), replicas=2)
    assert verdict(s, [exited(s, 0), exited(s, 0)]) == (True, "2 run(s) exited with code 0")
    bad = exited(s, 3)
    ok, why = verdict(s, [exited(s, 0), bad])
    assert not ok and why == f"{bad.name} exited with code 3"


def test_service_completed_successfully() -> None:
    job = spec("migrate", restart=R("no"))
    app = spec("app", depends_on=(Dependency("migrate", Condition.COMPLETED_SUCCESSFULLY),))
    services = {"migrate": job, "app": app}
    waiting = "waiting for migrate to complete successfully (depends_on)"
    assert unmet(app, [], services) == waiting
    assert unmet(app, [container(job)], services) == waiting  # still running
    assert unmet(app, [exited(job, 0)], services) == ""
    failed = exited(job, 1)
    assert unmet(app, [failed], services) == (
        f"blocked: migrate failed ({failed.name} exited with code 1); "
        "depends_on needs it to complete successfully"
    )
    # A run of an older spec says nothing of the current one.
    assert unmet(app, [exited(job, 0, spec_hash="old")], services) == waiting


def _parsed(text: str) -> tuple[dict[str, ServiceSpec], list[str]]:
    result = parse_service_text(textwrap.dedent(text), "j.yaml", env={})
    return dict(result.services or {}), [str(e) for e in result.errors]


def test_the_file_side() -> None:
    services, errors = _parsed(
        """\
        services:
          migrate: {image: busybox}
          app:
            image: busybox
            restart: on-failure:5
            depends_on: {migrate: {condition: service_completed_successfully}}
          once: {image: busybox, restart: no}
        """
    )
    assert errors == []
    # Waited for as a job, with no restart of its own: Compose's default, "no".
    assert str(services["migrate"].restart) == "no"
    assert str(services["app"].restart) == "on-failure:5"
    assert str(services["once"].restart) == "no"  # YAML 1.1's false, Compose's "no"
