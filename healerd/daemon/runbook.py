"""The run book's file: what healerd keeps of the containers it restarts in place
(healerd.core.runs says what and why), `runs.json` in the state directory.

Read once at start. A save hands the runs to a writer thread and returns: a heal must
not wait on an fsync, and a burst of heals (a storm) coalesces into one write of the
latest runs. A stop writes what is pending. An unreadable file is a warning: every
streak starts again at 0, nothing else changes.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path

from healerd.core.runs import Run, from_json, to_json
from healerd.daemon.atomicfile import write_atomic

log = logging.getLogger("healerd.runbook")

FILE = "runs.json"


class FileRunBook:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE
        self._cond = threading.Condition()
        self._pending: dict[str, Run] | None = None
        self._writing = False
        self._thread: threading.Thread | None = None

    def load(self) -> Mapping[str, Run]:
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable (%s): crash-loop streaks start again", self.path, exc)
            return {}
        return from_json(data)

    def save(self, runs: Mapping[str, Run]) -> None:
        with self._cond:
            self._pending = dict(runs)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="healerd-runbook", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until what was saved is written (at a stop)."""
        with self._cond:
            self._cond.wait_for(lambda: self._pending is None and not self._writing, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None)
                runs, self._pending, self._writing = self._pending, None, True
            try:
                self._write(runs or {})
            finally:
                with self._cond:
                    self._writing = False
                    self._cond.notify_all()

    def _write(self, runs: Mapping[str, Run]) -> None:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(to_json(runs), sort_keys=True).encode())
        except OSError as exc:
            log.warning("cannot write %s (%s): a restart of healerd resets streaks", self.path, exc)


__all__ = ["FILE", "FileRunBook"]
