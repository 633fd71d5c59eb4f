"""While healerd is stopped, the engine's own restart policy keeps its containers.

A reboot of an edge host stops healerd before dockerd (the unit is After=docker.service)
and starts it after. A container without a restart policy comes back only when healerd
is there again and starts it through the API; one with a policy is started inside
dockerd's own start, before its API answers at all (bench/history/, the engine restart
runs: no API client comes within 15 % of `--restart always`). So at a clean stop healerd hands
its running replicas to the engine's `unless-stopped` policy, and at its next start,
before its first look, it takes those back ("no"; all it manages after a new host key,
as the marker went with the old state directory). healerd stays
the one healer while it runs (a crash is replaced, the failed container kept as history,
with its backoff); the engine heals only while healerd is away, which is what a Compose
file's `restart: always` means anyway. `unless-stopped`, not `always`: a container that
someone stops by hand while healerd is away stays stopped.

Not handed off: the containers of run-once services (`restart: "no"`, `on-failure`: the
engine must not run them again), of paused services and of services in a crash loop, a
replica in a crash streak, history, and whatever healerd does not own (undeclared
services, containers that do not verify). A marker in the state directory says that a
hand-off may stand (written before the first update, so that a stop killed half-way is
taken back too); without it there is nothing to take back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

from healerd.core.jobs import run_once
from healerd.model import ObservedContainer, ServiceSpec

HANDOFF_POLICY = "unless-stopped"
TAKEN_BACK = "no"


def to_hand_off(
    containers: Sequence[ObservedContainer],
    desired: Mapping[str, ServiceSpec],
    keep: AbstractSet[str],
    now: float,
) -> list[ObservedContainer]:
    """The containers a stop gives the engine's policy: running replicas of declared,
    long-running services not in `keep` (paused, crash-looping), none in a crash streak.
    A replica carries its streak (its label, or its run when restarted in place: the
    containers come with what the loop remembers) for life: it is in a streak only until
    its run lasted the policy's window (as the planner forgives)."""
    out = []
    for c in containers:
        spec = desired.get(c.service)
        if spec is None or c.service in keep or not c.running or run_once(spec):
            continue
        if c.crash_streak > 0 and now - c.run_started < spec.restart_policy.window:
            continue
        out.append(c)
    return out


__all__ = ["HANDOFF_POLICY", "TAKEN_BACK", "to_hand_off"]
