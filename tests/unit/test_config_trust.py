"""Strict modes: config that others than root or healerd's user could write is refused."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.config import DesiredStore, SettingsError, load_conf_dir, load_settings
from healerd.config.trust import mode_problem
from tests.unit.harness.files import trusted_tmp_dir

GOOD = "services:\n  web: {image: busybox}\n"


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """Strict modes check every directory up to /, and pytest's own tmp_path is in /tmp
    (world-writable): these tests get a directory that passes (test_security_config)."""
    with trusted_tmp_dir() as path:
        yield path


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    root = tmp_path / "etc-healerd"
    (root / "conf.d").mkdir(parents=True)
    os.chmod(root, 0o755)
    os.chmod(root / "conf.d", 0o755)
    (root / "conf.d" / "a.yaml").write_text(GOOD)
    return root / "conf.d"


def test_mode_problem() -> None:
    me = os.geteuid()
    assert mode_problem(Path("/x"), 0o100644, 0) is None
    assert mode_problem(Path("/x"), 0o100600, me) is None
    assert "writable by group (mode 0664, owner uid 0)" in (
        mode_problem(Path("/x"), 0o100664, 0) or ""
    )
    assert "writable by group and others" in (mode_problem(Path("/x"), 0o100666, 0) or "")
    other = 4242 if me != 4242 else 4243
    assert f"is owned by uid {other}, not root" in (mode_problem(Path("/x"), 0o100644, other) or "")


def test_trusted_files_load(conf: Path) -> None:
    [result] = load_conf_dir(conf)
    assert result.services is not None


def test_group_writable_file_is_refused_with_its_name(conf: Path) -> None:
    path = conf / "a.yaml"
    os.chmod(path, 0o664)
    [result] = load_conf_dir(conf)
    assert result.services is None
    [error] = result.errors
    assert error.file == str(path)
    assert str(error).startswith(
        f"{path}: file: refused: file {path} is writable by group (mode 0664, owner uid "
    )
    assert "strict_modes: false" in error.reason
    [result] = load_conf_dir(conf, strict_modes=False)
    assert result.services is not None


def test_a_refused_file_keeps_its_last_good_services(conf: Path) -> None:
    store = DesiredStore()
    assert "web" in store.update(load_conf_dir(conf)).services
    os.chmod(conf / "a.yaml", 0o646)
    (conf / "a.yaml").write_text("services:\n  other: {image: busybox}\n")
    state = store.update(load_conf_dir(conf))
    assert list(state.services) == ["web"]
    assert state.broken_files == (str(conf / "a.yaml"),)
    assert "writable by others" in state.errors[0].reason


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_file_owned_by_another_user_is_refused(conf: Path) -> None:
    os.chown(conf / "a.yaml", 4242, 4242)
    [result] = load_conf_dir(conf)
    assert "owned by uid 4242" in result.errors[0].reason


@pytest.mark.parametrize("which", ["conf.d", "config dir"])
def test_untrusted_directory_refuses_every_file_and_holds_orphans(conf: Path, which: str) -> None:
    store = DesiredStore()
    store.update(load_conf_dir(conf))
    directory = conf if which == "conf.d" else conf.parent
    os.chmod(directory, 0o777)
    (conf / "b.yaml").write_text("services:\n  evil: {image: busybox}\n")
    results = load_conf_dir(conf)
    assert [r.file for r in results] == [str(conf / "a.yaml"), str(conf / "b.yaml"), str(directory)]
    assert all(r.services is None for r in results)
    assert f"refused: directory {directory} is writable by group and others" in str(
        results[0].errors[0]
    )
    state = store.update(results)
    assert list(state.services) == ["web"]  # last good stands, the new file does not apply
    assert state.hold_orphans
    os.chmod(directory, 0o755)
    assert sorted(store.update(load_conf_dir(conf)).services) == ["evil", "web"]


def test_settings_file_is_checked_even_when_it_opts_out(tmp_path: Path) -> None:
    """healerd.yaml is what sets strict_modes, so it cannot turn its own check off."""
    path = tmp_path / "healerd.yaml"
    path.write_text("workers: 2\nstrict_modes: false\n")
    os.chmod(path, 0o666)
    with pytest.raises(
        SettingsError, match=r"refused: settings file .* is writable by group and others"
    ):
        load_settings(path)
    os.chmod(path, 0o644)
    settings = load_settings(path)
    assert settings.workers == 2 and settings.strict_modes is False


def test_strict_modes_setting() -> None:
    from healerd.config import Settings, check_settings

    assert Settings().strict_modes is True
    errors = check_settings(Settings(strict_modes="no"))  # type: ignore[arg-type]
    assert [e.field for e in errors] == ["strict_modes"]
