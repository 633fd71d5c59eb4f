"""Processes the suites start (dockerd, healerd) or find in pidfiles of runs that died."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


def terminate(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """SIGTERM and wait, SIGKILL at the timeout: True if it exited in time."""
    if proc.poll() is not None:
        return True
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def stop_pid(pid: int | None, must_contain: str, timeout: float) -> None:
    """SIGTERM, then SIGKILL at the timeout; only while the process's command line
    contains `must_contain` (a pid from a pidfile may have been reused since)."""
    if pid is None or not alive(pid) or must_contain not in cmdline(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid) and must_contain in cmdline(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
