"""Service files read healerd's own environment only for the names healerd.yaml's
interpolate_environment lists (security review 2026-12-01, L3 of the review, item 7 of
issue 29): credentials given to the daemon for a credential helper stay out of
containers."""

from __future__ import annotations

from pathlib import Path

import pytest

from healerd.cli.validate import validate
from healerd.config import SettingsError, load_settings
from healerd.core.clock import FakeClock
from healerd.daemon.main import Daemon
from tests.unit.harness.daemon import settings_for
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine

CALLER = "daemon-env-secret-AKIA"
APP = """\
services:
  web:
    image: busybox:1
    hostname: ${ALLOWED_NAME:-default-host}
    environment: {AWS_KEY: "${AWS_SECRET_ACCESS_KEY}", TZ: "${TZ:-UTC}"}
"""


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CALLER)  # a unit drop-in for ecr-login
    monkeypatch.setenv("ALLOWED_NAME", "from-healerd-env")
    monkeypatch.setenv("TZ", "Europe/Berlin")


def _daemon(tmp_path: Path, settings: str) -> Daemon:
    engine = FakeEngine(allow=LOOP_CALLS | {"identity"})
    d = Daemon(settings_for(tmp_path, file=settings), engine, FakeClock())
    (tmp_path / "conf.d" / "app.yaml").write_text(APP)
    d.reload()
    return d


def test_the_daemon_reads_only_the_listed_variables(tmp_path: Path) -> None:
    d = _daemon(tmp_path, "interpolate_environment: [ALLOWED_NAME, TZ, NOT_SET]\n")
    web = d.controller.desired.services["web"]
    assert web.hostname == "from-healerd-env"
    assert dict(web.environment) == {"AWS_KEY": "", "TZ": "Europe/Berlin"}
    # A reload applies a longer list (the key is reloadable).
    (tmp_path / "healerd.yaml").write_text("interpolate_environment: [AWS_SECRET_ACCESS_KEY]\n")
    d.reload()
    web = d.controller.desired.services["web"]
    assert dict(web.environment) == {"AWS_KEY": CALLER, "TZ": "UTC"}
    assert web.hostname == "default-host"


def test_by_default_no_variable_of_healerds_environment_is_read(tmp_path: Path) -> None:
    web = _daemon(tmp_path, "").controller.desired.services["web"]
    assert (web.hostname, dict(web.environment)) == ("default-host", {"AWS_KEY": "", "TZ": "UTC"})


def test_the_files_env_still_gives_values(tmp_path: Path) -> None:
    conf = tmp_path / "conf.d"
    conf.mkdir()
    env = conf / "app.env"
    env.write_text("AWS_SECRET_ACCESS_KEY=from-the-file\n")
    env.chmod(0o600)
    web = _daemon(tmp_path, "").controller.desired.services["web"]
    assert dict(web.environment)["AWS_KEY"] == "from-the-file"


@pytest.mark.parametrize(
    "value", ["ALLOWED_NAME", "[1ABC]", '["A B"]', "[[A]]", "[A, {B: 1}]", "[A-B]"]
)
def test_names_must_be_variable_names(tmp_path: Path, value: str) -> None:
    path = tmp_path / "healerd.yaml"
    path.write_text(f"interpolate_environment: {value}\n")
    with pytest.raises(SettingsError, match="interpolate_environment"):
        load_settings(path)


def test_validate_reads_what_the_daemon_would(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "app.yaml").write_text(
        "services:\n  web:\n    image: busybox:1\n    hostname: ${ALLOWED_NAME:?required}\n"
    )
    report = validate([tmp_path])
    assert [e.reason for e in report.errors] == [
        "required variable ALLOWED_NAME is not set: required"
    ]
    (tmp_path / "healerd.yaml").write_text("interpolate_environment: [ALLOWED_NAME]\n")
    assert validate([tmp_path]).ok
