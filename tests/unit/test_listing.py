"""The list call's rows as observed containers: what a repeated list reuses."""

from __future__ import annotations

import json

import pytest

from healerd.engine import EngineUnavailable
from healerd.engine.docker import DockerEngine
from healerd.engine.docker.listing import RowCache, rows_of
from healerd.model import ContainerState, Health
from tests.unit.harness.builders import row


def test_an_unchanged_row_is_the_object_of_the_last_list() -> None:
    cache = RowCache()
    (first,) = cache.parse([row("a")])
    (again,) = cache.parse([row("a")])  # a new decode: equal strings, other objects
    assert again is first


def test_a_changed_status_is_parsed_again_and_the_rest_kept() -> None:
    cache = RowCache()
    (first,) = cache.parse([row("a")])
    (now,) = cache.parse([row("a", State="exited", Status="Exited (3) 1 second ago")])
    assert (now.state, now.exit_code, now.health) == (ContainerState.EXITED, 3, None)
    assert now.status == "Exited (3) 1 second ago"
    # What never changes is the last list's own object, not this decode's.
    assert now.id is first.id and now.anon_volumes is first.anon_volumes
    assert now.name is first.name and now.image is first.image
    (later,) = cache.parse([row("a", Status="Up 6 seconds (unhealthy)")])
    assert (later.state, later.health, later.exit_code) == (
        ContainerState.RUNNING,
        Health.UNHEALTHY,
        None,
    )


def test_a_rename_and_a_moved_tag_are_seen() -> None:
    cache = RowCache()
    cache.parse([row("a")])
    (now,) = cache.parse([row("a", Names=["/web-a-replaced"], Image="sha256:" + "e" * 64)])
    assert (now.name, now.image) == ("web-a-replaced", "sha256:" + "e" * 64)


def test_a_container_gone_from_the_list_is_forgotten() -> None:
    cache = RowCache()
    (a, _) = cache.parse([row("a"), row("b")])
    assert [c.id[0] for c in cache.parse([row("b")])] == ["b"]
    (back,) = cache.parse([row("a")])
    assert back is not a and back == a  # parsed anew, the same container


@pytest.mark.parametrize(
    "body",
    [
        "[]",
        " [ ] ",
        '[{"Id": "a"}]',
        '[\n  {"Id": "a", "Labels": {"x": "]"}},\n  {"Id": "b", "Names": ["/b", ","]}\n]\n',
    ],
)
def test_rows_of_reads_the_array_a_row_at_a_time(body: str) -> None:
    assert list(rows_of(body)) == json.loads(body)


@pytest.mark.parametrize(
    "body", ["", "{}", "null", '[{"Id": "a"} {"Id": "b"}]', '[{"Id": "a"},', '[{"Id": "a"']
)
def test_a_garbled_list_is_an_error_not_fewer_rows(body: str) -> None:
    with pytest.raises(ValueError):
        list(rows_of(body))


def test_the_engine_list_is_translated_when_garbled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A body cut short by an engine that restarts mid-answer is the engine unavailable
    (retried), even though it is found only while the rows are being parsed."""

    class Garbled:
        text = '[{"Id": "' + "a" * 64 + '", "State": "running"}, {"Id": "b'

    engine = DockerEngine("unix:///nonexistent.sock")
    monkeypatch.setattr(engine._client, "get", lambda *args, **kw: Garbled())
    with pytest.raises(EngineUnavailable):
        engine.list_managed()


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        # Podman's own words through its Docker-compatible list (Podman 4.3, measured:
        # a killed container is `stopped` for a moment before it is `exited`).
        ("stopped", ContainerState.EXITED),
        ("stopping", ContainerState.RUNNING),
        ("configured", ContainerState.CREATED),
        ("initialized", ContainerState.CREATED),
        ("exited", ContainerState.EXITED),
        ("dead", ContainerState.DEAD),
        ("no such state", ContainerState.DEAD),
    ],
)
def test_podmans_states_are_read_as_dockers(state: str, expected: ContainerState) -> None:
    """A killed container that Podman lists as `stopped` is started again in place: read
    as `dead` (a state a start cannot leave) it was replaced instead (1 kill in 6)."""
    (c,) = RowCache().parse([row("a", State=state, Status="Exited (137) 1 second ago")])
    assert c.state is expected
