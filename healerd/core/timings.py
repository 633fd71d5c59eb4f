"""Every recheck, backoff and window of the loop, with its default, in one place.

"How long does healerd wait before it looks again?" is answered here: the loop's
modules take these from `LoopSettings.timings` (healerd.core.loopsettings), none keeps a
constant of its own, and a test passes its own `Timings` to make the loop faster or
slower. healerd.yaml sets `backoff` (backoff_base, backoff_max); the rest are defaults,
each with why. (The memory of healerd's own engine events, core/echoes.py's EXPECT_FOR, is
no wait of the loop's: it only bounds a table.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from healerd.core.backoff import Backoff


@dataclass(frozen=True)
class Timings:
    # -- backoffs: exponential, capped, never giving up ------------------------------
    # A pass that failed (an action, the engine mid-pass): healerd.yaml's backoff_base
    # and backoff_max. Per service, in the work queue.
    backoff: Backoff = field(default_factory=lambda: Backoff(0.005, 60.0))
    # An image that cannot be had (pull failed, pull_policy never): the same per-service
    # failure count as `backoff`, on a slower curve.
    pull_backoff: Backoff = field(default_factory=lambda: Backoff(2.0, 300.0))
    # The engine's event stream, reconnecting (healerd.daemon.watcher).
    reconnect_backoff: Backoff = field(default_factory=lambda: Backoff(0.25, 5.0))

    # -- rechecks: how soon a service looks again while it waits --------------------
    # The list still disagrees with an event (a `die` the list shows running).
    suspect_recheck: float = 0.02
    # Creates wait for room on the host (pressure has no events).
    resource_recheck: float = 2.0
    # A dependency (depends_on) is not ready yet.
    dependency_recheck: float = 1.0
    # A pull was refused for lack of disk.
    pull_disk_recheck: float = 10.0
    # The engine cannot be listed: at most this long between looks, fast for the first
    # `engine_fast_for` seconds of an outage (an engine restart, a reboot: every second
    # counts), then slow (each failed look takes a token of the engine-call budget).
    engine_recheck_fast: float = 0.1
    engine_recheck_slow: float = 1.0
    engine_fast_for: float = 60.0

    # -- windows: how long something seen is believed --------------------------------
    # A list stays good for keys queued before it began (a resync's keys come in
    # batches of at most `workers`: the level is read once per resync, not per batch).
    look_reuse: float = 2.0
    # An event the list does not confirm yet (a `die` of a container listed running).
    suspect_window: float = 2.0
    # A start in place without an answer: beyond every engine call's own bound
    # (engine_timeout), so only a lost answer ever reaches it.
    start_on_its_way: float = 120.0
    # An image seen present (a create that finds it gone fails and is retried anyway).
    image_seen_ttl: float = 30.0
    # A sample of the host (psutil reads /proc: cheap, not free).
    host_sample_ttl: float = 1.0
    # A granted container's memory held against the room: it shows in `available`
    # only as the container starts up.
    reservation: float = 5.0


__all__ = ["Timings"]
