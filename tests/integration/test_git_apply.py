"""Configuration from git, end to end (issue 35 points 3 and 4): healerd with a source on a
real git-daemon on loopback, commits signed with `ssh-keygen` keys. A good commit's
service runs; a wrongly signed commit, and a signed commit with one broken file, are
refused whole with the last good commit still running (its service unchanged, the other
file of the broken commit not applied either); a remote that goes away keeps everything
running and status says why."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.gitserver import Upstream, make_upstream, serve
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for


def stack(name: str, image: str, command: list[str], env: str) -> str:
    return (
        f"services:\n  {name}:\n    image: {image}\n    command: {json.dumps(command)}\n"
        f"    stop_grace_period: 2s\n    environment: {{STAGE: {env}}}\n"
    )


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return make_upstream(tmp_path)


@pytest.fixture
def remote(upstream: Upstream) -> Iterator[Any]:
    yield from serve(upstream)


def source_of(healerd: Healerd) -> dict[str, Any]:
    (source,) = healerd.api("/v1/status")["sources"]
    assert isinstance(source, dict)
    return source


def env_of(cluster: Cluster, name: str) -> list[str]:
    return [
        e
        for c in cluster.running(name)
        for e in cluster.api.inspect_container(c["Id"])["Config"]["Env"]
        if e.startswith("STAGE=")
    ]


def test_signed_commits_apply_and_bad_ones_are_refused_whole(
    upstream: Upstream,
    remote: Any,
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
) -> None:
    url, server = remote
    command = config.command
    good = upstream.commit(
        {"hosts/edge/web.yaml": stack("gitweb", config.image, command, "one")}, upstream.good_key
    )
    config.settings(
        f"sources:\n  - git: {url}\n    ref: main\n    path: hosts/edge/\n"
        f"    interval: 10s\n    timeout: 20s\n"
        f"    verify: {{allowed_signers: {upstream.signers}}}\n"
    )
    healerd.start()
    wait_for("the good commit's service", lambda: cluster.converged("gitweb", 1), timeout=60)
    assert source_of(healerd)["applied_commit"] == good
    ids = sorted(c["Id"] for c in cluster.running("gitweb"))

    # Wrongly signed: refused, the last good commit stays.
    bad = upstream.commit(
        {"hosts/edge/web.yaml": stack("gitweb", config.image, command, "two")}, upstream.bad_key
    )
    code, _, err = healerd.ctl("sync")
    assert code == 1, err
    assert source_of(healerd)["applied_commit"] == good
    assert bad[:12] in json.dumps(source_of(healerd)) or source_of(healerd)["last_error"]

    # Signed, but one file broken: the commit is refused whole (its good file too).
    upstream.commit(
        {
            "hosts/edge/web.yaml": stack("gitweb", config.image, command, "three"),
            "hosts/edge/broken.yaml": "services:\n  other:\n    restart: sometimes\n",
        },
        upstream.good_key,
    )
    healerd.ctl("sync")
    wait_for(
        "the broken commit refused",
        lambda: "broken.yaml" in str(source_of(healerd)["last_error"]),
        timeout=30,
    )
    assert source_of(healerd)["applied_commit"] == good
    holds_for(
        "the good commit's container unchanged",
        lambda: (
            sorted(c["Id"] for c in cluster.running("gitweb")) == ids
            and env_of(cluster, "gitweb") == ["STAGE=one"]
        ),
        2.0,
    )

    # The remote goes away: everything keeps running, status says why.
    server.kill()
    server.wait()
    code, _, _ = healerd.ctl("sync")
    assert code == 1
    assert source_of(healerd)["last_error"]
    assert sorted(c["Id"] for c in cluster.running("gitweb")) == ids
    code, out, _ = healerd.ctl("status")
    assert good[:12] in out or good[:7] in out, out
