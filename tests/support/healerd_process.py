"""healerd as the operator runs it: a separate process with a config dir of its own."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.polling import wait_for
from tests.support.processes import terminate

REPO = Path(__file__).resolve().parents[2]
READY = " ready: "  # healerd logs it (at info) once its signal handlers are in place


class Healerd:
    """`python -m healerd --config-dir DIR --docker-host URL --socket DIR/healerd.sock`.

    - `log_level`: passed as --log-level (None: whatever healerd.yaml says);
    - `ready_timeout`: start() waits this long for READY in the log, since a signal sent
      before healerd installed its handlers would kill it (None: start() returns at once,
      for a log level above info);
    - `pidfile`: written at start, deleted at stop, so that a later run can reap a
      healerd that its runner left behind;
    - `new_session`: healerd in a session of its own (a Ctrl-C reaches the runner only).
    """

    def __init__(
        self,
        config_dir: Path,
        docker_host: str,
        log_path: Path,
        *,
        log_level: str | None = "debug",
        ready_timeout: float | None = 15.0,
        pidfile: Path | None = None,
        new_session: bool = False,
    ) -> None:
        self.config_dir = config_dir
        self.docker_host = docker_host
        self.log_path = log_path
        self.socket = config_dir / "healerd.sock"
        # The host key (issue 15): kept across restarts, like /var/lib/healerd.
        self.state_dir = config_dir / "state"
        self.log_level = log_level
        self.ready_timeout = ready_timeout
        self.pidfile = pidfile
        self.new_session = new_session
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = 0  # how many times it was started
        self._log_offset = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, *extra: str) -> None:
        """Start healerd (`extra` goes to its command line, after the defaults)."""
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        level = ["--log-level", self.log_level] if self.log_level else []
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "healerd",
                    "--config-dir",
                    str(self.config_dir),
                    "--docker-host",
                    self.docker_host,
                    "--socket",
                    str(self.socket),
                    "--state-dir",
                    str(self.state_dir),
                    *level,
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONPATH=str(REPO)),
                start_new_session=self.new_session,
            )
        if self.pidfile is not None:
            self.pidfile.write_text(f"{self.proc.pid}\n")
        self.incarnation += 1
        if self.ready_timeout is None:
            return
        wait_for(
            "healerd ready",
            lambda: READY in self.log() or not self.alive(),
            self.ready_timeout,
            0.05,
        )
        if not self.alive():
            raise AssertionError(f"healerd exited at start:\n{self.log()[-3000:]}")

    def log(self, since_start: bool = True) -> str:
        """What healerd wrote to its log (since its last start, by default)."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            if since_start:
                f.seek(self._log_offset)
            return f.read().decode(errors="replace")

    def ctl(self, *args: str, timeout: float = 60) -> tuple[int, str, str]:
        """Run healerctl against this healerd: (exit code, stdout, stderr)."""
        p = subprocess.run(
            [sys.executable, "-m", "healerd.cli.healerctl", "--socket", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
        return p.returncode, p.stdout, p.stderr

    def api(self, path: str, **params: Any) -> Any:
        """GET `path` from healerd's local API (root's socket)."""
        from healerd.cli.client import Client

        return Client(str(self.socket), timeout=10).get(path, **params)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait: its exit code (None if it never started). SIGKILLed at the
        timeout, and then subprocess.TimeoutExpired is raised: it did not stop in time."""
        if self.proc is None:
            return None
        in_time = terminate(self.proc, timeout)
        if self.pidfile is not None:
            with contextlib.suppress(OSError):
                self.pidfile.unlink()
        if not in_time:
            raise subprocess.TimeoutExpired(self.proc.args, timeout)
        return self.proc.returncode
