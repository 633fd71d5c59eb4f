"""What a removed Compose project leaves (issue 16, point 3), on a real engine: like
`docker compose down` without -v, the networks healerd made for it go once no container
uses them; its named volumes stay (data is removed only on request); a network healerd
did not make is never touched."""

from __future__ import annotations

import textwrap

import docker

from tests.integration.harness import IMAGE
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for


def _networks(api: docker.APIClient) -> set[str]:
    return {str(n["Name"]) for n in api.networks()}


def test_a_removed_project_takes_its_networks_and_leaves_its_volumes(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient
) -> None:
    api.create_network("gone_byhand", driver="bridge")  # made by someone else
    try:
        stack = textwrap.dedent(
            f"""\
            services:
              web:
                image: {IMAGE}
                command: {list(COMMAND)}
                stop_grace_period: 1s
                volumes: ["data:/data"]
                networks: [default, back]
            networks:
              back: {{}}
            volumes:
              data: {{}}
            """
        )
        path = config.write("gone.yaml", stack)
        config.write(
            "stays.yaml",
            f"services:\n  other:\n    image: {IMAGE}\n    volumes: [keep:/k]\n"
            "volumes:\n  keep: {}\n",
        )
        healerd.start()
        wait_for("web running", lambda: cluster.converged("web", 1), timeout=30)
        assert {"gone_default", "gone_back", "stays_default"} <= _networks(api)
        path.unlink()
        wait_for("web removed", lambda: cluster.containers("web", history=True) == [], 30)
        wait_for(
            "its networks removed",
            lambda: not {"gone_default", "gone_back"} & _networks(api),
            timeout=30,
        )
        assert {"gone_byhand", "stays_default"} <= _networks(api)
        assert api.inspect_volume("gone_data")["Labels"]["io.healerd.project"] == "gone"
        # Named volumes go only on request, and only those no declared service names.
        rc, out, err = healerd.ctl("prune", "volumes", "--dry-run")
        assert rc == 0 and out.strip() == "would remove 1 volume(s): gone_data", (out, err)
        assert api.inspect_volume("gone_data")
        rc, out, err = healerd.ctl("prune", "volumes")
        assert rc == 0 and out.strip() == "removed 1 volume(s): gone_data", (out, err)
        names = {v["Name"] for v in api.volumes()["Volumes"] or ()}
        assert "gone_data" not in names and "stays_keep" in names
    finally:
        api.remove_network("gone_byhand")


def test_a_network_removed_behind_healerds_back_is_made_again_at_the_next_heal(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient
) -> None:
    # healerd remembers the networks it has seen (no lookup per create); one removed by
    # hand costs at most one failed create, then the next pass makes it again.
    config.write(
        "net.yaml",
        f"services:\n  web:\n    image: {IMAGE}\n    command: {list(COMMAND)}\n"
        "    stop_grace_period: 1s\n",
    )
    healerd.start()
    wait_for("web running", lambda: cluster.converged("web", 1), timeout=30)
    (old,) = cluster.running("web")
    api.remove_container(old["Id"], force=True)
    wait_for("healed", lambda: cluster.converged("web", 1), timeout=30)
    rc, out, err = healerd.ctl("pause", "web")
    assert rc == 0, (out, err)
    (c,) = cluster.running("web")
    api.remove_container(c["Id"], force=True)
    api.remove_network("net_default")
    rc, out, err = healerd.ctl("resume", "web")
    assert rc == 0, (out, err)
    wait_for("healed onto a new network", lambda: cluster.converged("web", 1), timeout=30)
    assert "net_default" in _networks(api)
