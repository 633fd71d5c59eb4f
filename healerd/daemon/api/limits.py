"""Who may hold how many of the local API's connections (and run how many of its
costliest requests at once: InFlight).

Any local reader may open the socket, so one user must not be able to take every
connection and lock the admins out. Each connection is counted against its peer's uid
(as the kernel reports it): an unprivileged uid may hold at most `per_uid` connections,
and all unprivileged uids together at most `total - reserved`. The last `reserved`
connections are for root and the admin group only, and root has no per-uid limit: with
the API flooded by others, root (or an admin) still gets in.

Root is known from the uid alone. Whether another uid is an admin needs the group
database, so it is looked up only when that uid hits a limit, and remembered for a few
seconds (a flood of refused connections must not become a flood of NSS lookups).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from healerd.daemon.api.access import Peer, peer_label

ADMIN_CACHE_SECONDS = 5.0


@dataclass(frozen=True)
class Ticket:
    """An admitted connection; hand it back to `release` when the connection ends."""

    uid: int | None
    shared: bool  # counted in the unprivileged pool (and against its uid)


@dataclass(frozen=True)
class Refusal:
    kind: str  # for the rate-limited log: one kind per cause and uid
    message: str  # for the client (503) and the log


class ConnectionLimits:
    def __init__(
        self,
        total: int,
        per_uid: int,
        reserved: int,
        is_admin: Callable[[Peer], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(1, total)
        # At least one connection for the unprivileged, and each uid below the total.
        self.shared = max(1, self.total - max(0, reserved))
        self.per_uid = max(1, min(per_uid, self.shared))
        self._is_admin = is_admin
        self._clock = clock
        self._lock = threading.Lock()
        self._in_use = 0
        self._shared_in_use = 0
        self._by_uid: dict[int | None, int] = {}
        self._admins: dict[int, tuple[bool, float]] = {}

    def admit(self, peer: Peer | None) -> Ticket | Refusal:
        uid = peer.uid if peer is not None else None
        with self._lock:
            if self._in_use >= self.total:
                return Refusal("api-full", f"too many connections ({self.total} open)")
            if uid == 0:
                self._in_use += 1
                return Ticket(uid, shared=False)
            held = self._by_uid.get(uid, 0)
            if held < self.per_uid and self._shared_in_use < self.shared:
                self._in_use += 1
                self._shared_in_use += 1
                self._by_uid[uid] = held + 1
                return Ticket(uid, shared=True)
        # Over an unprivileged limit: only an admin may go on, into the reserved room.
        if peer is not None and self._admin(peer):
            with self._lock:
                if self._in_use < self.total:
                    self._in_use += 1
                    return Ticket(uid, shared=False)
            return Refusal("api-full", f"too many connections ({self.total} open)")
        if held >= self.per_uid:
            return Refusal(
                f"api-uid-{uid}",
                f"too many connections from {peer_label(peer)} (at most {self.per_uid} per user)",
            )
        return Refusal(
            "api-shared",
            f"too many connections from users other than root and the admin group "
            f"({self.shared} open); refusing {peer_label(peer)}",
        )

    def release(self, ticket: Ticket) -> None:
        with self._lock:
            self._in_use -= 1
            if ticket.shared:
                self._shared_in_use -= 1
                left = self._by_uid.get(ticket.uid, 0) - 1
                if left > 0:
                    self._by_uid[ticket.uid] = left
                else:
                    self._by_uid.pop(ticket.uid, None)

    def in_use(self, uid: int | None = None) -> int:
        with self._lock:
            return self._in_use if uid is None else self._by_uid.get(uid, 0)

    def _admin(self, peer: Peer) -> bool:
        now = self._clock()
        cached = self._admins.get(peer.uid)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            allowed = self._is_admin(peer)
        except Exception:
            allowed = False
        if len(self._admins) > 1024:
            self._admins.clear()
        self._admins[peer.uid] = (allowed, now + ADMIN_CACHE_SECONDS)
        return allowed


class InFlight:
    """At most `per_uid` requests at once per peer uid (root's included): for the
    requests that cost the engine and healerd the most (logs, describe), so that no
    user can keep many of them running, whatever connections they hold."""

    def __init__(self, per_uid: int) -> None:
        self.per_uid = max(1, per_uid)
        self._lock = threading.Lock()
        self._by_uid: dict[int | None, int] = {}

    def take(self, uid: int | None) -> bool:
        with self._lock:
            held = self._by_uid.get(uid, 0)
            if held >= self.per_uid:
                return False
            self._by_uid[uid] = held + 1
            return True

    def release(self, uid: int | None) -> None:
        with self._lock:
            left = self._by_uid.get(uid, 0) - 1
            if left > 0:
                self._by_uid[uid] = left
            else:
                self._by_uid.pop(uid, None)

    def held(self, uid: int | None) -> int:
        with self._lock:
            return self._by_uid.get(uid, 0)


__all__ = ["ConnectionLimits", "InFlight", "Refusal", "Ticket"]
