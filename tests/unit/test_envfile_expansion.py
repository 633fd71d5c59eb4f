"""`${VAR}` in a project's `.env`, expanded as compose-go's dotenv parser does (unquoted
and double-quoted values, from the allowed environment first, then earlier lines;
single quotes, `$$` and a double-quoted `\\$` literal), never showing a value; a
service's `env_file` stays literal."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from healerd.config import load_service_file
from healerd.config.envfile import effective_environment, parse_env_text
from healerd.config.projectdir import load_project_dir
from tests.unit.harness.projects import good, write

SECRET = "s3cret-Zq7"


def expanded(text: str, over: dict[str, str] | None = None) -> dict[str, str]:
    pairs, errors = parse_env_text(textwrap.dedent(text), ".env", over=over or {})
    assert errors == [], [str(e) for e in errors]
    return dict(pairs)


def test_the_forms_compose_go_expands() -> None:
    """compose-go's dotenv fixtures (substitutions.env) and TestExpanding."""
    assert expanded(
        """\
        A=1
        B=${A}
        C=$B
        D=${A}_${B}
        E=${NOT_DEFINED}
        F=${NOT_DEFINED:-dflt}
        G="quote $A"
        H='quote $A'
        I="foo\\$A"
        J="foo\\${A} ${A}"
        K=a$$b
        L=${A:+alt}
        """
    ) == {
        "A": "1",
        "B": "1",
        "C": "1",
        "D": "1_1",
        "E": "",
        "F": "dflt",
        "G": "quote 1",
        "H": "quote $A",
        "I": "foo$A",
        "J": "foo${A} 1",
        "K": "a$b",
        "L": "alt",
    }


def test_the_environment_wins_over_the_files_own_lines() -> None:
    """compose-go looks up its environment first, then the variables read so far."""
    assert expanded("A=file\nB=${A}\nA=${A}-again\n", over={"A": "env"}) == {
        "A": "env-again",
        "B": "env",
    }


def test_an_env_file_is_not_expanded_without_project_variables() -> None:
    pairs, errors = parse_env_text('A=1\nB=$A\nC="x\\$y"\n', "vars.env")
    assert errors == [] and dict(pairs) == {"A": "1", "B": "$A", "C": "x$y"}


def test_errors_and_warnings_never_show_a_value(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="healerd.config")
    text = (
        f'A=${{REQUIRED:?set REQUIRED}}\nB={SECRET}${{oops\nC="{SECRET}${{1x}}"\nD={SECRET}$UNSET\n'
    )
    pairs, errors = parse_env_text(text, ".env", over={})
    assert [(e.line, e.field) for e in errors] == [
        (1, "env_file.A"),
        (2, "env_file.B"),
        (3, "env_file.C"),
    ]
    assert "required variable REQUIRED is not set: set REQUIRED" in errors[0].reason
    assert dict(pairs) == {"D": SECRET}
    shown = [str(e) for e in errors] + [r.getMessage() for r in caplog.records]
    assert all(SECRET not in s for s in shown), shown
    assert any("variable UNSET is not set" in r.getMessage() for r in caplog.records)


SERVICE = """\
services:
  web:
    image: ${IMAGE}
    env_file: vars.env
"""


def test_a_single_files_dotenv_is_expanded_and_its_env_file_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REGISTRY", "registry.local")
    write(tmp_path / "app.env", "TAG=1.36\nIMAGE=${REGISTRY}/busybox:${TAG}\n")
    write(tmp_path / "vars.env", "A=$TAG\n")
    path = write(tmp_path / "app.yaml", SERVICE)
    spec = good(load_service_file(path, environment=["REGISTRY"]))["web"]
    assert spec.image == "registry.local/busybox:1.36"
    assert dict(effective_environment(spec)) == {"A": "$TAG"}  # read at create, literally


def test_a_project_directorys_dotenv_is_expanded(tmp_path: Path) -> None:
    write(tmp_path / ".env", "TAG=1.36\nREF=\"busybox:${TAG}\"\nLIT='v${TAG}'\n")
    write(
        tmp_path / "compose.yaml",
        "services:\n  web:\n    image: ${REF}\n    environment: {L: $LIT}\n",
    )
    spec = good(load_project_dir(tmp_path))["web"]
    assert (spec.image, spec.environment) == ("busybox:1.36", (("L", "v${TAG}"),))


def test_an_expansion_error_in_the_dotenv_refuses_the_project_without_the_value(
    tmp_path: Path,
) -> None:
    write(tmp_path / ".env", f"IMAGE={SECRET}${{NEEDED:?give NEEDED}}\n")
    write(tmp_path / "vars.env", "")
    write(tmp_path / "compose.yaml", SERVICE)
    result = load_project_dir(tmp_path)
    assert result.services is None
    assert [
        f"{e.line}: {e.field}: {e.reason}" for e in result.errors if e.file.endswith(".env")
    ] == ["1: env_file.IMAGE: required variable NEEDED is not set: give NEEDED"]
    assert all(SECRET not in str(e) for e in result.errors)
