"""A config file is applied when its writer is done with it, never half-written (issue 14).

A writer (`cat > file`, scp, a slow tee) rewrites a service file in place in two chunks.
The first chunk alone is a valid file: it ends at `replicas: 1` of `replicas: 10`, so
applied it would scale the service from 3 to 1 and remove two running containers. The
running count is sampled every 50 ms from the first chunk until the whole file is
applied, and must never drop below 3; a SIGHUP between the chunks (the reload path that
SIGHUP, the periodic resync and `healerctl reload` share) must not apply the prefix
either.

Three ways healerd watches the file:
- inotify, the default (the ctypes binding in healerd/daemon/inotify.py);
- as the Debian package runs it: the same inotify, with no `inotify_simple` importable
  (Debian does not package it; healerd must neither need nor import it);
- polling, forced with HEALERD_CONFWATCH=polling (for tests): a file is applied once its
  size and mtime stayed the same for one poll interval (1 s), so there the chunks come
  less than an interval apart. A writer that pauses longer than that cannot be told from
  one that is done (best effort, documented in docs/user-guide.md).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from healerd.config import parse_service_text
from healerd.daemon.confwatch import MODE_ENV
from tests.integration.harness import IMAGE, unique
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for

SAMPLE = 0.05
HELD = "is being written; its last version stands"
NEW_TEXT = (
    "services:\n"
    "  {name}:\n"
    f"    image: {IMAGE}\n"
    f"    command: {json.dumps(COMMAND)}\n"
    "    stop_grace_period: 2s\n"
    "    replicas: 10\n"
)


def running(cluster: Cluster, name: str) -> int:
    return len(cluster.running(name))


def rewrite_in_two_chunks(
    path: Path, text: str, gap: float, during_gap: Callable[[], None], check: Callable[[], bool]
) -> None:
    """Rewrites `path` in place: the prefix up to `replicas: 1`, then after `gap` seconds
    (sampling `check` every 50 ms, and calling `during_gap` halfway) the rest."""
    cut = text.index("replicas: 10") + len("replicas: 1")
    prefix = parse_service_text(text[:cut], str(path))
    assert prefix.services is not None, prefix.errors  # valid: it would apply
    assert [s.replicas for s in prefix.services.values()] == [1]
    with open(path, "w", encoding="utf-8") as f:  # truncates, as cat > file does
        f.write(text[:cut])
        f.flush()
        os.fsync(f.fileno())
        holds_for("at least 3 running while half-written", check, gap / 2, SAMPLE)
        during_gap()
        holds_for("at least 3 running while half-written", check, gap / 2, SAMPLE)
        f.write(text[cut:])


def half_written_scenario(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, gap: float
) -> None:
    name = unique("half")
    path = config.service("half.yaml", name, 3)
    wait_for("three running", lambda: cluster.converged(name, 3), timeout=30)
    lowest = [3]

    def at_least_three() -> bool:
        count = running(cluster, name)
        lowest[0] = min(lowest[0], count)
        return count >= 3

    def sighup() -> None:
        healerd.signal(signal.SIGHUP)
        wait_for("the SIGHUP reload", lambda: HELD in healerd.log(), timeout=gap)

    rewrite_in_two_chunks(path, NEW_TEXT.format(name=name), gap, sighup, at_least_three)

    def applied() -> bool:
        assert at_least_three(), f"{name} dropped to {lowest[0]} running"
        return cluster.converged(name, 10)

    wait_for("the whole file applied (10 running)", applied, timeout=60, interval=SAMPLE)
    assert lowest[0] >= 3
    assert "config error" not in healerd.log()  # the prefix was never even read as broken
    assert healerd.alive()


def test_a_file_written_in_two_chunks_is_applied_only_when_closed(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    healerd.start()
    wait_for("the watcher", lambda: "for changes (inotify)" in healerd.log(), timeout=10)
    half_written_scenario(healerd, config, cluster, gap=2.0)


def test_as_the_debian_package_runs_it_without_inotify_simple(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The package depends on Debian's python3 modules only, which have no inotify_simple:
    healerd runs here with that module made unimportable (and any import attempt noted)."""
    blocker = tmp_path / "no-inotify-simple"
    blocker.mkdir()
    marker = tmp_path / "inotify_simple-imported"
    (blocker / "inotify_simple.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
        "raise ImportError('Debian does not package inotify_simple')\n"
    )
    python = tmp_path / "python3-debian"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{blocker}:$PYTHONPATH" exec {sys.executable} "$@"\n')
    python.chmod(stat.S_IRWXU)
    monkeypatch.setattr(sys, "executable", str(python))  # what Healerd.start runs
    healerd.start()
    wait_for("the watcher", lambda: "for changes (inotify)" in healerd.log(), timeout=10)
    half_written_scenario(healerd, config, cluster, gap=2.0)
    assert not marker.exists(), "healerd tried to import inotify_simple"


def test_with_polling_a_file_is_applied_once_stable_for_a_poll_interval(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MODE_ENV, "polling")
    healerd.start()
    wait_for("the watcher", lambda: "for changes (polling)" in healerd.log(), timeout=10)
    start = time.monotonic()
    half_written_scenario(healerd, config, cluster, gap=0.6)
    print(f"polling: rewritten and applied in {time.monotonic() - start:.1f}s")
