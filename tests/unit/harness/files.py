"""Files on disk: directories that pass healerd's strict checks, user-owned ones, the unit file."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[3] / "systemd" / "healerd.service"


def service_section(path: Path) -> dict[str, list[str]]:
    """[Service] of a unit file: each key with its values, in order (keys may repeat)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


NOBODY = 65534


as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making user-owned files needs root")


def _trusted_chain(path: Path) -> bool:
    """Whether `path` and every directory above it is owned by root or this user and not
    writable by group or others (judged here independently of the code under test)."""
    for part in (path, *path.parents):
        st = os.stat(part)
        if st.st_uid not in (0, os.geteuid()) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
    return True


@contextlib.contextmanager
def trusted_tmp_dir() -> Iterator[Path]:
    """A fresh directory (mode 0755) whose every component up to / passes the strict
    check, removed afterwards: under pytest's temporary root (tests/conftest.py moves it
    out of /tmp when run as root) or $TMPDIR if either is trusted, else under $HOME."""
    roots = [os.environ.get("PYTEST_DEBUG_TEMPROOT"), tempfile.gettempdir(), str(Path.home())]
    bases = [Path(r).resolve() for r in roots if r]
    for base in bases:
        if not base.is_dir() or not _trusted_chain(base):
            continue
        try:
            path = Path(tempfile.mkdtemp(prefix="healerd-test-", dir=base))
        except OSError:
            continue
        os.chmod(path, 0o755)
        try:
            yield path
        finally:
            shutil.rmtree(path)
        return
    pytest.skip("no directory here whose every component only root (or this user) can write")


def user_dir(path: Path) -> Path:
    """A directory owned by nobody (0755): what a local user would own."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o755)
    os.chown(path, NOBODY, NOBODY)
    return path


def conf_d(root: Path) -> Path:
    conf = root / "etc-healerd" / "conf.d"
    conf.mkdir(parents=True)
    os.chmod(conf.parent, 0o755)
    os.chmod(conf, 0o755)
    return conf
