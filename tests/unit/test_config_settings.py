"""Daemon settings: defaults, overrides, and every error reported at once."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.config import Settings, SettingsError, check_settings, load_settings
from healerd.config.yamlload import load_yaml
from tests.support.config import trusted_copy
from tests.unit.harness.files import trusted_tmp_dir

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """Strict modes check every directory up to /, and pytest's own tmp_path is in /tmp
    (world-writable): these tests get a directory that passes (test_security_config)."""
    with trusted_tmp_dir() as path:
        yield path


def load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "healerd.yaml"
    path.write_text(text)
    return load_settings(path)


def errors_of(tmp_path: Path, text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(SettingsError) as info:
        load(tmp_path, text)
    return [(e.line, e.field, e.reason) for e in info.value.errors]


def test_defaults() -> None:
    s = Settings()
    assert s.config_dir == Path("/etc/healerd")
    assert s.docker_host is None
    assert s.socket_path == Path("/run/healerd/healerd.sock")
    assert (s.resync_interval, s.workers, s.log_level) == (30.0, 4, "info")
    assert (s.backoff_base, s.backoff_max) == (0.005, 60.0)
    assert (s.engine_timeout, s.engine_down_log_interval) == (30.0, 30.0)
    assert check_settings(s) == []


def test_missing_or_empty_file_means_defaults(tmp_path: Path) -> None:
    assert load_settings(tmp_path / "nope.yaml") == Settings()
    assert load(tmp_path, "") == Settings()
    assert load(tmp_path, "# nothing set\n") == Settings()


def test_shipped_example_lists_every_setting_at_its_default(tmp_path: Path) -> None:
    path = trusted_copy(REPO / "config" / "healerd.yaml", tmp_path)
    assert load_settings(path) == Settings()
    data, _ = load_yaml(path.read_text(), str(path))
    names = {f.name for f in dataclasses.fields(Settings)} - {"config_dir"}
    assert set(data) == names


def test_overrides(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        """
docker_host: tcp://10.0.0.1:2375
docker_insecure_tcp: true
socket_path: /tmp/h.sock
resync_interval: 1m30s
workers: 64
backoff_base: 10ms
backoff_max: 5
engine_timeout: 2.5
engine_down_log_interval: "45"
log_level: DEBUG
x-note: ignored
""",
    )
    assert s == Settings(
        docker_host="tcp://10.0.0.1:2375",
        docker_insecure_tcp=True,
        socket_path=Path("/tmp/h.sock"),
        resync_interval=90.0,
        workers=64,
        backoff_base=0.01,
        backoff_max=5.0,
        engine_timeout=2.5,
        engine_down_log_interval=45.0,
        log_level="debug",
    )
    assert isinstance(s.backoff_max, float)


def test_null_docker_host_means_default(tmp_path: Path) -> None:
    assert load(tmp_path, "docker_host: null\n").docker_host is None


def test_every_error_is_reported_with_its_line(tmp_path: Path) -> None:
    text = """
worker: 4
workers: 0
resync_interval: 0
engine_timeout: -1s
log_level: verbose
socket_path: run/healerd.sock
docker_host: ""
backoff_max: soon
config_dir: /srv
"""
    found = errors_of(tmp_path, text)
    assert [(line, field) for line, field, _ in found] == [
        (2, "worker"),
        (3, "workers"),
        (4, "resync_interval"),
        (5, "engine_timeout"),
        (6, "log_level"),
        (7, "socket_path"),
        (8, "docker_host"),
        (9, "backoff_max"),
        (10, "config_dir"),
    ]
    assert found[0][2] == "unknown key 'worker' (did you mean 'workers'?)"
    assert "1 to 64" in found[1][2]
    assert "greater than 0" in found[2][2]
    assert "debug, info, warning, error" in found[4][2]


@pytest.mark.parametrize("value", ["0", "65", "true", '"4"', "2.0", "[4]"])
def test_workers_range_and_type(tmp_path: Path, value: str) -> None:
    assert [f for _, f, _ in errors_of(tmp_path, f"workers: {value}\n")] == ["workers"]


@pytest.mark.parametrize("value", ["0", "0s", "-1", "abc", "true", ".inf", "[1]", "null"])
def test_intervals_must_be_positive_durations(tmp_path: Path, value: str) -> None:
    assert errors_of(tmp_path, f"resync_interval: {value}\n")[0][:2] == (1, "resync_interval")


def test_backoff_base_above_max(tmp_path: Path) -> None:
    found = errors_of(tmp_path, "backoff_max: 1s\nbackoff_base: 2s\n")
    assert [(line, field) for line, field, _ in found] == [(2, "backoff_base")]


def test_no_order_error_when_one_side_is_invalid(tmp_path: Path) -> None:
    found = errors_of(tmp_path, "backoff_max: nope\nbackoff_base: 100\n")
    assert [field for _, field, _ in found] == ["backoff_max"]


@pytest.mark.parametrize(
    "text", ["- a\n", "workers: [\n", "workers: 1\nworkers: 2\n", "3\n", "log_level: !!int\n"]
)
def test_malformed_files(tmp_path: Path, text: str) -> None:
    assert errors_of(tmp_path, text)


def test_unreadable_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "healerd.yaml").mkdir()
    with pytest.raises(SettingsError) as info:
        load_settings(tmp_path / "healerd.yaml")
    assert info.value.errors[0].field == "file"


def test_settings_error_message_lists_every_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as info:
        load(tmp_path, "workers: 0\nlog_level: loud\n")
    path = tmp_path / "healerd.yaml"
    assert str(info.value).splitlines() == [
        f"{path}:1: workers: must be a whole number from 1 to 64, not 0",
        f"{path}:2: log_level: must be one of debug, info, warning, error, not 'loud'",
    ]


def test_replace_and_check_overrides() -> None:
    s = dataclasses.replace(Settings(), workers=8, config_dir=Path("/srv/healerd"))
    assert (s.workers, s.config_dir) == (8, Path("/srv/healerd"))
    assert check_settings(s) == []
    bad = dataclasses.replace(Settings(), workers=0, backoff_base=100.0, log_level="x")
    assert [e.field for e in check_settings(bad, "cli")] == ["workers", "log_level", "backoff_base"]
    assert str(check_settings(bad, "cli")[0]).startswith("cli: workers:")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.workers = 1  # type: ignore[misc]


def test_history_limit_is_a_count_from_0_to_10(tmp_path: Path) -> None:
    assert load(tmp_path, "history_limit: 3\n").history_limit == 3
    assert load(tmp_path, "history_limit: 0\n").history_limit == 0
    for bad in ("-1", "11", "two", "true"):
        ((line, field, message),) = errors_of(tmp_path, f"history_limit: {bad}\n")
        assert (line, field) == (1, "history_limit") and "0 to 10" in message, message
