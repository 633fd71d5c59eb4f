"""What healerd keeps of a container it heals in place, across its own restarts.

A container restarted in place keeps its id, so nothing new can carry its counts: its
labels were fixed at create, and the engine's own `RestartCount` counts only the
engine's restart policy and is reset by every API start. So the crash streak, the
restart count and the last termination of each container restarted in place live in a
small file in `state_dir` (written atomically by the daemon, healerd.daemon.runbook),
pruned to the containers the engine still lists. It is a cache of the backoff, not a
record of ownership (labels stay that): lost or unreadable, the streaks start again at
0 and nothing else changes.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from healerd.model import ObservedContainer


@dataclass(frozen=True)
class Termination:
    """How a run ended, as the loop learned it (`at`: wall clock)."""

    exit_code: int | None
    oom_killed: bool
    why: str  # the heal's reason: "exited with code 137 (killed)", ...
    at: float


@dataclass(frozen=True)
class Run:
    """One container's counts while it is restarted in place."""

    streak: int = 0  # the crash-loop streak it carries (healerd.core.planner)
    restarts: int = 0  # replacements in its line (its label) plus its starts in place
    # Starts in place because it was unhealthy past its grace, since it was last healthy:
    # one that did not cure it makes the next one a replacement (a fresh writable layer).
    unhealthy_restarts: int = 0
    started: float = 0.0  # wall clock of its last start in place
    last: Termination | None = None


class RunBook(Protocol):
    """Where the runs outlive healerd (the daemon's file; nothing in tests)."""

    def load(self) -> Mapping[str, Run]: ...
    def save(self, runs: Mapping[str, Run]) -> None: ...


class NoRunBook:
    """Runs kept in memory only: a restart of healerd starts every streak again."""

    def load(self) -> Mapping[str, Run]:
        return {}

    def save(self, runs: Mapping[str, Run]) -> None:
        pass


def after_start(
    c: ObservedContainer,
    run: Run | None,
    *,
    streak: int,
    why: str,
    unhealthy: bool,
    wall: float,
    exit_code: int | None = None,
) -> Run:
    """The run a container carries after healerd started it in place (`exit_code`: how
    its last run ended, when the list did not say: a running one healerd stopped)."""
    base = run or Run(streak=c.crash_streak, restarts=c.restarts)
    return replace(
        base,
        streak=streak,
        restarts=base.restarts + 1,
        unhealthy_restarts=base.unhealthy_restarts + 1 if unhealthy else 0,
        started=wall,
        last=Termination(exit_code, c.oom_killed, why, wall),
    )


def signal_name(exit_code: int) -> str:
    """` (SIGKILL)` for 137: the signal a shell's code of 128+N says ended the run."""
    if 128 < exit_code < 128 + 65:
        try:
            return f" ({signal.Signals(exit_code - 128).name})"
        except ValueError:
            return ""
    return ""


def exit_words(exit_code: int | None, oom_killed: bool = False) -> str:
    """`exited with code 137 (killed)`: the code, and what it says of a signal."""
    if oom_killed:
        code = f" (exit code {exit_code})" if exit_code is not None else ""
        return f"killed by the kernel's OOM killer{code}"
    if exit_code is None:
        return "stopped"
    if exit_code == 137:
        return "exited with code 137 (killed)"
    return f"exited with code {exit_code}{signal_name(exit_code)}"


def to_json(runs: Mapping[str, Run]) -> dict[str, object]:
    """The file's form: plain JSON, one object per container id."""
    out: dict[str, object] = {}
    for cid, r in runs.items():
        entry: dict[str, object] = {
            "streak": r.streak,
            "restarts": r.restarts,
            "unhealthy_restarts": r.unhealthy_restarts,
            "started": r.started,
        }
        if r.last is not None:
            entry["last"] = {
                "exit_code": r.last.exit_code,
                "oom_killed": r.last.oom_killed,
                "why": r.last.why,
                "at": r.last.at,
            }
        out[cid] = entry
    return out


def from_json(data: object) -> dict[str, Run]:
    """Runs read back; an entry that is not what to_json writes is skipped."""
    if not isinstance(data, dict):
        return {}
    out: dict[str, Run] = {}
    for cid, entry in data.items():
        try:
            out[str(cid)] = _run(entry)
        except (TypeError, ValueError, KeyError):
            continue
    return out


def _run(entry: object) -> Run:
    if not isinstance(entry, dict):
        raise TypeError("not an object")
    last = entry.get("last")
    term = None
    if isinstance(last, dict):
        code = last.get("exit_code")
        term = Termination(
            None if code is None else int(code),
            bool(last.get("oom_killed")),
            str(last.get("why", "")),
            float(last.get("at", 0.0)),
        )
    return Run(
        streak=max(0, int(entry["streak"])),
        restarts=max(0, int(entry["restarts"])),
        unhealthy_restarts=max(0, int(entry.get("unhealthy_restarts", 0))),
        started=float(entry.get("started", 0.0)),
        last=term,
    )


__all__ = [
    "NoRunBook",
    "Run",
    "RunBook",
    "Termination",
    "after_start",
    "exit_words",
    "from_json",
    "to_json",
]
