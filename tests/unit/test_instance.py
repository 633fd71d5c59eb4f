"""Two healerd instances for one engine must not both act."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from healerd.daemon import instance


def test_a_second_lock_on_the_same_engine_is_refused(tmp_path: Path) -> None:
    fd = instance.acquire("unix:///x.sock", tmp_path)
    try:
        with pytest.raises(instance.AlreadyRunning, match=rf"pid {os.getpid()}.*unix:///x.sock"):
            instance.acquire("unix:///x.sock", tmp_path)
        # Another engine is another lock.
        os.close(instance.acquire("unix:///y.sock", tmp_path))
    finally:
        os.close(fd)
    os.close(instance.acquire("unix:///x.sock", tmp_path))


def test_the_lock_dies_with_its_process(tmp_path: Path) -> None:
    code = (
        "import sys, os; sys.path.insert(0, sys.argv[1]);"
        "from pathlib import Path; from healerd.daemon import instance;"
        "instance.acquire('unix:///z.sock', Path(sys.argv[2])); os.kill(os.getpid(), 9)"
    )
    repo = str(Path(__file__).resolve().parents[2])
    p = subprocess.run([sys.executable, "-c", code, repo, str(tmp_path)], check=False)
    assert p.returncode == -9
    os.close(instance.acquire("unix:///z.sock", tmp_path))


def test_two_addresses_of_one_socket_share_a_lock(tmp_path: Path) -> None:
    real = tmp_path / "docker.sock"
    real.touch()
    link = tmp_path / "link.sock"
    link.symlink_to(real)
    fd = instance.acquire(f"unix://{real}", tmp_path)
    try:
        with pytest.raises(instance.AlreadyRunning):
            instance.acquire(f"unix://{link}", tmp_path)
    finally:
        os.close(fd)
