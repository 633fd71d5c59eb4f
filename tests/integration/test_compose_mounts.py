"""Compose's `bind.create_host_path` on a real dockerd (issue 16).

The spec: a missing host path of a bind is made (true by default, in both syntaxes), and
with `create_host_path: false` it is an error. healerd sends the first as a bind string,
which the engine completes by making the directory, and the second as a Mount, which the
engine refuses (`bind source path does not exist`) as it refuses Compose's: the service
shows that error and is retried under its backoff, and runs once the path exists.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for


def test_a_missing_host_path_is_made_unless_create_host_path_is_false(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, tmp_path: Path
) -> None:
    made, strict = tmp_path / "made" / "here", tmp_path / "strict"
    config.service(
        "made.yaml",
        "made",
        1,
        volumes=f"[{{type: bind, source: {made}, target: /data}}]",
    )
    config.service(
        "strict.yaml",
        "strict",
        1,
        volumes=f"[{{type: bind, source: {strict}, target: /data, "
        "bind: {create_host_path: false}}]",
        restart_policy="{delay: 1s, max_delay: 1s}",
    )
    healerd.start()
    wait_for("made runs", lambda: len(cluster.running("made")) == 1, timeout=30)
    assert made.is_dir()

    def refused() -> bool:
        # -o wide: the whole reason (the table cuts a long one in its middle, where the
        # engine's words sit before the path here).
        _, out, _ = healerd.ctl("status", "strict", "-o", "wide")
        return "bind source path does not exist" in out

    wait_for("strict shows the engine's refusal", refused, timeout=30)
    assert not cluster.running("strict") and not strict.exists()
    strict.mkdir()
    wait_for("strict runs once its path exists", lambda: len(cluster.running("strict")) == 1, 30)
