"""What an operator asks about one service after something went wrong: the output of a
replica, or of its previous run (`healerctl logs [--previous]`), and how its replicas
died (`healerctl describe`). A container started again in place keeps every run's
output in its one log: its previous run is what it wrote before its latest start. A
failed container that was replaced stays on the engine, stopped, as history
(healerd.core.planner.history), for the same questions."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from healerd.core.planner import history
from healerd.engine import ContainerRuntime, Death, LogStream
from healerd.model import ObservedContainer

# The most of an earlier run's output kept to show its last lines (the engine gives a
# time-bounded log only from its start: healerd reads it all and keeps the end).
PREVIOUS_MAX_BYTES = 8 * 2**20


@dataclass(frozen=True)
class Dead:
    """A failed container kept as history, and how it ended."""

    container: ObservedContainer
    death: Death


def pick(
    observed: Sequence[ObservedContainer], service: str, *, previous: bool
) -> ObservedContainer | None:
    """The replica whose output `logs` shows: the newest running one; with `previous`,
    the newest failed one kept (or any stopped one, if none was replaced yet)."""
    mine = [c for c in observed if c.service == service]
    if previous:
        old = history(mine) or [c for c in mine if not c.running]
        return max(old, key=lambda c: (c.created, c.id), default=None)
    running = [c for c in mine if c.running]
    return max(running or mine, key=lambda c: (c.created, c.id), default=None)


def deaths(
    engine: ContainerRuntime,
    observed: Sequence[ObservedContainer],
    service: str,
    limit: int | None = None,
) -> list[Dead]:
    """The service's history, newest first (the `limit` newest), each with one inspect
    of how it ended: what a describe costs the engine is bounded, whatever the replicas
    and history_limit."""
    old = sorted(
        history([c for c in observed if c.service == service]),
        key=lambda c: (-c.created, c.id),
    )
    return [Dead(c, engine.death(c.id)) for c in old[:limit]]


def earlier_run(engine: ContainerRuntime, c: ObservedContainer, restarted: bool) -> float | None:
    """Where in `c`'s log its earlier runs' output ends (engine time), None when it has
    none (one inspect). While it runs again: the end of the run before (the engine logs
    all of a run's output before it records the exit; a new run's first lines may be
    stamped a moment before its StartedAt). Stopped after starts in place (`restarted`:
    healerd's runs): where its last run began."""
    d = engine.death(c.id)
    if d.ran_before:
        return rfc3339(d.finished_at)
    return rfc3339(d.started_at) if restarted else None


def rfc3339(text: str) -> float | None:
    """The engine's time ("2026-12-02T01:02:03.123456789Z") in epoch seconds; None for
    none or the zero time."""
    if not text or text.startswith("0001"):
        return None
    head, _, frac = text.rstrip("Z").partition(".")
    try:
        whole = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    return whole + (float(f"0.{frac}") if frac.isdigit() else 0.0)


def last_lines(
    stream: LogStream, tail: int | None, max_bytes: int = PREVIOUS_MAX_BYTES
) -> LogStream:
    """The last `tail` lines (None: all) of `stream`, at most `max_bytes` of its end: the
    whole stream is read, never more than that kept."""

    def chunks() -> Iterator[bytes]:
        kept: deque[bytes] = deque()
        size, partial = 0, b""
        with stream:
            for chunk in stream:
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()
                for line in lines:
                    kept.append(line + b"\n")
                    size += len(line) + 1
                    while kept and (size > max_bytes or (tail is not None and len(kept) > tail)):
                        size -= len(kept.popleft())
        if partial and (tail is None or tail > 0):
            kept.append(partial)
            if tail is not None and len(kept) > tail:
                kept.popleft()
        yield from kept

    return LogStream(chunks(), stream.close)


__all__ = ["Dead", "deaths", "earlier_run", "last_lines", "pick", "rfc3339"]
