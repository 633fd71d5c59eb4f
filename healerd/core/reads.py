"""The read facade of the loop for the API and the daemon: statuses, what runs, a
replica's output (its previous run's too), how containers ended, a dry run. None of it
steers the loop: every read is on the caller's read budget (healerd.core.readlanes) or
the loop's last look, never the heal budget."""

from __future__ import annotations

from collections.abc import Sequence

from healerd.core.clock import Clock
from healerd.core.engine_health import EngineHealth
from healerd.core.loopmemory import LoopMemory
from healerd.core.observe import shown
from healerd.core.postmortem import Dead, deaths, earlier_run, last_lines, pick
from healerd.core.ratelimit import LastLook
from healerd.core.readlanes import PRIVILEGED, Reader, ReadLanes
from healerd.core.readmodel import StatusBook, container_statuses, summary
from healerd.core.reconcile import Observation, Reconciler
from healerd.core.runs import Termination
from healerd.core.status import ContainerStatus, ServiceStatus
from healerd.core.wanted import Declared, Paused
from healerd.engine import LocalImage, LogStream
from healerd.model import Action, ObservedContainer


class Reads:
    def __init__(
        self,
        clock: Clock,
        *,
        memory: LoopMemory,
        book: StatusBook,
        readers: ReadLanes,
        last_look: LastLook,
        reconciler: Reconciler,
        declared: Declared,
        paused: Paused,
        health: EngineHealth,
    ) -> None:
        """`readers`: what the API reads through (the list, logs, how a container died):
        the daemon gives readers budgets of their own (readlanes.py), never the heal
        budget."""
        self._clock = clock
        self._memory = memory
        self._book = book
        self._readers = readers
        self._last_look = last_look
        self._reconciler = reconciler
        self._declared = declared
        self._paused = paused
        self._health = health

    def paused_services(self) -> set[str]:
        return self._paused.all()

    def statuses(self) -> list[ServiceStatus]:
        """Every declared service and every service with containers, by name."""
        return self._book.statuses(self._declared.desired.services, self._paused.all())

    def container_statuses(
        self, service: str | None = None, reader: Reader = PRIVILEGED
    ) -> list[ContainerStatus]:
        """What runs now: the loop's last list if under a second old, else a list of the
        readers' own (on the caller's read budget, outside the heal budget)."""
        return container_statuses(self._look(reader), self._declared.desired.services, service)

    def _look(self, reader: Reader) -> list[ObservedContainer]:
        return self.known(self._last_look.get(lambda: self._readers.pay(reader)))

    def known(self, listed: Sequence[ObservedContainer]) -> list[ObservedContainer]:
        """A list with what the loop remembers of each run: the restarts in place, the
        crash streak and the start of containers restarted in place."""
        with self._memory.held() as mem:
            return shown(mem, listed, self._clock.monotonic(), self._clock.time())

    def logs(
        self,
        service: str,
        *,
        previous: bool,
        tail: int | None,
        since: float | None,
        until: float | None = None,
        reader: Reader = PRIVILEGED,
    ) -> tuple[ObservedContainer | None, LogStream]:
        """A replica's output, streamed (the caller closes it); with `previous`, its
        previous run's: what the newest replica wrote before its latest start, if it
        ran before (started again in place), else the last failed one kept as history.
        A list of its own (on the reader's budget): right after a heal the loop's last
        list may not show the failed container as history yet."""
        with self._readers.reading(reader) as engine:
            listed = engine.list_managed()
            c = pick(listed, service, previous=False)
            if previous and c is not None:
                with self._memory.held() as mem:
                    restarted = c.id in mem.runs
                began = earlier_run(engine, c, restarted)
                if began is not None:
                    # The engine applies `tail` before `until`: the end is kept here.
                    until = began if until is None else min(until, began)
                    return c, last_lines(engine.logs(c.id, None, since, until), tail)
                c = pick(listed, service, previous=True)
            return c, (engine.logs(c.id, tail, since, until) if c is not None else LogStream([]))

    def local_images(self, reader: Reader = PRIVILEGED) -> list[LocalImage]:
        """The engine's images, on the reader's budget (`healerctl images`)."""
        return self._readers.images(reader)

    def termination(self, container_id: str) -> Termination | None:
        """How the run before a container's latest start in place ended (None: it was
        never started again in place, or healerd does not know)."""
        with self._memory.held() as mem:
            run = mem.runs.get(container_id)
        return run.last if run is not None else None

    def deaths(
        self, service: str, reader: Reader = PRIVILEGED, limit: int | None = None
    ) -> list[Dead]:
        """The service's failed containers kept as history, newest first (the `limit`
        newest: one inspect each, on the reader's budget)."""
        with self._readers.reading(reader) as engine:
            return deaths(engine, engine.list_managed(), service, limit)

    def preview(self, service: str | None = None, reader: Reader = PRIVILEGED) -> list[Action]:
        """What a pass would do right now, without doing it (on the same list as
        container_statuses): reconcile without acting."""
        obs = Observation(self._look(reader), self._declared.desired)
        keys = {service} if service else set(obs.desired.services) | _services(obs.containers)
        snap = self._memory.snapshot
        return [
            a
            for k in sorted(keys)
            for a in self._reconciler.preview(k, obs, snap(k, (c.id for c in obs.of(k))))
        ]

    def summary(self) -> str:
        """One line for logs and sd_notify STATUS=."""
        return summary(self.statuses(), self._declared.desired, self._health.ok)


def _services(containers: Sequence[ObservedContainer]) -> set[str]:
    return {c.service for c in containers if c.service}


__all__ = ["Reads"]
