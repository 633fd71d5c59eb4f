"""What a service's status shows: the state `decide` concluded, written to the status
book unless what it concluded from changed since (a pause or resume, the declared
replica count)."""

from __future__ import annotations

import re

from healerd.core.lifecycle import ServiceState
from healerd.core.loopsettings import DISCOVER
from healerd.core.outcome import AGAIN, Facts, Outcome, Tally, decide
from healerd.core.readmodel import StatusBook
from healerd.core.wanted import Declared, Paused

_WHEN = re.compile(r"; retry in [0-9.]+s$")  # healerd.core.dispatch's, now under way


class Shown:
    def __init__(self, book: StatusBook, declared: Declared, paused: Paused) -> None:
        self._book = book
        self._declared = declared
        self._paused = paused

    def show(
        self,
        key: str,
        outcome: Outcome,
        reason: str | None = None,
        *,
        next_retry: float | None = None,
        desired: int | None = None,
    ) -> None:
        """The change that made a conclusion outdated showed what holds then and queued
        the pass that says more; the check and the write are one step of the book's, so
        no conclusion older than the change can follow it."""
        if outcome.state is None or key == DISCOVER:
            return
        self._book.set(
            key,
            outcome.state,
            outcome.reason if reason is None else reason,
            tally=outcome.tally,
            paused=self._paused.has(key),
            next_retry=next_retry,
            desired=desired,
            unless=lambda: self._outdated(key, outcome),
        )

    def pulling(self, key: str, reason: str, tally: Tally | None) -> None:
        """A pull began in `key`'s pass: until the pass settles (minutes, on a slow link)
        the status says so, not what it said before the pass (Pending, say). A retry
        after a failed pull or build keeps the failure's words (`decide` keeps the state)."""
        now = self._book.shown(key)
        failed = now is not None and now[0] is ServiceState.IMAGE_PULL_BACK_OFF
        last = _WHEN.sub("", now[1].partition(AGAIN)[2] or now[1]) if now and failed else ""
        self.show(key, decide(Facts(pulling=reason, pull_failed=last, tally=tally)))

    def _outdated(self, key: str, outcome: Outcome) -> bool:
        if self._paused.has(key) != (outcome.state is ServiceState.PAUSED):
            return True
        spec, t = self._declared.spec(key), outcome.tally
        return t is not None and t.desired != (spec.replicas if spec is not None else 0)


__all__ = ["Shown"]
