"""Whether the last run of healerd stopped cleanly: a file in `state_dir` while it runs.

Not a database: it says one thing about the last run (that it ended without its clean
stop: a crash, a `kill -9`, a power loss), which nothing in the engine can say, so that
someone is told (the `healerd` notice). Lost, it costs that notice and nothing else.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from healerd.daemon.atomicfile import write_atomic

log = logging.getLogger("healerd")

MARKER = "running"


def began(state_dir: Path, pid: int) -> bool:
    """Mark this run; True when the last one's mark was still there."""
    path = state_dir / MARKER
    unclean = path.exists()
    try:
        write_atomic(path, f"{pid}\n".encode())
    except OSError as exc:
        log.debug("cannot mark the run in %s: %s", state_dir, exc)
    return unclean


def ended(state_dir: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(state_dir / MARKER)


__all__ = ["MARKER", "began", "ended"]
