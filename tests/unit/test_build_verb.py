"""`healerctl build [SERVICE]` and POST /v1/build (issue 34): the config read again,
then the builds, each service's result; admin only."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import pytest

from healerd.cli import healerctl
from healerd.daemon.api.server import ApiOptions, ApiServer
from healerd.model import BuildSpec
from tests.unit.harness.api import FakeDaemon, call


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[FakeDaemon]:
    d = FakeDaemon(tmp_path / "healerd.sock")
    c = d.controller
    services = dict(c.desired.services)
    services["app"] = dataclasses.replace(
        services["web"], name="app", image="p-app", build=BuildSpec("/srv/app")
    )
    c.desired = dataclasses.replace(c.desired, services=MappingProxyType(services))
    server = ApiServer(d, ApiOptions(request_deadline=2.0))
    server.start()
    yield d
    server.stop()


def ctl(d: FakeDaemon, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = healerctl.main(["--socket", str(d.settings.socket_path), *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_build_reloads_then_builds_the_services_that_build(daemon: FakeDaemon) -> None:
    code, out, _ = ctl(daemon, "build")
    assert code == 0 and daemon.reload_requests == 1
    assert out.splitlines() == [
        "SERVICE   IMAGE   BUILD   RESULT",
        "app       p-app   ok      built p-app",
    ]
    assert ("build", ("app", False)) in daemon.controller.calls
    assert ("reconcile", "app") in daemon.controller.calls


def test_a_failed_build_exits_1_with_the_builders_lines(daemon: FakeDaemon) -> None:
    daemon.controller.build_fails["app"] = "returned a non-zero code: 2\nStep 2/3 : RUN make"
    code, out, _ = ctl(daemon, "build", "app", "--no-cache")
    assert code == 1
    assert "FAILED   cannot build p-app: returned a non-zero code: 2" in out
    assert "  app: Step 2/3 : RUN make" in out
    assert ("build", ("app", True)) in daemon.controller.calls
    # A pass at once all the same: the build showed "building" in the status.
    assert ("reconcile", "app") in daemon.controller.calls


def test_a_service_without_build_or_unknown_is_refused(daemon: FakeDaemon) -> None:
    path = daemon.settings.socket_path
    assert call(path, "POST", "/v1/build?service=web")[0] == 409
    assert call(path, "POST", "/v1/build?service=nope")[0] == 404
    assert call(path, "GET", "/v1/build")[0] == 405
    code, data = call(path, "POST", "/v1/build?service=app")
    assert code == 200 and data["ok"] is True and data["builds"][0]["service"] == "app"


@pytest.mark.parametrize("target", ["compose", "swarm", "kubernetes"])
def test_a_built_service_exports_with_its_tag(tmp_path: Path, target: str) -> None:
    """Compose keeps the build section; Swarm and Kubernetes need the image named where
    it is pushed (tests/unit/test_export_builds.py has the refusal)."""
    (tmp_path / "Dockerfile").write_text("FROM busybox\n")
    image = "" if target == "compose" else "    image: registry.example.net/shop-app:1\n"
    (tmp_path / "shop.yaml").write_text("services:\n  app:\n" + image + "    build: .\n")
    out, err = io.StringIO(), io.StringIO()
    code = healerctl.main(["export", "--to", target, str(tmp_path / "shop.yaml")], out, err)
    assert code == 0, err.getvalue()
    assert "shop-app" in out.getvalue()
