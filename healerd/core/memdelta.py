"""A pass's changes to the loop's memory as a value: `(Outcome, MemoryDelta)`.

A pass works on a private snapshot of the memory it reads (`snapshot`, taken under the
loop's lock) and records each change it makes as a step (`Recorder`). The loop, the one
owner of the shared `Memory`, replays the steps on it under its own lock (`apply`):
the steps are observe.py's own functions, so the shared memory changes as if the pass
had made them there (a died entry an event renewed meanwhile is not dropped, say).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from healerd.core.observe import Memory
from healerd.core.runs import RunBook

_T = TypeVar("_T")
Step = Callable[[Memory], object]


@dataclass(frozen=True)
class MemoryDelta:
    """What a pass (or the end of a start it did not wait for) changes in the memory,
    and what runs once the change is made (`then`, outside the lock: a start is handed to
    the executor only once the memory says it is on its way)."""

    steps: tuple[Step, ...] = ()
    then: tuple[Callable[[], None], ...] = ()


class Recorder:
    """A pass's private memory and the steps it took on it."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self._steps: list[Step] = []
        self._then: list[Callable[[], None]] = []

    def do(self, step: Callable[[Memory], _T]) -> _T:
        """Take `step` on the private memory now, and on the shared one when applied."""
        self._steps.append(step)
        return step(self.memory)

    def then(self, after: Callable[[], None]) -> None:
        self._then.append(after)

    def delta(self) -> MemoryDelta:
        return MemoryDelta(tuple(self._steps), tuple(self._then))


def snapshot(mem: Memory, service: str, listed: Iterable[str]) -> Memory:
    """(Under the loop's lock.) What a pass of `service` reads of the memory: the
    entries of its listed containers and of its starts on their way, copied."""
    ids = set(listed) | {cid for cid, row in mem.start_rows.items() if row.service == service}
    suspects = mem.suspects.get(service)
    return Memory(
        dead_since=_part(mem.dead_since, ids),
        unhealthy_since=_part(mem.unhealthy_since, ids),
        forgiven=mem.forgiven & ids,
        died=_part(mem.died, ids),
        exit_codes=_part(mem.exit_codes, ids),
        suspects={} if suspects is None else {service: dict(suspects)},
        engine_stopped=mem.engine_stopped & ids,
        started=_part(mem.started, ids),
        runs=_part(mem.runs, ids),
        starting=_part(mem.starting, ids),
        start_rows=_part(mem.start_rows, ids),
        refused=_part(mem.refused, ids),
    )


def apply(lock: threading.Lock, mem: Memory, runbook: RunBook, delta: MemoryDelta) -> None:
    """The owner's side: replay the steps on the shared memory under `lock`, write the
    runs out if they changed (a file write: not under the lock), then run `then`."""
    with lock:
        for step in delta.steps:
            step(mem)
        runs = dict(mem.runs) if mem.runs_dirty else None
        mem.runs_dirty = False
    if runs is not None:
        runbook.save(runs)
    for after in delta.then:
        after()


def _part(table: dict[str, _T], ids: set[str]) -> dict[str, _T]:
    return {i: table[i] for i in ids if i in table}


__all__ = ["MemoryDelta", "Recorder", "apply", "snapshot"]
