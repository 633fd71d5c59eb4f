"""`${VAR}` in a project's `.env`, expanded as compose-go's dotenv parser does (unquoted
and double-quoted values, from the allowed environment first, then earlier lines;
single quotes, `$$` and a double-quoted `\\$` literal), never showing a value; a
service's `env_file` stays literal."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from healerd.config import load_conf_dir, load_service_file
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
        E=${NOT_DEFINED:-}
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
        (4, "env_file.D"),
    ]
    # The message of a `?` and the name after a `$` may be pieces of the secret.
    assert errors[0].reason == "a required variable of this value is not set"
    assert "names a variable that is not set (not shown): write $$" in errors[3].reason
    assert dict(pairs) == {}
    shown = [str(e) for e in errors] + [r.getMessage() for r in caplog.records]
    assert all(SECRET not in s and "UNSET" not in s for s in shown), shown


def test_a_dollar_in_a_password_refuses_the_file_without_a_piece_of_it() -> None:
    """Review: `PW=Xk9$Tr0ub4dor3`, literal before `.env`s were expanded, became `Xk9`
    with a warning naming `Tr0ub4dor3` (the rest of the password), and the container
    was replaced with it. It is an error now, naming neither; `$$` or quotes keep it."""
    pairs, errors = parse_env_text("PW=Xk9$Tr0ub4dor3\n", ".env", over={})
    assert pairs == () and [(e.line, e.field) for e in errors] == [(1, "env_file.PW")]
    assert "Tr0ub4dor3" not in str(errors[0]) and "Xk9" not in str(errors[0])
    for kept in ("PW=Xk9$$Tr0ub4dor3", "PW='Xk9$Tr0ub4dor3'"):
        assert parse_env_text(kept, ".env", over={}) == ((("PW", "Xk9$Tr0ub4dor3"),), [])


def test_values_that_double_line_after_line_are_refused_within_a_bound() -> None:
    """Review: 24 lines of `A{n}=${A{n-1}}${A{n-1}}` made a 128 MiB value (34: 256 GiB)."""
    lines = ["A0=" + "x" * 16] + [f"A{n}=${{A{n - 1}}}${{A{n - 1}}}" for n in range(1, 40)]
    pairs, errors = parse_env_text("\n".join(lines), ".env", over={})
    assert errors and "expands to more than a file may (1 MiB for a .env" in errors[0].reason
    assert sum(len(v) for _, v in pairs) <= 2**20
    wide = "A=" + "x" * 1000 + "\nB=" + "${A}" * 100_000
    assert "expands to more than" in parse_env_text(wide, ".env", over={})[1][0].reason


def test_nesting_too_deep_is_an_error_of_its_line_not_a_crash() -> None:
    deep = "X=" + "${X:-" * 1000 + "x" + "}" * 1000
    pairs, errors = parse_env_text(f"A=1\n{deep}\n", ".env", over={})
    assert dict(pairs) == {"A": "1"} and [(e.line, e.field) for e in errors] == [(2, "env_file.X")]
    assert "nested more than 32 deep" in errors[0].reason


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
    ] == ["1: env_file.IMAGE: a required variable of this value is not set"]
    assert all(SECRET not in str(e) for e in result.errors)


def test_a_service_file_that_repeats_a_long_value_is_refused_within_a_bound(
    tmp_path: Path,
) -> None:
    """A `${A}` a hundred thousand times over a 1 MiB value would have been 100 GB."""
    write(tmp_path / "w.env", "A=" + "x" * 1000 + "\n")
    write(tmp_path / "w.yaml", "services:\n  web:\n    image: busybox\n    command: ")
    with (tmp_path / "w.yaml").open("a") as f:
        f.write("'" + "${A}" * 20_000 + "'\n")
    [result] = load_conf_dir(tmp_path, strict_modes=False)
    assert result.services is None
    assert any("expands to more than a file may" in e.reason for e in result.errors)
