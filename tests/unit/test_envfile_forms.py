"""env_file as Compose v2 writes it: the long syntax (`path`, `required`), mixed with
paths, and a `KEY` named alone in an env file or in a project's `.env`."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from healerd.config import load_service_file, read_env_files
from healerd.config.envfile import parse_env_text
from healerd.config.projectdir import load_project_dir
from healerd.config.servicefile import FileResult
from tests.unit.harness.documents import load, validator
from tests.unit.harness.projects import good, write

SECRET = "s3cr3t-value"
LONG = """\
services:
  app:
    image: busybox
    env_file:
      - base.env
      - path: ./default.env
        required: true
      - path: ./override.env
        required: false
"""


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    (tmp_path / "conf.d").mkdir()
    return tmp_path / "conf.d"


def loaded(conf: Path, text: str) -> FileResult:
    return load_service_file(write(conf / "app.yaml", text))


def test_long_syntax_mixed_with_paths(conf: Path) -> None:
    write(conf / "base.env", "A=1\nB=1\n")
    write(conf / "default.env", f"B=2\nTOKEN={SECRET}\n")
    write(conf / "override.env", "A=3\n")
    spec = good(loaded(conf, LONG))["app"]
    names = ("base.env", "default.env", "override.env")
    assert spec.env_files == tuple(str(conf / n) for n in names)
    assert read_env_files(spec) == (("A", "3"), ("B", "2"), ("TOKEN", SECRET))
    assert SECRET not in repr(spec) and len(spec.env_digest) == 64
    # A mapping only as an item, as in Compose (compose-go's transformEnvFile).
    alone = "services:\n  app:\n    image: busybox\n    env_file: {path: base.env}\n"
    [error] = loaded(conf, alone).errors
    assert (error.field, error.reason) == (
        "services.app.env_file",
        "must be a path or a list of paths, not a mapping",
    )


def test_required_false_skips_a_missing_file_only(conf: Path) -> None:
    write(conf / "base.env", "A=1\n")
    write(conf / "default.env", "B=2\n")
    spec = good(loaded(conf, LONG))["app"]  # override.env is missing: skipped
    assert spec.env_files == (str(conf / "base.env"), str(conf / "default.env"))
    assert read_env_files(spec) == (("A", "1"), ("B", "2"))
    (conf / "default.env").unlink()  # required (the default too): still an error
    result = loaded(conf, LONG.replace("        required: true\n", ""))
    [error] = result.errors
    assert error.field == "services.app.env_file[1].path" and error.line == 6
    assert "default.env: cannot read: No such file or directory" in error.reason


def test_an_optional_file_that_exists_is_checked_like_any_other(conf: Path) -> None:
    write(conf / "base.env", "A=1\n")
    write(conf / "default.env", "B=2\n")
    write(conf / "override.env", f"A='{SECRET}\n")
    [error] = loaded(conf, LONG).errors
    assert error.field == "services.app.env_file[2].path"
    assert f"{conf / 'override.env'}:1: the single quote is not closed" in error.reason
    assert SECRET not in str(error)


@pytest.mark.parametrize(
    ("entry", "field", "reason"),
    [
        ("{path: a.env, format: raw}", "[0].format", "is not supported: healerd reads"),
        ("{path: a.env, required: 'no'}", "[0].required", "must be true or false"),
        ("{required: false}", "[0].path", "is required: the env file's path"),
        ("{path: a.env, requierd: false}", "[0].requierd", "did you mean 'required'"),
        ("[a.env]", "[0]", "must be a path, or a mapping with path and required"),
        ("{path: ./a.env}, a.env", "[1]", "'a.env' is listed twice"),
    ],
)
def test_long_syntax_errors_name_the_field(conf: Path, entry: str, field: str, reason: str) -> None:
    write(conf / "a.env", "A=1\n")
    text = f"services:\n  app:\n    image: busybox\n    env_file: [{entry}]\n"
    result = loaded(conf, text)
    assert result.services is None
    assert [e.field for e in result.errors] == [f"services.app.env_file{field}"]
    assert reason in result.errors[0].reason


def test_the_schema_takes_the_long_syntax() -> None:
    check = validator()
    assert list(check.iter_errors(load(LONG, "t.yaml"))) == []
    raw = LONG.replace("required: false", "format: raw")
    assert list(check.iter_errors(load(raw, "t.yaml"))) != []


def test_an_override_file_adds_an_optional_env_file(tmp_path: Path) -> None:
    write(tmp_path / "compose.yaml", "services:\n  w:\n    image: busybox\n    env_file: a.env\n")
    write(tmp_path / "compose.override.yaml", LONG.replace("app:", "w:").replace("base", "a"))
    write(tmp_path / "a.env", "A=1\n")
    write(tmp_path / "default.env", "D=1\n")
    spec = good(load_project_dir(tmp_path))["w"]
    assert spec.env_files == (str(tmp_path / "a.env"), str(tmp_path / "default.env"))


# --- A name alone ------------------------------------------------------------------------


def test_a_name_alone_takes_the_lookup_or_is_left_out() -> None:
    # compose-go's dotenv parser: `KEY` takes KEY from its lookup (the project's variables,
    # then the lines above and earlier files), and is left out when none has it.
    left_out: list[tuple[int, str]] = []
    text = "A=1\nA\nexport FROM_ENV\nUNSET\nEARLIER\n"
    over, earlier = {"FROM_ENV": "env"}, {"EARLIER": "before"}
    pairs, errors = parse_env_text(text, ".env", over=over, earlier=earlier, left_out=left_out)
    assert (dict(pairs), errors) == ({"A": "1", "FROM_ENV": "env", "EARLIER": "before"}, [])
    assert left_out == [(4, "UNSET")]
    # A service's env file is read without the project's variables: left out.
    assert parse_env_text("A=1\nFROM_ENV\n", "app.env") == ((("A", "1"),), [])


def test_a_name_alone_in_a_project_s_dotenv(conf: Path) -> None:
    write(conf / "app.env", "TAG=1.36\nTAG\nNOT_SET\n")
    text = "services:\n  app:\n    image: busybox:${TAG}\n    environment: [NOT_SET]\n"
    spec = good(loaded(conf, text))["app"]
    assert spec.image == "busybox:1.36" and spec.environment == ()


def test_a_name_alone_in_a_service_env_file_is_left_out_with_a_warning(
    conf: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(conf / "app.env", "TZ\nA=1\nNOT_SET\n")  # app.env is also the file's variables
    write(conf / "web.env", "A\nLOCAL=1\nNOWHERE\n")
    text = "services:\n  app:\n    image: busybox\n    env_file: web.env\n"
    with caplog.at_level(logging.WARNING, logger="healerd.config"):
        spec = good(loaded(conf, text))["app"]
    assert read_env_files(spec) == (("LOCAL", "1"),)
    assert f"{conf / 'web.env'}:1: A alone is left out" in caplog.text
    assert "[A]" in caplog.text and "NOWHERE" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="healerd.config"):
        good(loaded(conf, text))  # a reload (the resync's): told once
    assert "alone is left out" not in caplog.text
