"""Values that came from `${VAR}` (security review 2026-12-01, M3 and L1): the container
gets them, and no reader-visible output shows them: every route of the local API as a
reader (uid 65534) sees it, and as root, through the real Daemon on a FakeEngine."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from healerd.core.clock import FakeClock
from healerd.daemon.api.access import AdminPolicy, Peer
from healerd.daemon.api.logs import Streamed
from healerd.daemon.api.routes import Api, ApiError, Request
from healerd.daemon.main import Daemon
from healerd.engine import EngineError
from healerd.model import ServiceSpec
from tests.unit.harness.daemon import settings_for
from tests.unit.harness.fake_engine import LOOP_CALLS, FakeEngine

PASSWORD = "hunter2-from-dot-env"
TAG = "7-tagsekrit"
APP = """\
services:
  cache:
    image: redis:${REDIS_TAG}
    entrypoint: ["docker-entrypoint.sh", "--pw=${REDIS_PASSWORD}"]
    command: redis-server --requirepass ${REDIS_PASSWORD}
    healthcheck: {test: ["CMD-SHELL", "redis-cli -a ${REDIS_PASSWORD} ping"], interval: 5s}
    environment: ["REDIS_PASSWORD=${REDIS_PASSWORD}", "MODE=x${REDIS_TAG}"]
    volumes: ["/srv/${REDIS_PASSWORD}:/data"]
"""
# A broken file whose errors would quote the values.
BAD = """\
services:
  bad:
    image: ${REDIS_TAG}X
    cpus: ${REDIS_PASSWORD}
    mem_limit: ${REDIS_PASSWORD}
    ports: ["${REDIS_PASSWORD}:80"]
"""
READER = Peer(os.getpid(), 65534, 65534)
ROOT = Peer(os.getpid(), 0, 0)
READS = (
    "/v1/status",
    "/v1/containers",
    "/v1/events",
    "/v1/diff",
    "/v1/version",
    "/v1/services/cache/describe",
    "/v1/services/cache/logs",
    "/v1/services/cache/logs?previous=1",
    "/metrics",
)


def _private(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o600)


@pytest.fixture
def daemon(tmp_path: Path) -> tuple[Daemon, FakeEngine]:
    engine = FakeEngine(allow=LOOP_CALLS | {"identity", "logs", "death"})
    d = Daemon(settings_for(tmp_path), engine, FakeClock())
    conf = tmp_path / "conf.d"
    (conf / "app.yaml").write_text(APP)
    (conf / "bad.yaml").write_text(BAD)
    for name in ("app", "bad"):
        _private(conf / f"{name}.env", f"REDIS_PASSWORD={PASSWORD}\nREDIS_TAG={TAG}\n")
    d.reload()
    return d, engine


def _echoing_create(spec: ServiceSpec, *args: object, **kwargs: object) -> str:
    """What dockerd says when an entrypoint cannot run: the command, as given."""
    argv = " ".join((*(spec.entrypoint or ()), *(spec.command or ())))
    raise EngineError(f'OCI runtime create failed: exec: "{argv}" in {spec.image}: not found')


def _ask(api: Api, target: str, peer: Peer) -> tuple[int, str]:
    path, _, query = target.partition("?")
    params = dict(p.split("=", 1) for p in query.split("&") if p)
    req = Request("GET", path, {k: [v] for k, v in params.items()}, {}, peer)
    try:
        code, payload = api.handle(req)
    except ApiError as exc:
        return exc.code, exc.message
    if isinstance(payload, bytes | str):
        return code, payload.decode() if isinstance(payload, bytes) else payload
    if isinstance(payload, Streamed):  # logs: the headers and the body, all of it
        try:
            body = b"".join(payload.chunks).decode("utf-8", "replace")
        finally:
            payload.close()
        return code, json.dumps(payload.headers) + body
    return code, json.dumps(payload)


def _outputs(d: Daemon, targets: Sequence[str] = READS) -> dict[str, str]:
    api = Api(d, AdminPolicy(None), d.metrics)
    out = {}
    for peer in (READER, ROOT):
        for target in targets:
            code, text = _ask(api, target, peer)
            # Logs are not for every reader (issue 29, L14): a refusal shows nothing either.
            refused = code == 403 and peer is READER and "/logs" in target
            assert code in (200, 503) or refused, (target, code, text)
            out[f"{peer.uid} {target}"] = text
    return out


def test_the_container_gets_the_values_and_no_reader_view_shows_them(
    daemon: tuple[Daemon, FakeEngine],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    d, engine = daemon
    spec = d.controller.desired.services["cache"]
    assert spec.command == ("redis-server", "--requirepass", PASSWORD)
    assert spec.healthcheck is not None
    assert spec.healthcheck.test == ("CMD-SHELL", f"redis-cli -a {PASSWORD} ping")
    assert spec.image == f"redis:{TAG}" and ("REDIS_PASSWORD", PASSWORD) in spec.environment
    # A first create fails and the engine's message names the command and image; the
    # next one runs.
    with monkeypatch.context() as m:
        m.setattr(engine, "create_and_start", _echoing_create)
        d.controller.enqueue_all(force=True)
        d.controller.process_once()
    d.controller.reconcile_now("cache")
    d.controller.process_once()
    assert any(c.image == f"redis:{TAG}" for c in engine.containers.values())
    outputs = _outputs(d)
    leaks = [where for where, text in outputs.items() if PASSWORD in text or TAG in text]
    assert leaks == []
    # Shown as written, where it was written.
    _, text = _ask(Api(d, AdminPolicy(None)), "/v1/services/cache/describe", READER)
    shown = json.loads(text)["spec"]
    assert shown["command"] == ["redis-server", "--requirepass", "${REDIS_PASSWORD}"]
    assert shown["entrypoint"] == ["docker-entrypoint.sh", "--pw=${REDIS_PASSWORD}"]
    assert shown["healthcheck"] == ["CMD-SHELL", "redis-cli -a ${REDIS_PASSWORD} ping"]
    assert shown["image"] == "redis:${REDIS_TAG}"
    assert shown["volumes"] == ["/srv/${REDIS_PASSWORD}:/data"]
    status = json.loads(outputs["65534 /v1/status"])
    failed = [e["message"] for e in json.loads(outputs["65534 /v1/events"])["events"]]
    assert any('exec: "docker-entrypoint.sh --pw=${REDIS_PASSWORD}' in m for m in failed)
    assert status["services"]
    # Nor the journal: the failed create's line masks the engine's words as views do.
    logged = [r.getMessage() for r in caplog.records if "create failed" in r.getMessage()]
    assert logged and not [m for m in logged if PASSWORD in m or TAG in m], logged


def test_config_errors_name_the_variable_never_its_value(
    daemon: tuple[Daemon, FakeEngine],
) -> None:
    d, _ = daemon
    errors = [str(e) for e in d.controller.desired.errors]
    assert errors and not [e for e in errors if PASSWORD in e or TAG in e]
    text = "\n".join(errors)
    assert "services.bad.cpus: must be a number of CPUs" in text
    assert "not the value of ${REDIS_PASSWORD} (not shown)" in text
    assert (
        "services.bad.mem_limit: the value of ${REDIS_PASSWORD} (not shown) is not a size" in text
    )
    assert "host port the value of ${REDIS_PASSWORD} (not shown) must be" in text
    status = json.loads(_outputs(d, ("/v1/status",))["65534 /v1/status"])
    assert status["config_errors"] and PASSWORD not in json.dumps(status)


def test_a_number_from_a_variable_is_masked_in_its_own_error_only(tmp_path: Path) -> None:
    from healerd.config import parse_service_text

    text = "services:\n  a:\n    image: x\n    cpus: ${N}\n    replicas: ${R}\n"
    result = parse_service_text(text, "a.yaml", env={"N": "123456789", "R": "2"})
    [error] = [str(e) for e in result.errors]
    assert "123456789" not in error and "${N}" in error, error
    ok = parse_service_text(text, "a.yaml", env={"N": "0.5", "R": "2"}).services
    assert ok is not None and ok["a"].replicas == 2 and ok["a"].substitutions == ()
