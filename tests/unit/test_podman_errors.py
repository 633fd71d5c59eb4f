"""Podman 4.3's Docker-compatible API answers some refusals otherwise than Docker: the
adapter reads both as the same engine-neutral error (issue 31)."""

from __future__ import annotations

import docker.errors
import pytest
import requests

from healerd.engine.api import EngineError, NameConflict
from healerd.engine.docker.errors import translated


def refusal(status: int, explanation: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError("refused", response=response, explanation=explanation)


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (409, 'Conflict. The container name "/web-1" is already in use by container "ab"'),
        (
            500,  # Podman 4.3
            'container create: creating container storage: the container name "web-1" is '
            "already in use by ab. You have to remove that container to be able to reuse "
            "that name: that name is already in use",
        ),
    ],
)
def test_a_taken_name_is_a_name_conflict_on_docker_and_podman(status: int, text: str) -> None:
    with pytest.raises(NameConflict), translated("create web-1"):
        raise refusal(status, text)


def test_a_port_already_in_use_is_no_name_conflict() -> None:
    with pytest.raises(EngineError) as caught, translated("start web-1"):
        raise refusal(
            500, "driver failed programming external connectivity: bind: address already in use"
        )
    assert not isinstance(caught.value, NameConflict)
