"""The Docker adapter's event lines as engine-neutral EngineEvents: Docker's names (and
Podman's `died`) mapped in the adapter, so that core reads EngineAction only."""

from __future__ import annotations

import json

import pytest

from healerd.engine.docker.events import (
    PODMAN_ACTIONS,
    WATCHED_EVENTS,
    event_filters,
    event_of,
    signal_number,
)
from healerd.model import LABEL_SERVICE, EngineAction, EngineEvent


def line(action: str, **attrs: str) -> bytes:
    actor = {"ID": "c" * 64, "Attributes": {LABEL_SERVICE: "web", "name": "web-1", **attrs}}
    return json.dumps({"Type": "container", "Action": action, "Actor": actor}).encode()


@pytest.mark.parametrize(
    ("name", "action"),
    [
        ("create", EngineAction.CREATED),
        ("start", EngineAction.STARTED),
        ("die", EngineAction.DIED),
        ("died", EngineAction.DIED),  # Podman's name for it
        ("remove", EngineAction.DESTROYED),  # Podman 4.3's compat stream's destroy
        ("kill", EngineAction.KILLED),
        ("stop", EngineAction.STOPPED),
        ("destroy", EngineAction.DESTROYED),
        ("pause", EngineAction.PAUSED),
        ("unpause", EngineAction.UNPAUSED),
        ("oom", EngineAction.OOM),
        ("health_status: unhealthy", EngineAction.HEALTH),
        ("rename", EngineAction.RENAMED),
    ],
)
def test_each_watched_action_is_an_engine_action(name: str, action: EngineAction) -> None:
    event = event_of(line(name))
    assert event == EngineEvent("web", "c" * 64, action, name="web-1")
    assert name.partition(":")[0] in WATCHED_EVENTS or name in PODMAN_ACTIONS


def test_a_death_carries_its_exit_code_and_a_kill_its_signal_as_a_number() -> None:
    assert event_of(line("die", exitCode="137")) == EngineEvent(
        "web", "c" * 64, EngineAction.DIED, exit_code=137, name="web-1"
    )
    for given in ("9", "SIGKILL", "KILL", "kill"):
        event = event_of(line("kill", signal=given))
        assert event is not None and event.signal == 9
    assert signal_number("SIGHUP") == 1 and signal_number("") is None
    assert signal_number("NOPE") is None


def test_others_containers_and_unknown_actions_are_no_events() -> None:
    foreign = json.dumps({"Action": "die", "Actor": {"ID": "x", "Attributes": {}}}).encode()
    assert event_of(foreign) is None
    assert event_of(line("exec_start: sh")) is None


def test_podman_is_asked_for_its_own_event_names_and_no_label_key_alone() -> None:
    """Podman 4.3 lets nothing through a label filter of a key alone, and its `die`
    events only through a filter naming `died` (measured: issue 31): on Podman the
    label is checked on healerd's side (event_of), every name asked in both spellings."""
    docker_filters = event_filters("docker")
    assert docker_filters["label"] == [LABEL_SERVICE]
    assert docker_filters["event"] == WATCHED_EVENTS
    podman = event_filters("podman")
    assert "label" not in podman and podman["type"] == ["container"]
    assert {"died", "remove", *WATCHED_EVENTS} <= set(podman["event"])


def test_podman_kill_without_a_signal_is_a_kill() -> None:
    """Podman 4.3's kill event carries no signal: a kill all the same (core takes a
    kill without a signal for a stop on purpose, as Docker's SIGKILL)."""
    assert event_of(line("kill")) == EngineEvent("web", "c" * 64, EngineAction.KILLED, name="web-1")
