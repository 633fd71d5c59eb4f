"""Pulls from a real registry (Debian's docker-registry on 127.0.0.1), with and without
htpasswd basic auth, and the credentials in auth.json (issue 17, points 1 and 2).

Each image is pushed to the registry and its local tag removed, so that healerd has to
pull it. A wrong or missing password is ImagePullBackOff with the registry's reason;
nothing that runs is removed meanwhile; a fixed auth.json applies at `healerctl reload`.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from healerd.engine import ImagePullFailed
from healerd.engine.docker import DockerEngine
from healerd.model import RegistryAuth
from tests.support import engines
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir, service_file
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import holds_for, wait_for
from tests.support.registry import Registry, auth_json

USER = "edge"


@pytest.fixture(scope="module")
def password() -> str:
    return f"pw-{secrets.token_hex(8)}"


@pytest.fixture(scope="module")
def locked(password: str) -> Iterator[Registry]:
    """A registry with htpasswd basic auth (bcrypt)."""
    r = Registry(user=USER, password=password)
    r.start()
    yield r
    r.stop()


@pytest.fixture
def open_registry(registry: Registry) -> Registry:
    """A registry without auth (conftest's, one per test: a test may stop it)."""
    return registry


def write_auth(config: ConfigDir, text: str, mode: int = 0o600) -> Path:
    path = config.root / "auth.json"
    tmp = config.root / ".auth.json.tmp"
    tmp.write_text(text)
    os.chmod(tmp, mode)
    tmp.replace(path)
    return path


def status_of(healerd: Healerd, service: str) -> dict[str, Any]:
    code, out, err = healerd.ctl("status", service, "-o", "json")
    assert code in (0, 1), err
    rows: list[dict[str, Any]] = json.loads(out)["services"]
    return next(r for r in rows if r["name"] == service)


def ids(cluster: Cluster, service: str) -> list[str]:
    return sorted(c["Id"] for c in cluster.running(service))


@pytest.mark.every_engine
@pytest.mark.skipif(
    engines.engine_kind() == "podman",
    reason="dockerd's own default; the test Podman is told so in its registries.conf "
    "(tests/support/podman.py)",
)
def test_the_private_engine_treats_a_loopback_registry_as_insecure(
    api: docker.APIClient,
) -> None:
    # Why plain http to 127.0.0.1:PORT works without --insecure-registry.
    cidrs = api.info()["RegistryConfig"]["InsecureRegistryCIDRs"]
    assert "127.0.0.0/8" in cidrs


@pytest.mark.every_engine
def test_a_registry_without_auth_needs_no_auth_json(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    image: str,
    open_registry: Registry,
) -> None:
    ref = open_registry.push(api, image, "app", "open1")
    assert not api.images(name=ref.rsplit(":", 1)[0])  # only in the registry now
    config.write("open.yaml", service_file(pulled=ref))
    config.write("always.yaml", service_file("always", always=ref))
    healerd.start()
    wait_for(
        "the pulled services to run",
        lambda: cluster.converged("pulled", 1) and cluster.converged("always", 1),
        timeout=60,
    )
    assert not (config.root / "auth.json").exists()
    assert f"pulled {ref}" in healerd.ctl("events", "--service", "pulled")[1]
    # A tag the registry does not have: its own words.
    config.write("absent.yaml", service_file(absent=open_registry.ref("app", "nope")))
    assert healerd.ctl("reload")[0] == 0
    row = wait_for(
        "ImagePullBackOff for a missing tag",
        lambda: (r := status_of(healerd, "absent"))["state"] == "ImagePullBackOff" and r,
        timeout=30,
    )
    assert "manifest unknown" in row["reason"] or "not found" in row["reason"], row
    (config.conf_d / "absent.yaml").unlink()

    # A registry that is away never stops a new container from the local image (issue
    # 17, point 5): not with pull_policy missing, nor with always after a restart of
    # healerd (which pulls again for the spec, fails, and uses the image on disk). The
    # containers are removed while healerd is down, so that it makes them anew (one
    # removed under it may be replaced in the action that finds it gone, which pulls
    # nothing: a start in place needs no image, and its replacement takes the same one).
    open_registry.stop()
    healerd.stop()
    victims = {s: cluster.running(s)[0]["Id"] for s in ("pulled", "always")}
    for victim in victims.values():
        api.remove_container(victim, force=True)
    healerd.start()
    for service, victim in victims.items():
        wait_for(
            f"{service} made again with the registry away",
            lambda s=service, v=victim: cluster.converged(s, 1) and v not in ids(cluster, s),
            timeout=30,
        )
    assert "using the local image" in healerd.log()
    # And heals go on: in place (docker kill) and by a new container (docker rm -f).
    for service in victims:
        (c,) = cluster.running(service)
        started = api.inspect_container(c["Id"])["State"]["StartedAt"]
        api.kill(c["Id"])
        wait_for(
            f"{service} started again in place",
            lambda v=c["Id"], t=started: (
                (st := api.inspect_container(v)["State"])["Running"] and st["StartedAt"] != t
            ),
            timeout=10,
        )
        api.remove_container(c["Id"], force=True)
        wait_for(
            f"{service} replaced with the registry away",
            lambda s=service, v=c["Id"]: cluster.converged(s, 1) and v not in ids(cluster, s),
            timeout=30,
        )


def test_credentials_from_auth_json_wrong_missing_and_fixed_at_reload(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    image: str,
    locked: Registry,
    password: str,
) -> None:
    ref = locked.push(api, image, "app", f"auth-{secrets.token_hex(2)}")
    # Already running: one service in another file, one in the same file.
    config.write("steady.yaml", service_file(steady=image))
    config.write("app.yaml", service_file(sidecar=image))
    healerd.start()
    wait_for(
        "the local services",
        lambda: cluster.converged("steady", 1) and cluster.converged("sidecar", 1),
        timeout=30,
    )
    before = {s: ids(cluster, s) for s in ("steady", "sidecar")}

    def stays() -> None:
        holds_for(
            "the running services untouched",
            lambda: all(ids(cluster, s) == before[s] for s in before),
            1.0,
        )

    def backoff_reason(*words: str) -> str:
        def reason() -> str:
            row = status_of(healerd, "private")
            text = str(row["reason"])
            ok = row["state"] == "ImagePullBackOff" and any(w in text for w in words)
            return text if ok else ""

        return wait_for(f"ImagePullBackOff saying {words}", reason, timeout=30)

    # No auth.json: the registry's own refusal.
    config.write("app.yaml", service_file(sidecar=image, private=ref))
    assert healerd.ctl("reload")[0] == 0
    reason = backoff_reason("no basic auth credentials", "unauthorized")
    assert ref in reason
    stays()
    assert cluster.containers("private") == []

    # A wrong password: unauthorized, and the password is shown nowhere.
    wrong = f"wrong-{secrets.token_hex(6)}"
    write_auth(config, auth_json(locked.host, USER, wrong))
    assert healerd.ctl("reload")[0] == 0
    wrong_reason = backoff_reason("unauthorized", "authentication required")
    assert "no basic auth credentials" not in wrong_reason  # the credentials were sent
    stays()
    assert cluster.containers("private") == []
    table = healerd.ctl("status")[1]
    assert "ImagePullBackOff" in table

    # A world-readable file is refused, the previous credentials stay (still wrong), and
    # `healerctl reload` says so (issue 28: not "configuration reloaded", exit 1).
    write_auth(config, auth_json(locked.host, USER, password), mode=0o644)
    code, out, err = healerd.ctl("reload")
    assert code == 1 and "configuration reloaded" not in out + err, (code, out, err)
    assert "registry credentials not reloaded" in err and "auth.json" in err, err

    def refusal() -> str:
        table = healerd.ctl("status")[1]
        return table if "readable by" in table else ""

    refused = wait_for("the refusal in status", refusal, timeout=10)
    assert "auth.json" in refused and "chmod 600" in refused
    assert "ImagePullBackOff" in refused  # the same table (a retry keeps the state)

    # Fixed (root-only, the right password, username/password spelling): it runs.
    write_auth(config, auth_json(locked.host, USER, password, split=True))
    assert healerd.ctl("reload")[0] == 0
    wait_for("the private service to run", lambda: cluster.converged("private", 1), timeout=60)
    assert "readable by" not in healerd.ctl("status")[1]
    stays()

    outputs = [
        healerd.log(since_start=False),
        healerd.ctl("status", "-o", "json")[1],
        healerd.ctl("events")[1],
        healerd.ctl("describe", "private")[1],
    ]
    encoded = [base64.b64encode(f"{USER}:{p}".encode()).decode() for p in (password, wrong)]
    for secret in (password, wrong, *encoded):
        assert not any(secret in text for text in outputs), "a credential was shown"


def test_a_broken_auth_json_at_start_is_reported_and_pulls_go_anonymous(
    healerd: Healerd,
    config: ConfigDir,
    cluster: Cluster,
    api: docker.APIClient,
    image: str,
    locked: Registry,
    password: str,
) -> None:
    ref = locked.push(api, image, "app", f"broken-{secrets.token_hex(2)}")
    text = auth_json(locked.host, USER, password)
    write_auth(config, text[: len(text) // 2])  # cut short: malformed JSON
    config.write("app.yaml", service_file(private=ref))
    healerd.start()

    def error_logged() -> str:
        log = healerd.log()
        return log if "registry credentials not reloaded" in log else ""

    log = wait_for("the error in the log", error_logged, timeout=10)
    assert "auth.json: not valid JSON (line" in log
    wait_for(
        "ImagePullBackOff",
        lambda: status_of(healerd, "private")["state"] == "ImagePullBackOff",
        timeout=30,
    )
    write_auth(config, text)
    assert healerd.ctl("reload")[0] == 0
    wait_for("the private service to run", lambda: cluster.converged("private", 1), timeout=60)
    assert password not in healerd.log(since_start=False)


@pytest.mark.every_engine
def test_an_update_check_never_sends_the_sdks_own_docker_config(
    dockerd: PrivateDockerd,
    api: docker.APIClient,
    image: str,
    locked: Registry,
    password: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 29, L4: with nothing in auth.json for a registry, the update check gave the
    docker SDK no credentials (None), and the SDK sent those of $DOCKER_CONFIG (or
    ~/.docker/config.json) instead, which docs/user-guide.md says are never read: here the check
    got the digest with root's own login. Now it is anonymous, as a pull is."""
    ref = locked.push(api, image, "l4/app", "1")
    sdk_config = tmp_path / "docker-config"
    sdk_config.mkdir(mode=0o700)
    (sdk_config / "config.json").write_text(auth_json(locked.host, USER, password))
    monkeypatch.setenv("DOCKER_CONFIG", str(sdk_config))
    engine = DockerEngine(dockerd.url)
    with pytest.raises(ImagePullFailed) as refused:
        engine.registry_digest(ref, None)  # what Updates.check passes: no auth.json entry
    print(f"anonymous check: {refused.value}")
    with pytest.raises(ImagePullFailed):
        engine.pull(ref, None)
    # The credentials healerd was given (auth.json's) work, so the registry is fine.
    own = RegistryAuth(locked.host, username=USER, password=password)
    assert engine.registry_digest(ref, own).startswith("sha256:")
