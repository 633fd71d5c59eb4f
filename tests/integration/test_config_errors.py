"""A config error never removes or changes a running container."""

from __future__ import annotations

import json
import re
import signal

import docker

from tests.integration.harness import IMAGE
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for


def test_bad_files_are_reported_and_skipped_at_start(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    bad_yaml = config.write("bad-yaml.yaml", "services:\n  x:\n    image: [unclosed\n")
    unknown = config.write("unknown.yaml", f"services:\n  u:\n    image: {IMAGE}\n    replica: 2\n")
    negative = config.write(
        "negative.yaml", f"services:\n  n:\n    image: {IMAGE}\n    replicas: -1\n"
    )
    config.service("good.yaml", "good", 1)
    healerd.start()
    wait_for("the good service", lambda: cluster.converged("good", 1), timeout=20)
    log = wait_for(
        "three config errors",
        lambda: healerd.log() if healerd.log().count("config error:") >= 3 else "",
        timeout=10,
    )
    assert re.search(rf"{re.escape(str(bad_yaml))}:[34](:\d+)?: ", log)
    unknown_line = rf"{re.escape(str(unknown))}:4(:\d+)?: services\.u\.replica: unknown key"
    assert re.search(unknown_line, log) and "did you mean 'replicas'" in log
    assert re.search(rf"{re.escape(str(negative))}:4(:\d+)?: services\.n\.replicas: ", log)
    assert cluster.containers("u") == [] and cluster.containers("n") == []


def test_a_file_that_breaks_keeps_its_containers_and_others_still_apply(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient
) -> None:
    config.service("a.yaml", "alpha", 2)
    config.service("b.yaml", "beta", 1)
    healerd.start()
    wait_for(
        "both", lambda: cluster.converged("alpha", 2) and cluster.converged("beta", 1), timeout=20
    )
    alpha = sorted(
        (c["Id"], c["Labels"]["io.healerd.spec-hash"]) for c in cluster.containers("alpha")
    )

    breakages = [
        "services:\n  alpha: [\n",  # invalid YAML
        f"services:\n  alpha:\n    image: {IMAGE}\n    replicas: 1\n    bogus: 1\n",  # unknown key
        f"services:\n  alpha:\n    image: {IMAGE}\n    replicas: -1\n",  # negative count
    ]
    for i, broken in enumerate(breakages):
        config.write("a.yaml", broken)
        beta = 2 if i % 2 == 0 else 1
        config.service("b.yaml", "beta", beta)
        healerd.signal(signal.SIGHUP)
        wait_for(f"beta at {beta}", lambda b=beta: cluster.converged("beta", b), timeout=20)
        holds_for(
            "alpha untouched",
            lambda: (
                sorted(
                    (c["Id"], c["Labels"]["io.healerd.spec-hash"])
                    for c in cluster.containers("alpha")
                    if c["State"] == "running"
                )
                == alpha
            ),
            1.0,
        )
    assert healerd.log().count("config error:") >= 3
    # While its file is broken, alpha is still healed: a kill in place (issue 28), and a
    # removed container replaced by one of its last good spec.
    victim, alpha_hash = alpha[0]
    started = api.inspect_container(victim)["State"]["StartedAt"]
    api.kill(victim)
    wait_for(
        "alpha started again in place",
        lambda: (
            cluster.converged("alpha", 2, alpha_hash)
            and api.inspect_container(victim)["State"]["StartedAt"] != started
        ),
        timeout=10,
    )
    api.remove_container(victim, force=True)
    wait_for(
        "alpha replaced",
        lambda: (
            cluster.converged("alpha", 2, alpha_hash)
            and victim not in {c["Id"] for c in cluster.containers("alpha")}
        ),
        timeout=10,
    )


def test_a_restart_keeps_the_declaration_that_runs_for_a_service_declared_twice(
    healerd: Healerd, config: ConfigDir, cluster: Cluster
) -> None:
    # z.yaml declares web and runs it; a.yaml, added later, declares web again with the
    # same container spec (one spec hash) but 5 replicas, and a service of its own.
    config.service("z.yaml", "web", 2)
    healerd.start()
    wait_for("web from z.yaml", lambda: cluster.converged("web", 2), timeout=20)
    before = sorted((c["Id"], c["Labels"]["io.healerd.spec-hash"]) for c in cluster.running("web"))
    assert all(
        c["Labels"]["io.healerd.source-file"] == str(config.conf_d / "z.yaml")
        for c in cluster.running("web")
    )
    body = f"    image: {IMAGE}\n    command: {json.dumps(COMMAND)}\n    stop_grace_period: 2s\n"
    config.write("a.yaml", f"services:\n  web:\n{body}    replicas: 5\n  extra:\n{body}")
    wait_for("a.yaml refused", lambda: "declared in both" in healerd.log(), timeout=10)
    assert healerd.stop() == 0
    healerd.start()  # a.yaml now sorts first, but z.yaml's web is what runs
    wait_for("healerd ready", lambda: "ready:" in healerd.log(), timeout=20)
    holds_for(
        "web untouched across the restart",
        lambda: (
            sorted((c["Id"], c["Labels"]["io.healerd.spec-hash"]) for c in cluster.running("web"))
            == before
        ),
        3.0,
    )
    assert cluster.containers("extra") == []  # a.yaml stays refused whole
    assert re.search(r"a\.yaml:2(:\d+)?: services\.web: declared in both .*z\.yaml", healerd.log())
