"""When an image update may happen: `x-healerd: {update_window, update_delay,
update_lock}`, with healerd.yaml's `updates:` as the defaults (None: not said here).

A window is a set of weekdays and a span of local time, as an operator says it
("Sat,Sun 02:00-05:00"; a span may cross midnight: "22:00-04:00" runs into the next
day, counted from the day it begins). Windows are read in local time because that is
how people plan a maintenance night; a DST jump moves a window with the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
WEEK = frozenset(range(7))


@dataclass(frozen=True)
class UpdateWindow:
    days: frozenset[int]  # 0 = Monday, as time.struct_time.tm_wday
    start: int  # minutes after midnight
    end: int  # minutes after midnight; <= start: the span ends the next day
    text: str = ""  # as the file wrote it (status and messages)

    def open_at(self, weekday: int, minute: int) -> bool:
        """Whether a local weekday (0 = Monday) and minute of the day fall in the window."""
        if self.start < self.end:
            return weekday in self.days and self.start <= minute < self.end
        # Crosses midnight: the evening of a listed day, or the morning after one.
        yesterday = (weekday - 1) % 7
        return (weekday in self.days and minute >= self.start) or (
            yesterday in self.days and minute < self.end
        )


@dataclass(frozen=True)
class UpdatePolicy:
    windows: tuple[UpdateWindow, ...] | None = None  # () : no window, any time
    delay: float | None = None  # seconds a digest must stay unchanged before it is taken
    lock: str = ""  # a path in the container: while it exists there, the update waits

    def over(self, default: UpdatePolicy) -> UpdatePolicy:
        """This policy, with what it does not say taken from `default`."""
        return UpdatePolicy(
            self.windows if self.windows is not None else default.windows,
            self.delay if self.delay is not None else default.delay,
            self.lock or default.lock,
        )


def windows_text(windows: tuple[UpdateWindow, ...] | None) -> str:
    return ", ".join(w.text for w in windows or ())


__all__ = [
    "DAYS",
    "WEEK",
    "UpdatePolicy",
    "UpdateWindow",
    "windows_text",
]
