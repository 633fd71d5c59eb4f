"""Hot reload: file changes apply within a second without SIGHUP; broken writes change nothing."""

from __future__ import annotations

import json
import os
import time

from tests.integration.harness import IMAGE, unique
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for

RELOADING = "reloading configuration"
# The watcher debounces for 0.2 s (at most 0.8 s in a burst); the issue asks for 1 s.
NOTICE_LIMIT = 1.0


def running_ids(cluster: Cluster, name: str) -> list[str]:
    return sorted(c["Id"] for c in cluster.containers(name) if c["State"] == "running")


def errors_logged(healerd: Healerd) -> int:
    return healerd.log().count("config error:")


def test_files_are_applied_without_sighup(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    healerd.start()
    wait_for("the watcher", lambda: "for changes (inotify)" in healerd.log(), timeout=10)
    name, other = unique("hot"), unique("other")

    config.service("hot.yaml", name, 1)
    config.service("other.yaml", other, 1)
    wait_for(
        "new files applied",
        lambda: cluster.converged(name, 1) and cluster.converged(other, 1),
        timeout=30,
    )

    # Replicas 1 -> 3: how long until healerd reloads, and until it acts on the engine.
    reloads = healerd.log().count(RELOADING)
    start = time.monotonic()
    config.service("hot.yaml", name, 3)
    wait_for("the reload", lambda: healerd.log().count(RELOADING) > reloads, timeout=10)
    noticed = time.monotonic() - start
    wait_for("replicas 1 -> 3", lambda: len(cluster.containers(name)) == 3, timeout=20)
    applied = time.monotonic() - start
    print(
        f"replicas change without SIGHUP: reloaded after {noticed:.2f}s, "
        f"new containers created after {applied:.2f}s"
    )
    assert noticed < NOTICE_LIMIT, f"the change was noticed after {noticed:.2f}s"
    wait_for("three running", lambda: cluster.converged(name, 3), timeout=20)
    ids = running_ids(cluster, name)

    # Bad phases: the file's containers stay exactly as they are, other files still apply.
    for replicas, broken in (
        (2, "services:\n  x: [\n"),  # invalid YAML
        (3, f"services:\n  {name}:\n    image: {IMAGE}\n    replicas: 1\n    bogus: 1\n"),
    ):
        reported = errors_logged(healerd)
        config.write("hot.yaml", broken)
        wait_for(
            "the error reported",
            lambda n=reported: errors_logged(healerd) > n,
            timeout=10,
        )
        config.service("other.yaml", other, replicas)
        wait_for(
            f"the other file applied ({replicas} replicas)",
            lambda r=replicas: cluster.converged(other, r),
            timeout=30,
        )
        assert running_ids(cluster, name) == ids
        holds_for("containers unchanged", lambda: running_ids(cluster, name) == ids, 2.0)

    # The fix applies, with its new spec (a label changes the spec hash: new containers).
    config.service("hot.yaml", name, 2, labels='{release: "2"}')
    wait_for(
        "the fix applied",
        lambda: (
            cluster.converged(name, 2)
            and all(c["Labels"].get("release") == "2" for c in cluster.containers(name))
        ),
        timeout=30,
    )
    assert not set(running_ids(cluster, name)) & set(ids)

    (config.conf_d / "hot.yaml").unlink()
    wait_for("containers gone", lambda: cluster.containers(name) == [], timeout=20)
    assert cluster.converged(other, 3)
    assert healerd.alive()


def test_a_file_written_slowly_in_chunks_is_never_applied_half_written(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    healerd.start()
    wait_for("the watcher", lambda: "for changes (inotify)" in healerd.log(), timeout=10)
    name = unique("slow")
    path = config.service("slow.yaml", name, 1)
    wait_for("the first version", lambda: cluster.converged(name, 1), timeout=20)
    ids = running_ids(cluster, name)

    # Rewritten in place, as cp or a plain editor save does, in chunks far apart enough
    # (each waits for healerd to read and reject what is there) that the debounce cannot
    # hide them. The cuts fall mid-line, as a writer's buffer boundaries do.
    text = (
        "services:\n"
        f"  {name}:\n"
        f"    image: {IMAGE}\n"
        f"    command: {json.dumps(COMMAND)}\n"
        "    stop_grace_period: 2s\n"
        "    replicas: 2\n"
        '    labels: {release: "2", written: slowly}\n'
    )
    # Each cut leaves an invalid file: an image with an empty tag, an unclosed flow list,
    # an unclosed flow mapping.
    cuts = [text.index(IMAGE) + IMAGE.index(":") + 1, text.index('"-c"') + 2, text.index("wri")]
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    since = time.time()
    with open(path, "w", encoding="utf-8") as f:
        for chunk in chunks[:-1]:
            reported = errors_logged(healerd)
            f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            wait_for(
                "the partial file rejected",
                lambda n=reported: errors_logged(healerd) > n,
                timeout=10,
            )
            holds_for("containers unchanged", lambda: running_ids(cluster, name) == ids, 0.5)
        f.write(chunks[-1])
    assert path.read_text(encoding="utf-8") == text
    wait_for(
        "the whole file applied",
        lambda: (
            cluster.converged(name, 2)
            and all(c["Labels"].get("written") == "slowly" for c in cluster.containers(name))
        ),
        timeout=30,
    )
    assert "config errors resolved" in healerd.log()
    # Only the complete spec reached the engine: its two containers are the only ones made.
    assert cluster.count_events(name, "create", since) == 2


def test_a_group_writable_file_is_refused_with_a_message_naming_it(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    os.chmod(config.root, 0o755)
    os.chmod(config.conf_d, 0o755)
    name = unique("lax")
    path = config.service("lax.yaml", name, 1)
    os.chmod(path, 0o664)
    healerd.start()
    message = f"config error: {path}: file: refused: file {path} is writable by group"
    wait_for("the refusal", lambda: message in healerd.log(), timeout=10)
    holds_for("nothing started", lambda: cluster.containers(name) == [], 1.5)

    os.chmod(path, 0o644)  # fixed: the chmod alone (an inotify event) applies it
    wait_for("the file applied once fixed", lambda: cluster.converged(name, 1), timeout=20)
    assert healerd.alive()
