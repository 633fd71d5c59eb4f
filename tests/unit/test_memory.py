"""healerd.daemon.memory: the mmap threshold is fixed once, and an operator's own
MALLOC_MMAP_THRESHOLD_ is left alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from healerd.daemon import memory


def test_the_threshold_is_fixed_on_glibc() -> None:
    # In a process of its own: this one's malloc stays as the test run had it.
    code = "from healerd.daemon.memory import keep_large_blocks_in_mmap as k; print(k())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_an_operators_own_threshold_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert memory.keep_large_blocks_in_mmap() is False
