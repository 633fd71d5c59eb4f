"""env_file: paths in the spec, values read on demand and never shown in errors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.config import (
    EnvFileError,
    effective_environment,
    env_digest,
    load_service_file,
    read_env_files,
)
from healerd.config.envfile import parse_env_text
from healerd.model import ServiceSpec
from tests.unit.harness.files import trusted_tmp_dir

SECRET = "s3cr3t-value"


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """Env files are read under strict modes at container creation, which check every
    directory up to /; pytest's own tmp_path is in /tmp (world-writable)."""
    with trusted_tmp_dir() as path:
        yield path


def write_service(tmp_path: Path, env_file: str, extra: str = "") -> Path:
    path = tmp_path / "conf.d" / "app.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"services:\n  app:\n    image: busybox\n    env_file: {env_file}\n{extra}")
    return path


def load(path: Path, strict: bool = False) -> ServiceSpec:
    result = load_service_file(path, strict_modes=strict)
    assert result.services is not None, [str(e) for e in result.errors]
    return result.services["app"]


def test_parse_env_text_forms() -> None:
    text = (
        "# comment\n"
        "\n"
        "PLAIN=value with spaces\n"
        "EMPTY=\n"
        "  INDENTED = x\n"
        "export EXPORTED=1\n"
        "SINGLE='a #literal \\n'\n"
        'DOUBLE="line\\nnext \\"q\\""  # trailing comment\n'
        "COMMENTED=v # note\n"
        "HASH=a#b\n"
        "EQ=a=b\n"
        "PLAIN=again\n"
    )
    pairs, errors = parse_env_text(text, "x.env")
    assert errors == []
    assert dict(pairs) == {
        "PLAIN": "again",
        "EMPTY": "",
        "INDENTED": "x",
        "EXPORTED": "1",
        "SINGLE": "a #literal \\n",
        "DOUBLE": 'line\nnext "q"',
        "COMMENTED": "v",
        "HASH": "a#b",
        "EQ": "a=b",
    }


@pytest.mark.parametrize(
    ("line", "text"),
    [
        (f"{SECRET}!", "is not KEY=VALUE"),  # alone, a name would be read: see below
        (f"1BAD={SECRET}", "the name before '='"),
        (f"K='{SECRET}", "single quote is not closed"),
        (f'K="{SECRET}', "double quote is not closed"),
        (f"K='{SECRET}' trailing", "text after the closing quote"),
    ],
)
def test_parse_errors_never_show_the_value(line: str, text: str) -> None:
    _, errors = parse_env_text(f"OK=1\n{line}\n", "x.env")
    [error] = errors
    assert error.line == 2 and error.file == "x.env"
    assert text in error.reason
    assert SECRET not in str(error)


def test_paths_resolve_relative_to_the_service_file(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "app.env").write_text(f"TOKEN={SECRET}\nA=1\n")
    (tmp_path / "shared.env").write_text("A=2\nB=3\n")
    path = write_service(tmp_path, "[app.env, ../shared.env]", "    environment: {B: '4'}\n")
    spec = load(path)
    assert spec.env_files == (str(tmp_path / "conf.d" / "app.env"), str(tmp_path / "shared.env"))
    assert SECRET not in repr(spec)  # only paths are kept
    assert read_env_files(spec) == (("A", "2"), ("B", "3"), ("TOKEN", SECRET))
    assert effective_environment(spec) == (("A", "2"), ("B", "4"), ("TOKEN", SECRET))


def test_a_single_path_string(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "app.env").write_text("A=1\n")
    assert load(write_service(tmp_path, "app.env")).env_files == (
        str(tmp_path / "conf.d" / "app.env"),
    )


def test_env_file_values_reach_the_hash_only_as_a_digest(tmp_path: Path) -> None:
    # Editing an env file must roll the containers, yet no value may sit in the spec.
    (tmp_path / "conf.d").mkdir()
    env = tmp_path / "conf.d" / "app.env"
    env.write_text(f"A={SECRET}\n")
    spec = load(write_service(tmp_path, "app.env"))
    plain = ServiceSpec(name="app", image="busybox")
    assert spec.spec_hash != plain.spec_hash
    digest = env_digest(spec)
    assert len(digest) == 64 and spec.env_digest == digest
    assert SECRET not in repr(spec)
    env.write_text("A=2\n")
    assert env_digest(spec) != digest
    assert load(write_service(tmp_path, "app.env")).spec_hash != spec.spec_hash
    env.write_text(f"A={SECRET}\n")
    assert load(write_service(tmp_path, "app.env")).spec_hash == spec.spec_hash
    assert env_digest(plain) == ""


def test_missing_or_broken_env_files_are_load_errors(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "bad.env").write_text(f"A=1\n{SECRET}!\n")
    path = write_service(tmp_path, "[missing.env, bad.env, 3]")
    result = load_service_file(path)
    assert result.services is None
    assert [(e.line, e.field) for e in result.errors] == [
        (4, "services.app.env_file[0]"),
        (4, "services.app.env_file[1]"),
        (4, "services.app.env_file[2]"),
    ]
    missing, bad, number = result.errors
    assert "missing.env: cannot read: No such file or directory" in missing.reason
    assert f"{tmp_path / 'conf.d' / 'bad.env'}:2: is not KEY=VALUE" in bad.reason
    assert "must be a path" in number.reason
    assert all(SECRET not in str(e) for e in result.errors)


def test_read_env_files_raises_without_the_value(tmp_path: Path) -> None:
    env = tmp_path / "app.env"
    env.write_text("A=1\n")
    spec = ServiceSpec(name="app", image="busybox", env_files=(str(env),))
    env.write_text(f"A='{SECRET}\n")
    with pytest.raises(EnvFileError) as caught:
        read_env_files(spec)
    assert caught.value.error.line == 1 and SECRET not in str(caught.value)
    env.unlink()
    with pytest.raises(EnvFileError, match="cannot read"):
        env_digest(spec)


def test_env_file_listed_twice(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "a.env").write_text("A=1\n")
    result = load_service_file(write_service(tmp_path, "[a.env, ./a.env]"))
    assert [e.reason for e in result.errors] == ["'./a.env' is listed twice"]


def test_strict_modes_refuse_a_group_writable_env_file(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    env = tmp_path / "conf.d" / "a.env"
    env.write_text("A=1\n")
    os.chmod(env, 0o664)
    path = write_service(tmp_path, "a.env")
    result = load_service_file(path, strict_modes=True)
    [error] = result.errors
    assert f"refused: env file {env} is writable by group (mode 0664" in error.reason
    assert load(path, strict=False).env_files == (str(env),)
