"""Watching config files: recorded calls, settling, a clock."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from healerd.daemon.confwatch import ConfigWatcher

GOOD = "services:\n  web: {image: busybox}\n"


class Calls:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.times.append(time.monotonic())

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.times)


def wait_until(what: str, predicate: Callable[[], bool], timeout: float = 3.0) -> float:
    """Polls until `predicate` holds; returns how long it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)
    return time.monotonic() - start


def settle(calls: Calls, watcher: ConfigWatcher) -> int:
    """Waits until no callback is pending (longer than the debounce) and returns the count."""
    before = -1
    while before != calls.count:
        before = calls.count
        deadline = time.monotonic() + watcher._max_delay + 0.4
        while time.monotonic() < deadline and calls.count == before:
            time.sleep(0.02)
    return calls.count


@contextlib.contextmanager
def watching(root: Path, also: Iterable[str]) -> Iterator[tuple[Calls, ConfigWatcher, int]]:
    """An inotify watcher of `root` that watches `also` too (a DesiredStore's sources),
    settled: its calls, itself and their count so far; stopped after the block."""
    calls = Calls()
    watcher = ConfigWatcher(root, calls, use_inotify=True)
    watcher.start()
    try:
        watcher.watch_also(also)
        yield calls, watcher, settle(calls, watcher)
    finally:
        watcher.stop()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now
