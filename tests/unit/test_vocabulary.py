"""One vocabulary (issue 30, point 3): the kinds of `/v1/events` are one enum in one
naming style, every event recorded is one of them, and the API reference lists them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from healerd.core.clock import SystemClock
from healerd.core.events import EventLog
from healerd.core.state import ServiceState
from healerd.vocabulary import EventKind

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
