"""The hand-off's engine calls and its marker (healerd.core.handoff says what and why).

The calls go to the engine without the engine-call budget (50 a second would make a
stop at 1,000 containers take 20 s, beyond systemd's stop timeout: pacing.lane with
UNPACED), 8 at a time. An
update of a running container's restart policy goes through containerd (a runc update):
at 1,000 containers on 2 cores a stop's STOP_DEADLINE ends before every one is handed
off (bench/scale1000.py: 10.1 s); those left come back at healerd's next start, as
without a hand-off. The marker names the containers handed off and only those are taken
back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Protocol

from healerd.core.handoff import HANDOFF_POLICY, TAKEN_BACK, to_hand_off
from healerd.daemon.atomicfile import write_atomic
from healerd.engine import ContainerRuntime, EngineError, RestartHandOff, Unsupported
from healerd.engine.pacing import UNPACED, lane
from healerd.model import ContainerState, ObservedContainer, ServiceSpec

log = logging.getLogger("healerd.handoff")

Known = Callable[[Sequence[ObservedContainer]], list[ObservedContainer]]

MARKER = "handed-off"
PARALLEL = 8
# The hand-off at a stop, list call included (systemd's TimeoutStopSec is 20 s).
STOP_DEADLINE = 10.0
# Tries of a take-back before healing goes on beside what could not be taken back (a
# container the engine refuses to update for good must not stop healerd for ever).
TAKE_BACK_TRIES = 5
# The engine refuses to update these; they run no more anyway.
_GONE = frozenset({ContainerState.DEAD, ContainerState.REMOVING})


class HandOffEngine(ContainerRuntime, RestartHandOff, Protocol):
    """What the hand-off needs: the list, and the restart policy."""


class HandOff:
    def __init__(self, engine: HandOffEngine, state_dir: Path) -> None:
        self._engine = engine
        self.marker = state_dir / MARKER
        self._taken: set[str] = set()
        self._tries = 0

    def give(
        self,
        desired: Mapping[str, ServiceSpec],
        keep: AbstractSet[str],
        now: float,
        deadline: float,
        known: Known = list,
    ) -> int:
        """At a clean stop: how many containers now carry the engine's policy (at most
        `deadline` seconds for the updates). `known`: the list with what the loop
        remembers of each run (a crash streak of a container restarted in place)."""
        with lane(UNPACED):
            listed = self._engine.list_managed()
        chosen = to_hand_off(known(listed), desired, keep, now)
        if not chosen:
            return 0
        # First the marker: a stop killed half-way is taken back all the same.
        self._write_marker([c.id for c in chosen])
        try:
            done = self._apply([c.id for c in chosen], HANDOFF_POLICY, deadline)
        except Unsupported:
            self.marker.unlink(missing_ok=True)  # nothing handed: nothing to take back
            raise
        if len(done) < len(chosen):
            log.warning(
                "handed %d of %d containers to the engine's restart policy in %gs; the "
                "rest come back when healerd starts again",
                len(done),
                len(chosen),
                deadline,
            )
        return len(done)

    def at_stop(
        self,
        desired: Mapping[str, ServiceSpec],
        keep: AbstractSet[str],
        now: float,
        known: Known = list,
    ) -> None:
        """give(), in a thread of its own waited for STOP_DEADLINE at most, list call
        included: a hung engine must not hold the stop past systemd's TimeoutStopSec."""
        started = time.monotonic()

        def run() -> None:
            try:
                left = STOP_DEADLINE - (time.monotonic() - started)
                done = self.give(desired, keep, now, left, known)
            except (EngineError, OSError) as exc:
                log.warning("containers not handed to the engine's restart policy: %s", exc)
                return
            except Exception:  # a stop must end: healerd heals them at its next start
                log.exception("containers not handed to the engine's restart policy")
                return
            if done:
                log.info(
                    "handed %d container(s) to the engine's restart policy %s until "
                    "healerd starts again",
                    done,
                    HANDOFF_POLICY,
                )

        worker = threading.Thread(target=run, name="healerd-handoff", daemon=True)
        worker.start()
        worker.join(STOP_DEADLINE)
        if worker.is_alive():
            log.warning("the hand-off did not finish in %gs; stopping anyway", STOP_DEADLINE)

    def take_back_all(self) -> None:
        """A new host key trusts the containers it finds (trust on first use), which may
        carry a hand-off whose marker went with the old state directory (a purge and a
        reinstall): take back every one."""
        if not self.marker.exists():
            self._write_marker(None)

    def take_back(self) -> int | None:
        """Before the first look: the containers handed off back to policy "no" (None:
        no hand-off stands). Raises EngineError while some could not be, up to
        TAKE_BACK_TRIES looks: the loop must not heal beside the engine's own restarts."""
        try:
            named = self._read_marker()
        except FileNotFoundError:
            return None
        with lane(UNPACED):
            listed = self._engine.list_managed()
        targets = [
            c.id
            for c in listed
            if c.state not in _GONE and (named is None or c.id in named) and c.id not in self._taken
        ]
        try:
            self._taken |= self._apply(targets, TAKEN_BACK, None)
        except Unsupported as exc:  # this engine was never handed any (Podman 4.3)
            log.info("no restart policy to take back: %s", exc)
            targets = []
        left = [cid[:12] for cid in targets if cid not in self._taken]
        if left:
            self._tries += 1
            what = f"the restart policy of {', '.join(left)} not taken back"
            if self._tries < TAKE_BACK_TRIES:
                raise EngineError(f"{what} (try {self._tries} of {TAKE_BACK_TRIES})")
            log.error("%s: healing goes on; the engine may restart them by itself", what)
        try:
            self.marker.unlink(missing_ok=True)
        except OSError as exc:
            raise EngineError(f"hand-off marker {self.marker}: {exc}") from exc
        return len(self._taken)

    def _apply(self, ids: Sequence[str], policy: str, deadline: float | None) -> set[str]:
        def one(cid: str) -> str | None:
            try:
                with lane(UNPACED):
                    self._engine.set_restart_policy(cid, policy)
            except Unsupported:
                raise  # the same for every container: said once, by the caller
            except EngineError as exc:
                log.warning("restart policy %s for %s: %s", policy, cid[:12], exc)
                return None
            return cid

        pool = ThreadPoolExecutor(PARALLEL, thread_name_prefix="healerd-handoff")
        futures = [pool.submit(one, cid) for cid in ids]
        finished, _ = wait(futures, timeout=deadline)
        # Past the deadline, calls still in the engine are not waited for.
        pool.shutdown(wait=False, cancel_futures=True)
        unsupported = [e for f in finished if isinstance(e := f.exception(), Unsupported)]
        if unsupported:
            raise unsupported[0]
        return {cid for f in finished if (cid := f.result()) is not None}

    def _read_marker(self) -> set[str] | None:
        """The ids handed off; None: every container healerd manages."""
        try:
            data: Any = json.loads(self.marker.read_text())
        except FileNotFoundError:
            raise
        except (OSError, ValueError):
            return None  # unreadable: take back all, to be safe
        ids = data.get("ids") if isinstance(data, dict) else None
        return {str(i) for i in ids} if isinstance(ids, list) else None

    def _write_marker(self, ids: list[str] | None) -> None:
        """Written and synced before the first update: it must outlive a power cut that
        follows the stop (the reboot it is for)."""
        write_atomic(self.marker, json.dumps({"ids": ids, "at": time.time()}).encode())


__all__ = ["MARKER", "HandOff"]
