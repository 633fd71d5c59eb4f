"""sd_notify: tell systemd (Type=notify) how healerd is doing.

READY=1 once the config is loaded and the API listens, STATUS= a one-line summary kept
current, WATCHDOG=1 only while the reconcile loop makes progress, RELOADING=1 (with
MONOTONIC_USEC) then READY=1 around a reload, STOPPING=1 on shutdown.

systemd-python's `systemd.daemon.notify` is used when it is installed (Debian:
python3-systemd); otherwise the datagram is sent to $NOTIFY_SOCKET directly (a path, or
an abstract socket written `@name`), which is the whole protocol. Without $NOTIFY_SOCKET
(not started by systemd) every call is a cheap no-op. A failed send is logged at debug
level and never raised: systemd being away must not stop healerd.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("healerd.notify")

_sd_daemon: Any
try:
    _sd_daemon = importlib.import_module("systemd.daemon")
except ImportError:  # not installed: speak the protocol ourselves
    _sd_daemon = None

# How often the main loop wakes at most, so that STATUS= stays current.
STATUS_INTERVAL = 1.0


def _send_datagram(address: str, message: str) -> bool:
    if address.startswith("@"):
        target = "\0" + address[1:]  # abstract namespace
    elif address.startswith("/"):
        target = address
    else:
        log.debug("NOTIFY_SOCKET %r is not a unix socket address; not notifying", address)
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.sendto(message.encode("utf-8", "replace"), target)
    return True


def sd_notify(message: str, env: Mapping[str, str] | None = None) -> bool:
    """Send `message` (newline-separated VAR=value lines) to systemd. True if sent."""
    environ = os.environ if env is None else env
    address = environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    try:
        if _sd_daemon is not None and env is None:
            return bool(_sd_daemon.notify(message))
        return _send_datagram(address, message)
    except OSError as exc:
        log.debug("sd_notify %r failed: %s", message.split("\n", 1)[0], exc)
        return False


def watchdog_interval(env: Mapping[str, str] | None = None) -> float | None:
    """WatchdogSec in seconds when systemd expects WATCHDOG=1 from this process, else None."""
    environ = os.environ if env is None else env
    usec = environ.get("WATCHDOG_USEC")
    if not usec:
        return None
    pid = environ.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None  # meant for another process (we were exec'd by a wrapper)
    try:
        seconds = int(usec) / 1_000_000
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def _clean(text: str) -> str:
    # One line: a newline would start another assignment.
    return " ".join(text.split())


class Notifier:
    """The daemon's side of sd_notify; every method is a no-op without $NOTIFY_SOCKET.

    The watchdog: with WatchdogSec=W systemd restarts healerd when no WATCHDOG=1 came for
    W seconds. `tick()` sends one only while the reconcile loop made progress within
    `stall_after` = W/2 (the dispatcher marks progress at least every 0.5 s while alive;
    an engine call blocks it at most engine_timeout, 30 s by default). A loop stuck for
    good is thus restarted at most 1.5 W after its last progress, and a slow engine call
    shorter than that is tolerated. Ticks come every W/4 (at most STATUS_INTERVAL apart).
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        send: Callable[[str], bool] | None = None,
    ) -> None:
        self._env = env
        self.enabled = bool((os.environ if env is None else env).get("NOTIFY_SOCKET"))
        self._send = send or (lambda m: sd_notify(m, self._env))
        self.watchdog = watchdog_interval(env) if self.enabled else None
        # Never below 1 s: the dispatcher marks progress only every 0.5 s when idle.
        self.stall_after = max(self.watchdog / 2, 1.0) if self.watchdog else None
        # Not under systemd: no reason to wake the main loop at all.
        self.tick_interval = float("inf")
        if self.enabled:
            self.tick_interval = min(STATUS_INTERVAL, self.watchdog / 4) if self.watchdog else 1.0
        self._status: str | None = None
        self._status_at = float("-inf")
        self._stalled = False
        # A READY=1 that did not go out: until it does, systemd keeps the unit "reloading"
        # (or "activating") and queues every later `systemctl reload` behind it.
        self._ready_pending = False

    def notify(self, *assignments: str) -> bool:
        if not self.enabled:
            return False
        return self._send("\n".join(assignments))

    def ready(self, status: str | None = None) -> None:
        lines = ["READY=1"]
        if status is not None:
            lines.append(f"STATUS={_clean(status)}")
            self._status, self._status_at = status, time.monotonic()
        self._ready_pending = self.enabled and not self.notify(*lines)
        if self._ready_pending:
            log.warning("sd_notify READY=1 was not sent; trying again at the next tick")

    def reloading(self) -> None:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> None:
        self.notify("STOPPING=1", "STATUS=stopping; containers are left running")

    def status(self, text: str, now: float | None = None) -> bool:
        """STATUS=text if it changed and the last one is at least STATUS_INTERVAL old."""
        now = time.monotonic() if now is None else now
        if text == self._status or now - self._status_at < STATUS_INTERVAL:
            return False
        self._status, self._status_at = text, now
        return self.notify(f"STATUS={_clean(text)}")

    def tick(self, summary: Callable[[], str], last_progress: float, now: float) -> None:
        """Called by the main loop at least every tick_interval seconds."""
        if not self.enabled:
            return
        if self._ready_pending:
            self._ready_pending = not self.notify("READY=1")
        self.status(summary())
        if self.stall_after is None:
            return
        stalled = now - last_progress >= self.stall_after
        if stalled != self._stalled:
            self._stalled = stalled
            if stalled:
                log.error(
                    "reconcile loop made no progress for %.0fs: no watchdog ping; "
                    "systemd will restart healerd unless it recovers",
                    now - last_progress,
                )
            else:
                log.warning("reconcile loop progressing again; watchdog pings resume")
        if not stalled:
            self.notify("WATCHDOG=1")


__all__ = ["Notifier", "sd_notify", "watchdog_interval"]
