"""Update windows against the local clock (healerd.model.updatepolicy holds them as
values): whether one is open at a wall time, when the next opens, and how messages
write a time."""

from __future__ import annotations

import time

from healerd.model.updatepolicy import UpdateWindow


def _local(wall: float) -> tuple[int, int]:
    t = time.localtime(wall)
    return t.tm_wday, t.tm_hour * 60 + t.tm_min


def window_open(windows: tuple[UpdateWindow, ...] | None, wall: float) -> bool:
    """No window: any time; else when one of them is open (local time)."""
    return not windows or any(w.open_at(*_local(wall)) for w in windows)


def next_open(windows: tuple[UpdateWindow, ...] | None, wall: float) -> float | None:
    """When a window opens next, to the minute (None: none within a week)."""
    if window_open(windows, wall):
        return wall
    t = wall - wall % 60.0 + 60.0
    for _ in range(7 * 24 * 60 + 1):
        if window_open(windows, t):
            return t
        t += 60.0
    return None


def clock_text(wall: float) -> str:
    """A local time as messages say it: `Sat 02:00`, with the date beyond a week."""
    fmt = "%a %H:%M" if abs(wall - time.time()) < 6 * 86400 else "%Y-%m-%d %H:%M"
    return time.strftime(fmt, time.localtime(wall))


__all__ = ["clock_text", "next_open", "window_open"]
