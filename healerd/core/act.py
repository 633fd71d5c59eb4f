"""The acting step of a pass: apply the plan through the executor, report what it did,
and record what that changes in the loop's memory (a start in place carries its
container's counts on) as steps of the pass's MemoryDelta. A plan of starts in place
only is not waited for: its end comes later, through the same owner of the memory."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from healerd.core.clock import Clock
from healerd.core.executor import ActionResult, Executor
from healerd.core.memdelta import MemoryDelta, Recorder
from healerd.core.observe import Memory, note_refused, note_started
from healerd.core.planner import Plan
from healerd.core.report import Reporter
from healerd.model import ActionKind


class Acting:
    def __init__(
        self,
        clock: Clock,
        executor: Executor,
        reporter: Reporter,
        share: Callable[[MemoryDelta], None],
        after_start: Callable[[str, str | None], None],
    ) -> None:
        """`share` applies a delta to the loop's memory (its owner, under its lock);
        `after_start(key, error)` is told when a start of `_start_later` ends."""
        self._clock = clock
        self._executor = executor
        self._report = reporter
        self.share = share  # the loop's: every change to its memory goes through it
        self._after_start = after_start

    def creating(self) -> frozenset[str]:
        """The names of the containers the executor's creates are making now."""
        return self._executor.creating()

    def act(self, key: str, p: Plan, rec: Recorder, mono: float) -> list[str]:
        """Apply the plan; returns the errors of the actions that failed."""
        if not p.actions:
            return []
        if starts_only(p):
            self._start_later(key, p, rec, mono)
            return []
        results = self._executor.apply(p.actions)
        self._report.results(key, results)
        for res in results:
            self._healed(key, res, _died(rec.memory, res))
        self._executor.post_start(results)
        wall, now = self._clock.time(), self._clock.monotonic()
        for res in results:
            if res.ok and res.action.kind is ActionKind.START:
                rec.do(partial(note_started, a=res.action, mono=now, wall=wall))
            elif refused(res):
                rec.do(partial(note_refused, a=res.action, mono=now, why=str(res.error)))
        return [res.error for res in results if res.error is not None]

    def _start_later(self, key: str, p: Plan, rec: Recorder, mono: float) -> None:
        """The starts go to the executor's pool and the pass ends: deaths that come
        meanwhile are planned and started at once, as the engine reports them, not a
        batch of starts later (a storm). Each start's end is reported (`_started`) and
        looks at the service again; until then its container counts as starting (the
        memory says so before the executor has the start: `then`)."""

        def on_its_way(m: Memory) -> None:
            for a in p.actions:
                assert a.container is not None
                m.starting[a.container.id] = mono
                m.start_rows[a.container.id] = a.container

        rec.do(on_its_way)
        rec.then(lambda: self._executor.start_later(p.actions, lambda r: self._started(key, r)))

    def _started(self, key: str, res: ActionResult) -> None:
        """One start of `_start_later` ended (an executor thread)."""
        self._report.results(key, [res])
        c = res.action.container
        assert c is not None
        wall, mono = self._clock.time(), self._clock.monotonic()
        died: list[float | None] = []

        def ended(m: Memory) -> None:
            m.starting.pop(c.id, None)
            m.start_rows.pop(c.id, None)
            died.append(_died(m, res))  # before the start's own note forgets the death
            if res.ok and res.action.kind is ActionKind.START:
                note_started(m, res.action, mono, wall)
            elif refused(res):
                note_refused(m, res.action, mono, str(res.error))

        self.share(
            MemoryDelta(
                (ended,),
                (
                    lambda: self._healed(key, res, died[0]),
                    lambda: self._after_start(key, res.error),
                ),
            )
        )

    def _healed(self, key: str, res: ActionResult, died: float | None) -> None:
        """The heal latency of a failed container a start or a create brought back."""
        a = res.action
        if not res.ok or a.kind not in (ActionKind.CREATE, ActionKind.START) or died is None:
            return
        how = "in-place" if a.kind is ActionKind.START else "replaced"
        self._report.healed(key, max(0.0, self._clock.monotonic() - died), how)


def starts_only(p: Plan) -> bool:
    """Starts in place of stopped containers and nothing else (none is stopped first)."""
    return all(
        a.kind is ActionKind.START and a.container is not None and not a.container.running
        for a in p.actions
    )


def refused(res: ActionResult) -> bool:
    """A start in place the engine refused (an engine away refuses nothing)."""
    return (
        res.action.kind is ActionKind.START and not res.ok and not res.unreachable and not res.held
    )


def _died(mem: Memory, res: ActionResult) -> float | None:
    c = res.action.container
    return None if c is None else mem.dead_since.get(c.id)


__all__ = ["Acting", "starts_only"]
