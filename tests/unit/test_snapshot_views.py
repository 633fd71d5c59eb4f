"""GET /v1/snapshots and `healerctl snapshots` (issue 33): the snapshots kept in
state_dir, newest first, with sizes; open to every reader (no path, no data)."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from healerd.cli import healerctl
from healerd.daemon.api import server as api_module
from healerd.daemon.api.server import AdminPolicy, ApiOptions, ApiServer
from healerd.daemon.snapshots import SnapshotStore
from tests.unit.harness.api import FakeDaemon, call, connect_as, fake_peer_of

FROM, TO = "sha256:" + "a" * 64, "sha256:" + "b" * 64
NOBODY = 3000


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDaemon]:
    monkeypatch.setattr(api_module, "peer_of", fake_peer_of)
    d = FakeDaemon(tmp_path / "healerd.sock")
    d.settings = dataclasses.replace(d.settings, state_dir=tmp_path / "state")
    data = tmp_path / "vol" / "_data"
    data.mkdir(parents=True)
    (data / "f").write_bytes(b"x" * 10000)
    times = iter([1000.0, 2000.0, 3000.0])
    store = SnapshotStore.at(d.settings.state_dir)
    store = SnapshotStore(store.root, clock=lambda: next(times), sync=lambda _: None)
    for service in ("db", "db", "web"):
        store.take(service, {"app_pgdata": str(data)}, from_digest=FROM, to_digest=TO)
    server = ApiServer(d, ApiOptions(request_deadline=2.0))
    server.api.policy = AdminPolicy("admins", getgrnam=lambda n: None, getpwuid=lambda u: None)
    server.start()
    yield d
    server.stop()


def test_the_api_lists_them_newest_first_with_sizes(served: FakeDaemon) -> None:
    path = served.settings.socket_path
    code, data = call(path, "GET", "/v1/snapshots")
    assert code == 200
    assert [(s["service"], s["created"]) for s in data["snapshots"]] == [
        ("web", 3000.0),
        ("db", 2000.0),
        ("db", 1000.0),
    ]
    first = data["snapshots"][0]
    assert first["from_digest"] == FROM and first["to_digest"] == TO
    assert first["volumes"][0]["name"] == "app_pgdata" and first["bytes"] >= 10000
    assert "path" not in first and str(served.settings.state_dir) not in json.dumps(data)
    code, data = call(path, "GET", "/v1/snapshots?service=db")
    assert [s["created"] for s in data["snapshots"]] == [2000.0, 1000.0]
    assert call(path, "GET", "/v1/snapshots?service=nope")[1] == {"snapshots": []}
    assert call(path, "GET", "/v1/snapshots?service=..%2Fetc")[0] == 400
    assert call(path, "POST", "/v1/snapshots")[0] == 405


def test_every_reader_may_list_them(served: FakeDaemon) -> None:
    s = connect_as(served.settings.socket_path, NOBODY)
    try:
        s.sendall(b"GET /v1/snapshots HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    finally:
        s.close()
    assert answer.startswith(b"HTTP/1.0 200") or answer.startswith(b"HTTP/1.1 200")


def ctl(d: FakeDaemon, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = healerctl.main(["--socket", str(d.settings.socket_path), *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_healerctl_snapshots_table_and_json(served: FakeDaemon) -> None:
    code, out, _ = ctl(served, "snapshots")
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == [
        "SERVICE",
        "ID",
        "AGE",
        "SIZE",
        "VOLUMES",
        "UPDATE",
        "(FROM",
        "->",
        "TO)",
    ]
    assert [line.split()[0] for line in lines[1:]] == ["web", "db", "db"]
    assert "app_pgdata (" in lines[1] and "aaaaaaaaaaaa -> bbbbbbbbbbbb" in lines[1]
    code, out, _ = ctl(served, "snapshots", "db", "-o", "json")
    assert code == 0 and [s["service"] for s in json.loads(out)["snapshots"]] == ["db", "db"]
    code, out, _ = ctl(served, "snapshots", "none")
    assert (code, out) == (0, "No snapshots.\n")
