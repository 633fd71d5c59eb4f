"""Which engine the integration tests run against: HEALERD_TEST_ENGINE.

- `docker` (the default): the host's dockerd (Debian 12's docker.io 20.10), the whole suite;
- `docker26`: Debian 13's dockerd 26.1, run from a debootstrap'd Debian 13 root (its own
  mount namespace, pivot_root into the root: tests/support/chrootdockerd.py);
- `podman`: Podman 4.3 from Debian 12, through its Docker-compatible socket.

On every engine but `docker` only the tests marked `every_engine` run (the engine contract
and the focused subset issue 31 names); the others are skipped with the reason. `.ci/run`
runs `-m every_engine` once per engine besides the whole suite on `docker`.
`HEALERD_TEST_EVERY_TEST=1` runs every test on the chosen engine (as on a Debian 13 host,
whose own engine is 26.1).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.dockerd import PrivateDockerd
from tests.support.podman import PrivatePodman

KINDS = ("docker", "docker26", "podman")
DEFAULT = "docker"


def kind() -> str:
    """The engine chosen for this run; an unknown name is an error, not a silent default."""
    chosen = os.environ.get("HEALERD_TEST_ENGINE", DEFAULT) or DEFAULT
    if chosen not in KINDS:
        raise ValueError(f"HEALERD_TEST_ENGINE={chosen!r}: expected one of {', '.join(KINDS)}")
    return chosen


def engine_kind() -> str:
    """What healerd calls the chosen engine (`engine.kind`): docker26 is docker."""
    return "podman" if kind() == "podman" else "docker"


def reap_stale(parent: Path) -> None:
    """What runs that died left in `parent`, of every kind."""
    PrivateDockerd.reap_stale(parent)
    PrivatePodman.reap_stale(parent)


def private_engine(
    root: Path, chosen: str | None = None, bridge_prefix: str | None = None
) -> PrivateDockerd:
    """A private engine under `root` (PrivateDockerd's interface), of the kind `chosen`
    (the run's, HEALERD_TEST_ENGINE, by default); `bridge_prefix` names its bridge (each
    kind has its own by default)."""
    chosen = chosen or kind()
    if chosen == "docker":
        return PrivateDockerd(root, bridge_prefix=bridge_prefix or "hdt")
    if chosen == "docker26":
        from tests.support.chrootdockerd import ChrootDockerd

        return ChrootDockerd(root, bridge_prefix=bridge_prefix or "hdt")
    if chosen == "podman":
        return PrivatePodman(root, bridge_prefix=bridge_prefix or "hdp")
    raise NotImplementedError(f"HEALERD_TEST_ENGINE={chosen}: not built yet")
