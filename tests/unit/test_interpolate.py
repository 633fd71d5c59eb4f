"""Compose's interpolation in service files (issue 16): the forms of the specification,
values from `<name>.env` beside the file and from the environment (which wins), errors
that name file, line and field but never a value."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from healerd.config import load_service_file, parse_service_text

ENV = {"TAG": "1.36", "PORT": "8080", "EMPTY": "", "N": "3", "SECRET": "s3cret-pin-123456"}


def spec_of(body: str, env: dict[str, str] = ENV) -> object:
    text = "services:\n  web:\n" + textwrap.indent(textwrap.dedent(body), "    ")
    result = parse_service_text(text, "web.yaml", env=env)
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None
    return result.services["web"]


def errors_of(body: str, env: dict[str, str] = ENV) -> list[str]:
    text = "services:\n  web:\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return [str(e) for e in parse_service_text(text, "web.yaml", env=env).errors]


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("busybox:${TAG}", "busybox:1.36"),
        ("busybox:$TAG", "busybox:1.36"),
        ("busybox:${NOPE:-1.35}", "busybox:1.35"),
        ("busybox:${EMPTY:-1.34}", "busybox:1.34"),
        ("busybox:1${EMPTY-.33}", "busybox:1"),
        ("busybox:${NOPE-${TAG}}", "busybox:1.36"),
        ("busybox:${TAG:+1.0}", "busybox:1.0"),
        ("busybox:1${NOPE:+.0}", "busybox:1"),
    ],
)
def test_the_forms_of_the_specification(written: str, read: str) -> None:
    assert spec_of(f"image: {written}\n").image == read  # type: ignore[attr-defined]


def test_dollar_dollar_is_a_literal_dollar_and_numbers_become_numbers() -> None:
    s = spec_of(
        """\
        image: busybox:1.36
        command: ["sh", "-c", "echo $$HOME"]
        replicas: ${N}
        ports: ["${PORT}"]
        """
    )
    assert s.command == ("sh", "-c", "echo $HOME")  # type: ignore[attr-defined]
    assert s.replicas == 3  # type: ignore[attr-defined]
    assert s.ports[0].container_port == 8080  # type: ignore[attr-defined]


def test_a_quoted_substitution_stays_a_string() -> None:
    assert errors_of('image: busybox\nreplicas: "${N}"\n') == [
        "web.yaml:4:5: services.web.replicas: must be a whole number, not a string"
    ]


def test_required_variables_fail_with_file_line_and_field_never_a_value() -> None:
    found = errors_of("image: busybox\nuser: ${NOPE:?set the user}\nhostname: ${EMPTY:?}\n")
    assert found == [
        "web.yaml:4:5: services.web.user: required variable NOPE is not set: set the user",
        "web.yaml:5:5: services.web.hostname: required variable EMPTY is empty: ",
    ]
    bad = errors_of("image: busybox\nhostname: ${SECRET\n")
    assert bad == ["web.yaml:4:5: services.web.hostname: a '${' is not closed by '}'"]
    assert all("s3cret" not in e for e in bad + found)


def test_an_unset_variable_is_an_empty_string_with_a_warning_as_in_compose(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="healerd.config"):
        s = spec_of("image: busybox\nenvironment: {DB_PASSWORD: pa$word}\n")
    assert s.environment == (("DB_PASSWORD", "pa"),)  # type: ignore[attr-defined]
    assert (
        "web.yaml:4:19: services.web.environment.DB_PASSWORD: variable word is not set, an "
        "empty string is used: set it in the file's .env, give a default (${word:-}), make it "
        "required (${word:?reason}) or write $$ for a literal $"
    ) in caplog.text
    assert spec_of("image: busybox\nhostname: gw${UNSET:-}\n").hostname == "gw"  # type: ignore[attr-defined]


def test_substituted_text_stays_text_in_environment_and_labels() -> None:
    s = spec_of(
        "image: busybox\nenvironment:\n  PORT: ${PORT}\n  FLAG: ${T}\n  ANSWER: ${Y}\n"
        "labels:\n  ver: ${TAG}\nprivileged: ${T}\n",
        env={**ENV, "T": "true", "Y": "yes"},
    )
    assert dict(s.environment) == {"PORT": "8080", "FLAG": "true", "ANSWER": "yes"}  # type: ignore[attr-defined]
    assert dict(s.labels) == {"ver": "1.36"}  # type: ignore[attr-defined]
    assert s.privileged is True  # type: ignore[attr-defined]


def test_the_message_of_a_required_variable_is_shown_as_written() -> None:
    found = errors_of("image: busybox\nuser: ${NOPE:?set it, not ${SECRET}}\n")
    assert found == [
        "web.yaml:4:5: services.web.user: required variable NOPE is not set: set it, not ${SECRET}"
    ]


def test_keys_are_never_interpolated() -> None:
    labels = spec_of("image: busybox\nlabels:\n  ${TAG}: x\n").labels  # type: ignore[attr-defined]
    assert labels == (("${TAG}", "x"),)


def test_the_files_env_file_gives_values_and_a_listed_environment_variable_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "stack.yaml").write_text(
        "services:\n  web:\n    image: busybox:${TAG}\n    hostname: ${HOST}\n"
    )
    (tmp_path / "stack.env").write_text("TAG=1.35\nHOST=from-file\n")
    monkeypatch.setenv("HOST", "from-env")
    monkeypatch.setenv("TAG", "from-env")
    monkeypatch.delenv("NOT_SET", raising=False)
    # Only what interpolate_environment lists comes from healerd's environment.
    result = load_service_file(tmp_path / "stack.yaml", environment=("HOST", "NOT_SET"))
    assert result.errors == ()
    assert result.services is not None
    web = result.services["web"]
    assert (web.image, web.hostname) == ("busybox:1.35", "from-env")
    plain = (load_service_file(tmp_path / "stack.yaml").services or {})["web"]
    assert (plain.image, plain.hostname) == ("busybox:1.35", "from-file")


def test_a_linked_compose_file_keeps_its_project_directory_and_env(tmp_path: Path) -> None:
    project = tmp_path / "iotstack"
    project.mkdir()
    (project / "docker-compose.yml").write_text(
        "services:\n  mqtt:\n    image: eclipse-mosquitto:${TAG}\n"
        "    volumes: [./volumes/mosquitto:/mosquitto/data]\n"
    )
    (project / ".env").write_text("TAG=2.0\n")
    confd = tmp_path / "conf.d"
    confd.mkdir()
    (confd / "iotstack.yaml").symlink_to(project / "docker-compose.yml")
    result = load_service_file(confd / "iotstack.yaml")
    assert result.errors == ()
    spec = (result.services or {})["mqtt"]
    assert spec.image == "eclipse-mosquitto:2.0"
    assert spec.volumes[0].source == str(project.resolve() / "volumes/mosquitto")
    # A <name>.env beside the link in conf.d wins over the project's .env.
    (confd / "iotstack.env").write_text("TAG=2.1\n")
    again = load_service_file(confd / "iotstack.yaml")
    assert (again.services or {})["mqtt"].image == "eclipse-mosquitto:2.1"


def test_x_healerd_project_directory_names_a_project_kept_elsewhere(tmp_path: Path) -> None:
    project = tmp_path / "stack"
    project.mkdir()
    (project / ".env").write_text("TAG=3\n")
    confd = tmp_path / "conf.d"
    confd.mkdir()
    (confd / "stack.yaml").write_text(
        f"x-healerd: {{project_directory: {project}}}\n"
        "services:\n  a:\n    image: busybox:${TAG}\n    volumes: [./data:/data]\n"
    )
    result = load_service_file(confd / "stack.yaml")
    assert result.errors == ()
    spec = (result.services or {})["a"]
    assert spec.image == "busybox:3" and spec.volumes[0].source == str(project / "data")
    (confd / "bad.yaml").write_text("x-healerd:\n  project_directory: ./nope\nservices: {}\n")
    (bad,) = load_service_file(confd / "bad.yaml").errors
    assert str(bad) == (
        f"{confd / 'bad.yaml'}:2: x-healerd.project_directory: './nope' is not a directory "
        "(absolute, or from the file's)"
    )
