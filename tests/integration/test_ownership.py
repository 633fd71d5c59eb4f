"""Ownership that cannot be borrowed (issue 15, findings 7 and 8), on a real engine.

healerd signs every container it makes with its host key; a container with healerd's
labels that does not verify (copied with `docker commit`, by hand, or made up) is never
counted, stopped or removed, and `healerctl status` names it. Containers older than the
key (made by a healerd without signatures) are adopted as they are, with no churn.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from typing import Any

import docker

from healerd.model import LABEL_IMAGE, LABEL_SERVICE, LABEL_SIGNATURE, LABEL_SPEC_HASH
from tests.integration.harness import IMAGE
from tests.support.busybox_image import COMMAND
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for
from tests.support.variants import variant

READY_NOW = "{min_ready_seconds: 0s}"
COMMITTED = "healerd-test/committed:1"
MOVING = "healerd-test/ownership:1"  # a tag that test moves to another image


def running_ids(cluster: Cluster, service: str) -> set[str]:
    return {c["Id"] for c in cluster.running(service)}


def started_again(api: docker.APIClient, cid: str, started_before: str) -> bool:
    """The same container runs again, started since `started_before` (healed in place)."""
    state = api.inspect_container(cid)["State"]
    return bool(state["Running"]) and state["StartedAt"] != started_before


def signed(cluster: Cluster, service: str) -> list[dict[str, Any]]:
    return [c for c in cluster.running(service) if LABEL_SIGNATURE in c["Labels"]]


def test_copied_and_made_up_healerd_labels_are_left_alone_and_reported(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient
) -> None:
    config.service("own.yaml", "own", 1, update_config=READY_NOW)
    healerd.start()
    wait_for("own converged", lambda: cluster.converged("own", 1), timeout=20)
    (real,) = cluster.running("own")
    forged: dict[str, str] = {}
    # 1. The labels copied by hand, signature and all, onto another container.
    forged["own-copy"] = api.create_container(
        IMAGE, COMMAND, name="own-copy", labels=real["Labels"], stop_timeout=1
    )["Id"]
    # 2. docker commit of healerd's container, run: the image carries its labels.
    # (pause=False: a paused container is a failed one, and healerd would replace it.)
    api.commit(real["Id"], repository=COMMITTED.split(":")[0], tag="1", pause=False)
    forged["own-committed"] = api.create_container(
        COMMITTED, COMMAND, name="own-committed", stop_timeout=1
    )["Id"]
    # 3. Made-up labels of an undeclared service (healerd would remove its containers).
    forged["ghost-made-up"] = api.create_container(
        IMAGE,
        COMMAND,
        name="ghost-made-up",
        labels={LABEL_SERVICE: "ghost", LABEL_SPEC_HASH: "0" * 16},
        stop_timeout=1,
    )["Id"]
    try:
        for cid in forged.values():
            api.start(cid)
        assert LABEL_SIGNATURE in api.inspect_container(forged["own-committed"])["Config"]["Labels"]
        # A heal is still needed when the real one dies: the copies are no replicas. A
        # kill is healed in place (the same container started again, nothing made) ...
        started = api.inspect_container(real["Id"])["State"]["StartedAt"]
        t0 = time.time()
        api.kill(real["Id"])
        wait_for(
            "the real one started again in place",
            lambda: started_again(api, real["Id"], started),
            timeout=10,
        )
        assert cluster.count_events("own", "create", t0) == 0
        # ... and one removed is replaced by a new container.
        api.remove_container(real["Id"], force=True)

        def mine() -> set[str]:
            return running_ids(cluster, "own") - set(forged.values()) - {real["Id"]}

        wait_for("the real one replaced", mine, timeout=10)
        holds_for(
            "every forged container untouched and still running",
            lambda: (
                set(forged.values()) <= running_ids(cluster, "own") | running_ids(cluster, "ghost")
            ),
            3.0,
        )
        assert len(mine()) == 1
        code, out, err = healerd.ctl("status")
        assert code == 0, err
        assert "3 container(s) carry healerd's labels without its signature" in out, out
        for name in forged:
            assert name in out, out
        code, out, _ = healerd.ctl("status", "-o", "json")
        whys = {u["name"]: u["why"] for u in json.loads(out)["unverified"]}
        assert whys["ghost-made-up"].startswith("no signature"), whys
        assert whys["own-copy"].startswith("signature does not verify"), whys
        assert whys["own-committed"].startswith("signature does not verify"), whys
        assert healerd.log().count("left alone") == 3, "told once each"
    finally:
        for cid in forged.values():
            api.remove_container(cid, force=True)
        api.remove_image(COMMITTED, force=True)


def test_an_upgrade_adopts_unsigned_containers_without_churn(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient
) -> None:
    """The containers of a healerd without signatures (labels as it wrote them, no
    signature label, names with the unsalted hash digits) are adopted once: the same
    ids keep running, nothing is created or removed. Their replacements are signed."""
    config.service("up.yaml", "up", 2, update_config=READY_NOW)
    healerd.start()
    wait_for("up converged", lambda: cluster.converged("up", 2), timeout=20)
    template = cluster.running("up")[0]["Labels"]
    healerd.stop()
    cluster.remove_labelled()
    shutil.rmtree(healerd.state_dir)  # that healerd had no key
    # What the old healerd left running.
    old_labels = {k: v for k, v in template.items() if k != LABEL_SIGNATURE}
    spec_hash = old_labels[LABEL_SPEC_HASH]
    old = []
    for n in range(2):
        cid = api.create_container(
            IMAGE, COMMAND, name=f"up-{spec_hash[:5]}-old{n}", labels=old_labels, stop_timeout=1
        )["Id"]
        api.start(cid)
        old.append(cid)
    # The engine reports creation in whole seconds, and the key must be born in a later
    # one: a clock alignment, not a wait for an outcome.
    time.sleep(1.05 - time.time() % 1)
    t0 = time.time()
    healerd.start()
    holds_for(
        "the two old containers adopted, nothing created or removed",
        lambda: running_ids(cluster, "up") == set(old) and len(cluster.containers("up")) == 2,
        4.0,
    )
    assert cluster.count_events("up", "create", t0) == 0
    # An adopted container is healed as healerd's own: a kill starts it again in place.
    started = api.inspect_container(old[0])["State"]["StartedAt"]
    t1 = time.time()
    api.kill(old[0])
    wait_for(
        "the adopted container started again in place",
        lambda: started_again(api, old[0], started),
        timeout=10,
    )
    assert cluster.count_events("up", "create", t1) == 0
    assert not signed(cluster, "up")
    # A replacement (of one removed) is signed, and its name shows the hash only salted
    # with the key.
    api.remove_container(old[0], force=True)
    wait_for("a signed replacement", lambda: signed(cluster, "up"), timeout=10)
    (new,) = signed(cluster, "up")
    assert new["Names"][0].split("-")[1] != spec_hash[:5]
    assert new["Labels"][LABEL_SPEC_HASH] == spec_hash, "the same spec: no rollout"
    assert old[1] in running_ids(cluster, "up")
    # Any local reader may describe a service: it shows the salted revision, not the hash.
    code, out, err = healerd.ctl("describe", "up", "-o", "json")
    assert code == 0, err
    spec = json.loads(out)["spec"]
    assert "spec_hash" not in spec and spec_hash not in out
    assert spec["revision"] == new["Names"][0].split("-")[1]


def test_labels_replayed_on_another_image_are_left_alone_and_a_moved_tag_is_not(
    healerd: Healerd, cluster: Cluster, config: ConfigDir, api: docker.APIClient
) -> None:
    """Issue 29, L17: the signature covers the image reference. Once healerd's container
    is gone, its name and labels (signature and all) on a container of another image
    are not a replica; the engine listing a container's image by ID because its tag
    moved to another image leaves the container healerd's."""
    api.tag(IMAGE, MOVING.split(":")[0], "1")
    other = variant(api, IMAGE, "ownership-other")
    config.write(
        "rep.yaml",
        "services:\n  rep:\n"
        f"    image: {MOVING}\n    command: {json.dumps(COMMAND)}\n    stop_grace_period: 2s\n"
        f"    update_config: {READY_NOW}\n",
    )
    forged = ""
    try:
        healerd.start()
        wait_for("rep converged", lambda: cluster.converged("rep", 1), timeout=20)
        (real,) = cluster.running("rep")
        assert real["Labels"][LABEL_IMAGE] == MOVING
        # The tag moves to another image: the engine now lists the image's ID.
        api.tag(other, MOVING.split(":")[0], "1")
        wait_for(
            "the list to show the image ID",
            lambda: cluster.running("rep")[0]["Image"].startswith("sha256:"),
            timeout=5,
        )
        healerd.ctl("reconcile", "rep")
        holds_for(
            "the container still healerd's: untouched, nothing made",
            lambda: running_ids(cluster, "rep") == {real["Id"]} and not unverified(healerd),
            3.0,
        )
        # healerd's container goes (removed by hand here, as a heal or rollout would).
        api.remove_container(real["Id"], force=True)
        wait_for("a replacement", lambda: len(running_ids(cluster, "rep")) == 1, timeout=10)
        (replacement,) = running_ids(cluster, "rep")
        # Its name and labels, replayed on a container of another image.
        name = real["Names"][0].lstrip("/")
        forged = api.create_container(
            other, COMMAND, name=name, labels=real["Labels"], stop_timeout=1
        )["Id"]
        api.start(forged)
        healerd.ctl("reconcile", "rep")
        wait_for("the replay reported", lambda: name in unverified(healerd), timeout=10)
        assert unverified(healerd)[name].startswith("its image is not the one it was signed")
        holds_for(
            "the replay no replica: the replacement stays, the replay is untouched",
            lambda: running_ids(cluster, "rep") == {replacement, forged},
            3.0,
        )
    finally:
        if forged:
            with contextlib.suppress(docker.errors.NotFound):  # removed by healerd: the bug
                api.remove_container(forged, force=True)
        healerd.stop()
        cluster.remove_labelled()
        for ref in (MOVING, "healerd-test/variant:ownership-other"):
            with contextlib.suppress(docker.errors.NotFound):
                api.remove_image(ref, force=True)


def unverified(healerd: Healerd) -> dict[str, str]:
    code, out, err = healerd.ctl("status", "-o", "json")
    assert code in (0, 1), err
    return {u["name"]: u["why"] for u in json.loads(out)["unverified"]}
