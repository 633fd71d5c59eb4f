"""`healerctl sync [SOURCE]` and POST /v1/sync, and the sources in `healerctl status`."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.cli import healerctl
from healerd.cli.views import sources_lines
from healerd.daemon.api.access import AdminPolicy, Peer
from healerd.daemon.api.routes import Api, ApiError, Request
from healerd.daemon.api.server import ApiOptions, ApiServer
from tests.unit.harness.api import FakeDaemon


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[FakeDaemon]:
    d = FakeDaemon(tmp_path / "healerd.sock")
    server = ApiServer(d, ApiOptions(request_deadline=2.0))
    server.start()
    yield d
    server.stop()


def ctl(d: FakeDaemon, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = healerctl.main(["--socket", str(d.settings.socket_path), *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_sync_fetches_every_source_or_one(daemon: FakeDaemon) -> None:
    assert ctl(daemon, "sync") == (0, f"site-7: {'a' * 12}\n", "")
    code, out, _ = ctl(daemon, "sync", "site-7", "-o", "json")
    assert code == 0 and json.loads(out)["sources"][0]["name"] == "site-7"
    assert daemon.sources.synced == [None, "site-7"]


def test_sync_says_why_and_exits_1(daemon: FakeDaemon) -> None:
    daemon.sources.error = "commit bbbbbbbbbbbb refused: not signed by an allowed key"
    code, out, _ = ctl(daemon, "sync")
    assert code == 1 and out == f"site-7: {daemon.sources.error}\n"
    daemon.sources.error, daemon.sources.done = "", False
    code, out, _ = ctl(daemon, "sync")
    assert code == 1 and "still under way" in out


def test_sync_of_an_unknown_source_is_a_404(daemon: FakeDaemon) -> None:
    code, _, err = ctl(daemon, "sync", "nope")
    assert code == healerctl.EXIT_API and "no such source: nope (HTTP 404)" in err
    daemon.sources.names = []
    code, _, err = ctl(daemon, "sync")
    assert code == healerctl.EXIT_API and "no git sources are configured" in err


def test_sync_is_a_change_for_the_admins_only(tmp_path: Path) -> None:
    api = Api(FakeDaemon(tmp_path / "s.sock"), AdminPolicy(None))
    reader = Peer(os.getpid(), 65534, 65534)
    with pytest.raises(ApiError) as info:
        api.handle(Request("POST", "/v1/sync", {}, {}, reader))
    assert info.value.code == 403
    with pytest.raises(ApiError) as info:
        api.handle(Request("GET", "/v1/sync", {}, {}, Peer(os.getpid(), 0, 0)))
    assert info.value.code == 405


def test_status_shows_each_source(daemon: FakeDaemon) -> None:
    code, out, _ = ctl(daemon, "status")
    assert code == 0
    assert f"source site-7 (main): at {'a' * 12}, committed 60m ago, fetched 10s ago" in out
    _, out, _ = ctl(daemon, "status", "-o", "json")
    assert json.loads(out)["sources"][0]["applied_commit"] == "a" * 40


def test_sources_lines() -> None:
    source = {
        "name": "fleet",
        "ref": "stable",
        "commit": "c" * 40,
        "commit_age_seconds": 30.0,
        "fetched_age_seconds": None,
        "applied_commit": "b" * 40,
        "candidate_commit": "c" * 40,
        "last_error": "fetch of stable failed: fatal: unable to access",
    }
    (line,) = sources_lines({"sources": [source]})
    assert line == (
        f"source fleet (stable): applied {'b' * 12}, tip {'c' * 12} committed 30s ago, "
        f"not fetched; {'c' * 12} to be loaded; last error: fetch of stable failed: fatal: "
        "unable to access"
    )
    assert sources_lines({}) == []
