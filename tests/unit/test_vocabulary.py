"""One vocabulary (issue 30, point 3): the kinds of `/v1/events` are one enum in one
naming style, every event recorded is one of them, and the API reference lists them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from healerd.config import parse_service_text
from healerd.core import jobs, planner, readiness
from healerd.core.clock import SystemClock
from healerd.core.events import EventLog
from healerd.core.lifecycle import ServiceState
from healerd.model import PullPolicy
from healerd.vocabulary import (
    AutoUpdate,
    Condition,
    EventKind,
    Restart,
    RestartMode,
    VolumeKind,
)

REPO = Path(__file__).resolve().parents[2]
KEBAB = re.compile(r"[a-z]+(?:-[a-z]+)*")


def test_every_event_kind_is_kebab_case() -> None:
    assert [k.value for k in EventKind if not KEBAB.fullmatch(k.value)] == []


def test_an_event_kind_is_an_event_kind_not_a_string() -> None:
    log = EventLog(SystemClock())
    with pytest.raises(TypeError):
        log.record("waitingforresources", "web", "x")  # type: ignore[arg-type]
    assert log.record(EventKind.CREATED, "web", "x").kind is EventKind.CREATED


def test_entering_a_state_records_a_kind_of_the_enum() -> None:
    kinds = {s: s.event for s in ServiceState if s.event is not None}
    assert all(isinstance(k, EventKind) for k in kinds.values())
    assert kinds[ServiceState.WAITING_FOR_RESOURCES] == "waiting-for-resources"


def test_the_api_reference_lists_every_kind() -> None:
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    section = text[text.index("## GET /v1/events") :]
    section = section[: section.index("\n## ", 1)]
    listed = set(re.findall(r"`([a-z-]+)`", section))
    assert {k.value for k in EventKind} - listed == set()


@pytest.mark.parametrize(
    ("text", "mode", "limit"),
    [
        ("always", RestartMode.ALWAYS, None),
        ("unless-stopped", RestartMode.UNLESS_STOPPED, None),
        ("no", RestartMode.NO, None),
        ("on-failure", RestartMode.ON_FAILURE, None),
        ("on-failure:3", RestartMode.ON_FAILURE, 3),
    ],
)
def test_restart_is_parsed_once_and_written_back_as_it_was(
    text: str, mode: RestartMode, limit: int | None
) -> None:
    r = Restart.parse(text)
    assert (r.mode, r.max_retries, str(r)) == (mode, limit, text)
    assert r.run_once == (mode in (RestartMode.NO, RestartMode.ON_FAILURE))


@pytest.mark.parametrize("text", ["", "never", "always:3", "on-failure:0", "on-failure:x", "No"])
def test_a_restart_compose_does_not_take_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not always"):
        Restart.parse(text)


def test_a_service_file_gives_enums_not_strings() -> None:
    parsed = parse_service_text(
        "services:\n"
        "  db: {image: busybox, restart: 'no'}\n"
        "  app:\n"
        "    image: busybox\n"
        "    restart: on-failure:2\n"
        "    x-healerd: {auto_update: registry}\n"
        "    depends_on: {db: {condition: service_completed_successfully}}\n"
        "    volumes: [{type: tmpfs, target: /t}, '/srv:/srv']\n",
        "app.yaml",
    )
    assert parsed.errors == () and parsed.services is not None
    app = parsed.services["app"]
    assert app.restart == Restart(RestartMode.ON_FAILURE, 2)
    assert app.auto_update is AutoUpdate.REGISTRY
    assert app.depends_on[0].condition is Condition.COMPLETED_SUCCESSFULLY
    assert [v.kind for v in app.volumes] == [VolumeKind.TMPFS, VolumeKind.SHORT]
    assert all(type(v.kind) is VolumeKind for v in app.volumes)
    # A key left out takes its default: an enum member too, never its word.
    db = parsed.services["db"]
    assert type(db.auto_update) is AutoUpdate and type(db.pull_policy) is PullPolicy
    assert db.restart == Restart(RestartMode.NO)


def test_no_code_compares_these_enums_with_strings() -> None:
    """PullPolicy and Health are enums: compared as such (`is`), never with their words."""
    pattern = re.compile(r'[!=]= "(always|never|unhealthy|starting)"')
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for path in (REPO / "healerd").rglob("*.py")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []


def test_readiness_is_one_module() -> None:
    """available, finished and a dependency's condition live side by side; the planner
    and the jobs module no longer define their own."""
    assert not hasattr(planner, "is_available") and not hasattr(jobs, "finished")
    assert {"available", "dependency_unmet", "finished"} <= set(readiness.__all__)
