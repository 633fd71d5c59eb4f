"""Who is asking the local API, and whether they may change things.

The caller is the peer the kernel recorded at connect() (SO_PEERCRED), never anything
the client says about itself. Reading needs only access to the socket; changes (and
containers' output) need root or the admin group (or, for output, the logs group).
"""

from __future__ import annotations

import grp
import pwd
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13
MAX_PEER_GROUPS = 256


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    @property
    def user(self) -> str:
        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)


def peer_of(sock: socket.socket) -> Peer | None:
    """The connecting process's credentials as the kernel recorded them at connect()."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, gid = struct.unpack("3i", raw)
    except (OSError, AttributeError, struct.error):
        return None
    groups: tuple[int, ...] = ()
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 4 * MAX_PEER_GROUPS)
        groups = struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4])
    except (OSError, struct.error):
        pass
    return Peer(pid, uid, gid, groups)


def peer_label(peer: Peer | None) -> str:
    """The peer as the log names it."""
    return "unknown peer" if peer is None else f"{peer.user} (uid {peer.uid}, pid {peer.pid})"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


class AdminPolicy:
    """Root may change things; so may members of the admin group, looked up per request
    (so adding or removing a member needs no restart). Membership is the group database
    (/etc/group, primary group) or the groups the peer process runs with. Reading logs
    needs the same, or membership in the logs group (healerd.yaml's `logs_group`)."""

    def __init__(
        self,
        group: str | None,
        getgrnam: Callable[[str], Any] = grp.getgrnam,
        getpwuid: Callable[[int], Any] = pwd.getpwuid,
    ) -> None:
        self.group = group
        self._getgrnam = getgrnam
        self._getpwuid = getpwuid

    def decide(self, peer: Peer | None, what: str) -> Decision:
        if peer is None:
            return Decision(False, f"{what} refused: the caller's credentials are unknown")
        if peer.uid == 0:
            return Decision(True, "root")
        who, name = self._who(peer)
        if not self.group:
            return Decision(False, f"{what} needs root; {who} is not root")
        member = self._member(peer, name, self.group)
        if member is None:
            return Decision(
                False,
                f"{what} needs root or membership in group {self.group!r} (which does not "
                f"exist on this host); {who} is neither",
            )
        if member:
            return Decision(True, f"member of {self.group}")
        return Decision(
            False, f"{what} needs root or membership in group {self.group!r}; {who} is neither"
        )

    def decide_logs(self, peer: Peer | None, logs_group: str | None) -> Decision:
        """Whether `peer` may read containers' output: root, the admin group, or the
        logs group when one is set."""
        what = "reading logs"
        admin = self.decide(peer, what)
        if admin.allowed or peer is None:
            return admin
        if not logs_group:
            return Decision(False, f"{admin.reason} (healerd.yaml's logs_group is not set)")
        who, name = self._who(peer)
        if self._member(peer, name, logs_group):
            return Decision(True, f"member of {logs_group}")
        groups = " or ".join(repr(g) for g in (self.group, logs_group) if g)
        return Decision(
            False, f"{what} needs root or membership in group {groups}; {who} is none of these"
        )

    def _who(self, peer: Peer) -> tuple[str, str | None]:
        try:
            name = str(self._getpwuid(peer.uid).pw_name)
        except KeyError:
            return f"uid {peer.uid}", None
        return f"{name} (uid {peer.uid})", name

    def _member(self, peer: Peer, name: str | None, group: str) -> bool | None:
        """Whether `peer` is in `group` (None: no such group)."""
        try:
            g = self._getgrnam(group)
        except KeyError:
            return None
        return bool(peer.gid == g.gr_gid or g.gr_gid in peer.groups or (name and name in g.gr_mem))


__all__ = ["AdminPolicy", "Decision", "Peer", "peer_label", "peer_of"]
