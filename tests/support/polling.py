"""Waiting on a condition with a deadline, never a bare sleep.

`wait_for` polls until a condition holds and fails at the deadline naming what it waited
for; `holds_for` asserts that a condition stays true for a while (a bounded watch). Used
by the integration tests, the chaos soak and the benchmarks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import docker

T = TypeVar("T")


class WaitTimeout(AssertionError, TimeoutError):
    """A deadline of `wait_for` passed: a test failure in a test, a TimeoutError to the
    soak and the benchmarks (which catch that)."""


def wait_for(
    what: str,
    cond: Callable[..., T],
    timeout: float = 10.0,
    interval: float = 0.02,
    *,
    ignore: tuple[type[Exception], ...] = (docker.errors.APIError,),
) -> T:
    """Call `cond` every `interval` seconds until it returns something truthy, and return
    that; raise WaitTimeout naming `what` (and the last value or error) at the deadline.
    An exception of a type in `ignore` (an engine error, by default) counts as not yet.

    `cond` is called without arguments (a lambda with defaults, as ruff's B023 wants in a
    loop, is fine)."""
    deadline = time.monotonic() + timeout
    while True:
        last: object
        try:
            value = cond()
        except ignore as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def holds_for(
    what: str, cond: Callable[..., object], duration: float, interval: float = 0.05
) -> None:
    """Assert that `cond` is true now, every `interval` seconds, and at the end of
    `duration` seconds."""
    deadline = time.monotonic() + duration
    while True:
        if not cond():
            raise AssertionError(f"{what} stopped holding")
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)
