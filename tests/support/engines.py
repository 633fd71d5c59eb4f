"""Which engine the integration tests run against: HEALERD_TEST_ENGINE.

- `docker` (the default): the host's dockerd (Debian 12's docker.io 20.10), the whole suite;
- `docker26`: Debian 13's dockerd 26.1, run from a debootstrap'd Debian 13 root in a chroot;
- `podman`: Podman 4.3 from Debian 12, through its Docker-compatible socket.

On every engine but `docker` only the tests marked `every_engine` run (the engine contract
and the focused subset issue 31 names); the others are skipped with the reason. `.ci/run`
runs `-m every_engine` once per engine besides the whole suite on `docker`.
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


def private_engine(root: Path) -> PrivateDockerd:
    """A private engine of the chosen kind under `root` (PrivateDockerd's interface)."""
    chosen = kind()
    if chosen == "docker":
        return PrivateDockerd(root)
    if chosen == "podman":
        return PrivatePodman(root)
    raise NotImplementedError(f"HEALERD_TEST_ENGINE={chosen}: not built yet")
