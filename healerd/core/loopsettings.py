"""What the loop is built with (its settings), and the key of its discovery pass."""

from __future__ import annotations

from dataclasses import dataclass, field

from healerd.core.timings import Timings

# The key of a pass that only looks for services with containers but no declaration.
DISCOVER = ""


@dataclass(frozen=True)
class LoopSettings:
    workers: int = 4
    parallel_actions: int = 8
    # Every recheck, backoff and window of the loop (healerd.core.timings).
    timings: Timings = field(default_factory=Timings)
    # Failed containers kept per replica after their replacement (logs, exit codes).
    history_limit: int = 1
    engine_down_log_interval: float = 30.0


__all__ = ["DISCOVER", "LoopSettings"]
