"""`include` (issue 34; compose-spec 14-include.md, newer than docker-compose 1.29.2, so
shown here against the specification's examples): short and long syntax, what each
entry hands to load_project, resources added, a name declared twice refused, cycles."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from healerd.config.errors import ConfigError
from healerd.config.include import resolve_include
from healerd.config.keys import At, Context
from healerd.config.servicefile import _document
from healerd.config.yamlload import LineDict, load_yaml

Call = tuple[list[Path], Path, list[Path]]


def _load(text: str, file: str) -> LineDict:
    data, errors = load_yaml(textwrap.dedent(text), file)
    assert not errors and isinstance(data, LineDict), errors
    return data


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _included(
    text: str, projects: dict[str, str]
) -> tuple[LineDict, list[str], list[Call], list[ConfigError]]:
    """/app/compose.yaml's `text` with its include resolved; `projects` maps the first
    path of each include to the project load_project returns for it."""
    errors: list[ConfigError] = []
    calls: list[Call] = []
    data = _load(text, "/app/compose.yaml")

    def load_project(paths: list[Path], directory: Path, env_files: list[Path]) -> LineDict | None:
        calls.append((paths, directory, env_files))
        found = projects.get(str(paths[0]))
        return None if found is None else _load(found, str(paths[0]))

    at = At(errors, "/app/compose.yaml", "", None, None, Context(Path("/app")))
    resolve_include(data, Path("/app/compose.yaml"), at, load_project)
    return data, [str(e) for e in errors], calls, errors


INCLUDED = """
    services:
      serviceB:
        image: busybox
        volumes: [./data:/data, cache:/cache]
        env_file: b.env
    volumes:
      cache: {}
    networks:
      back: {}
    secrets:
      token: {file: ./token.txt}
    configs:
      conf: {file: conf.txt}
"""


def test_the_specifications_example_service_b_is_used_as_if_declared_here() -> None:
    data, errors, calls, found = _included(
        """
        include:
          - my-compose-include.yaml  # with serviceB declared
        services:
          serviceA:
            image: busybox
            depends_on: [serviceB]
        """,
        {"/app/my-compose-include.yaml": "services:\n  serviceB: {image: busybox}\n"},
    )
    assert not errors and "include" not in data
    assert calls == [([Path("/app/my-compose-include.yaml")], Path("/app"), [])]
    assert list(data["services"]) == ["serviceA", "serviceB"]
    specs, _ = _document(data, At(found, "/app/compose.yaml", "", None, None, Context()))
    assert not found, found
    assert specs["serviceA"].depends_on[0].service == "serviceB"


def test_resources_are_added_with_the_included_projects_paths() -> None:
    data, errors, _, _ = _included(
        "include: [../commons/compose.yaml]\nservices:\n  web: {image: busybox}\n",
        {"/commons/compose.yaml": INCLUDED},
    )
    assert not errors
    assert _plain(data)["services"]["serviceB"] == {
        "image": "busybox",
        "volumes": ["/commons/data:/data", "cache:/cache"],
        "env_file": "/commons/b.env",
    }
    assert _plain(data)["secrets"] == {"token": {"file": "/commons/token.txt"}}
    assert _plain(data)["configs"] == {"conf": {"file": "/commons/conf.txt"}}
    assert list(data["volumes"]) == ["cache"] and list(data["networks"]) == ["back"]
    body = data["services"]["serviceB"]
    assert data["services"].file_of("serviceB") == "/commons/compose.yaml"
    assert body.file == "/commons/compose.yaml"  # its errors name its own file


def test_the_long_syntax() -> None:
    _, errors, calls, _ = _included(
        """
        include:
          - path: [../commons/compose.yaml, ./commons-override.yaml]
            project_directory: ..
            env_file: [../another/.env, ../another/dev.env]
          - path: /abs/compose.yaml
            env_file: /dev/null
          - path: lib/compose.yaml
            project_directory: /srv/lib
        """,
        {},
    )
    assert not errors
    assert calls == [
        (
            [Path("/commons/compose.yaml"), Path("/app/commons-override.yaml")],
            Path("/"),
            [Path("/another/.env"), Path("/another/dev.env")],
        ),
        ([Path("/abs/compose.yaml")], Path("/abs"), []),
        ([Path("/app/lib/compose.yaml")], Path("/srv/lib"), []),
    ]


def test_a_name_declared_here_and_in_an_included_project_is_refused() -> None:
    data, errors, _, _ = _included(
        """
        include: [a.yaml, b.yaml]
        services:
          serviceB: {image: other}
          same: {image: busybox}
        networks:
          back: {}
        """,
        {
            "/app/a.yaml": INCLUDED.replace(
                "\n    volumes:\n", "\n      same: {image: busybox}\n    volumes:\n"
            ),
            "/app/b.yaml": "services:\n  x: {image: busybox}\nvolumes:\n  cache: {driver: nfs}\n",
        },
    )
    assert errors == [
        "/app/compose.yaml:4:3: services.serviceB: is also declared by the included "
        "/app/a.yaml:3: Compose refuses a name declared both here and in an included project "
        "(rename one)",
        "/app/a.yaml:9:3: volumes.cache: is also declared by the included /app/b.yaml:4: "
        "Compose refuses a name declared both here and in an included project (rename one)",
    ]
    assert _plain(data["services"]["serviceB"]) == {"image": "other"}
    assert list(data["services"]) == ["serviceB", "same", "x"]  # the same twice: no error


def test_an_include_cycle_is_refused() -> None:
    errors: list[ConfigError] = []
    at = At(errors, "/app/compose.yaml", "", None, None, Context(Path("/app")))
    docs = {
        "/app/compose.yaml": "include: [lib/one.yaml]\n",
        "/app/lib/one.yaml": "include: [../compose.yaml]\nservices:\n  one: {image: x}\n",
    }

    def load_project(paths: list[Path], directory: Path, env_files: list[Path]) -> LineDict | None:
        data = _load(docs[str(paths[0])], str(paths[0]))
        nested = At(errors, str(paths[0]), "", None, None, Context(directory))
        resolve_include(data, paths[0], nested, load_project)
        return data

    data = _load(docs["/app/compose.yaml"], "/app/compose.yaml")
    resolve_include(data, Path("/app/compose.yaml"), at, load_project)
    assert [str(e) for e in errors] == [
        "/app/lib/one.yaml:1:11: include[0]: is a cycle: /app/compose.yaml -> "
        "/app/lib/one.yaml -> /app/compose.yaml"
    ]
    assert list(data["services"]) == ["one"]


def test_malformed_entries_are_reported_at_their_lines() -> None:
    data, errors, calls, _ = _included(
        """
        include:
          - 3
          - {project_directory: x}
          - {path: a.yaml, env: x}
          - {path: [a.yaml, 4]}
          - {path: a.yaml, project_directory: [x]}
        services:
          web: {image: busybox}
        """,
        {},
    )
    assert errors == [
        "/app/compose.yaml:3:5: include[0]: must be a path or a mapping with path, not a number",
        "/app/compose.yaml:4:5: include[1].path: is required: the Compose file (or files) to "
        "include",
        "/app/compose.yaml:5:20: include[2].env: unknown key: include takes path, "
        "project_directory, env_file",
        "/app/compose.yaml:6:6: include[3].path: must be a path or a list of paths, not a list",
        "/app/compose.yaml:7:20: include[4].project_directory: must be a path, not a list",
    ]
    assert len(calls) == 1  # the entry with only an unknown key beside its path
    assert "include" not in data


def test_include_must_be_a_list_and_a_project_that_cannot_be_read_adds_nothing() -> None:
    _, errors, _, _ = _included("include: a.yaml\n", {})
    assert errors == [
        "/app/compose.yaml:1:1: include: must be a list of paths or of mappings, not a string"
    ]
    data, errors, calls, _ = _included("include: [gone.yaml]\nservices: {}\n", {})
    assert not errors and len(calls) == 1 and not data["services"]
