"""The local API with a fake daemon: routes, auth decisions, limits, metrics."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from healerd.daemon.api import server as api_module
from healerd.daemon.api.server import AdminPolicy, ApiOptions, ApiServer, Peer, parse_listen
from healerd.vocabulary import EventKind
from tests.unit.harness.api import (
    SECRET,
    FakeDaemon,
    call,
    raw,
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[FakeDaemon, ApiServer]]:
    d = FakeDaemon(tmp_path / "run" / "healerd.sock")
    server = ApiServer(d, ApiOptions(io_timeout=2.0, request_deadline=1.0, max_connections=8))
    server.start()
    yield d, server
    server.stop()


# -- routes -------------------------------------------------------------------------------


def test_status_lists_services_engine_host_and_config_errors(served: Any) -> None:
    _, srv = served
    code, data = call(srv.path, "GET", "/v1/status")
    assert code == 200
    by = {s["name"]: s for s in data["services"]}
    assert set(by) == {"db", "web"}
    web = by["web"]
    for key in ("name", "desired", "running", "available", "up_to_date", "state", "reason"):
        assert key in web
    assert web["state"] == "CrashLoopBackOff" and "keep stopping" in web["reason"]
    assert by["db"]["converged"] is True and web["converged"] is False
    assert data["engine"] == {
        "reachable": True,
        "version": "28.2.2",
        "api_version": "1.45",
        "kind": "docker",
    }
    assert data["host"]["memory"]["total_bytes"] > 0 and len(data["host"]["load"]) == 3
    assert data["host"]["memory"]["threshold_bytes"] == 100 * 2**20
    assert data["host"]["disk"]["path"] == "/" and data["host"]["inodes"]["free"] > 0
    assert data["host"]["pressure"] == {"memory": False, "disk": False, "inodes": False}
    assert data["healerd"]["rss_bytes"] > 0 and data["healerd"]["open_fds"] > 0
    assert data["healerd"]["engine_calls"] == 42
    assert data["healerd"]["engine_calls_per_second_limit"] == 50.0
    assert data["waiting_for_resources"] == {"web": "1 container(s) wait for resources"}
    assert data["config_errors"][0]["message"].startswith("/etc/healerd/conf.d/bad.yaml:3: ")
    assert SECRET not in json.dumps(data)


def test_status_filters_and_reports_missing(served: Any) -> None:
    _, srv = served
    code, data = call(srv.path, "GET", "/v1/status?service=db&service=nope")
    assert code == 200
    assert [s["name"] for s in data["services"]] == ["db"] and data["missing"] == ["nope"]


def test_a_paused_service_is_never_converged(served: Any) -> None:
    """Its state is the loop's (it writes Paused when the operator pauses: test_states);
    the API shows the flag and never calls it converged."""
    d, srv = served
    d.controller.paused.add("db")
    _, data = call(srv.path, "GET", "/v1/status?service=db")
    db = data["services"][0]
    assert db["paused"] is True and db["converged"] is False


def test_containers_and_engine_down(served: Any) -> None:
    d, srv = served
    code, data = call(srv.path, "GET", "/v1/containers?service=web")
    assert code == 200 and [c["name"] for c in data["containers"]] == ["web-abcde-11111"]
    c = data["containers"][0]
    for key in ("name", "id", "service", "status", "health", "restarts"):
        assert key in c
    d.controller.engine_down = True
    code, data = call(srv.path, "GET", "/v1/containers")
    assert code == 503 and "engine unreachable" in data["error"]


def test_diff_shows_targets_and_reasons_never_the_environment(served: Any) -> None:
    _, srv = served
    code, data = call(srv.path, "GET", "/v1/diff")
    assert code == 200
    assert data["actions"] == [
        {
            "kind": "create",
            "service": "web",
            "container": None,
            "container_id": None,
            "image": "img:1",
            "reason": "1/2 running",
        }
    ]
    assert call(srv.path, "GET", "/v1/diff?service=nope")[0] == 404


def test_events_since_and_long_poll(served: Any) -> None:
    d, srv = served
    log = d.controller.events
    log.record(EventKind.CREATED, "web", "1/2 running", "web-abcde-11111")
    log.record(EventKind.REMOVED, "db", "surplus")
    _, data = call(srv.path, "GET", "/v1/events")
    assert [e["kind"] for e in data["events"]] == ["created", "removed"]
    assert data["last_seq"] == 2
    _, data = call(srv.path, "GET", "/v1/events?service=db")
    assert [e["service"] for e in data["events"]] == ["db"]
    _, data = call(srv.path, "GET", f"/v1/events?since_time={time.time() + 60}")
    assert data["events"] == []

    threading.Timer(0.3, lambda: log.record(EventKind.BACKOFF, "web", "waiting")).start()
    t0 = time.monotonic()
    # The long poll outlives the 1 s request deadline: waiting is not a slow request.
    _, data = call(srv.path, "GET", "/v1/events?after=2&wait=5")
    assert [e["kind"] for e in data["events"]] == ["backoff"]
    assert time.monotonic() - t0 < 4
    t0 = time.monotonic()
    _, data = call(srv.path, "GET", "/v1/events?after=3&wait=1.5")
    assert data["events"] == [] and time.monotonic() - t0 >= 1.4


def test_root_may_change_things(served: Any) -> None:
    d, srv = served
    assert os.getuid() == 0, "the unit tests run as root"
    assert call(srv.path, "POST", "/v1/services/web/pause")[0] == 200
    assert call(srv.path, "POST", "/v1/services/web/resume")[0] == 200
    assert call(srv.path, "POST", "/v1/services/web/reconcile")[0] == 200
    assert call(srv.path, "POST", "/v1/reconcile")[0] == 202
    code, data = call(srv.path, "POST", "/v1/reload")
    assert code == 200 and data["applied"] is True and data["services"] == ["db", "web"]
    assert d.controller.calls == [
        ("pause", "web"),
        ("resume", "web"),
        ("reconcile", "web"),
        ("reconcile", None),
    ]
    assert d.reload_requests == 1
    assert call(srv.path, "POST", "/v1/services/nope/pause")[0] == 404


def test_refused_change_gets_403_and_changes_nothing(
    served: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, srv = served
    # The kernel says: nobody is calling.
    monkeypatch.setattr(api_module, "peer_of", lambda sock: Peer(1, 65534, 65534))
    srv.api.policy = AdminPolicy("healerd-admin", getgrnam=_no_group)
    for target in ("/v1/services/web/pause", "/v1/reconcile", "/v1/reload", "/v1/prune/volumes"):
        code, data = call(srv.path, "POST", target)
        assert code == 403, target
        assert "needs root or membership in group 'healerd-admin'" in data["error"]
    assert d.controller.calls == [] and d.reload_requests == 0 and d.controller.pruned == []
    assert call(srv.path, "GET", "/v1/status")[0] == 200


def test_update_checks_now_and_allows_a_downgrade_or_a_failed_digest_once(
    served: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29, L5: a tag moved back is held until an operator allows it."""
    d, srv = served
    code, data = call(srv.path, "POST", "/v1/services/web/update?allow_downgrade=1")
    assert code == 202 and "a downgrade allowed once" in data["message"]
    assert call(srv.path, "POST", "/v1/services/web/update?retry_failed=true")[0] == 202
    assert call(srv.path, "POST", "/v1/services/web/update")[0] == 202
    assert d.images.updates == [("web", True, False), ("web", False, True), ("web", False, False)]
    assert call(srv.path, "POST", "/v1/services/db/update")[0] == 409  # follows no tag
    assert call(srv.path, "POST", "/v1/services/nope/update")[0] == 404
    assert call(srv.path, "POST", "/v1/services/web/update?force=1")[0] == 400
    assert call(srv.path, "GET", "/v1/services/web/update")[0] == 405
    assert call(srv.path, "POST", "/v1/services/web/reconcile?allow_downgrade=1")[0] == 400
    monkeypatch.setattr(api_module, "peer_of", lambda sock: Peer(1, 65534, 65534))
    srv.api.policy = AdminPolicy("healerd-admin", getgrnam=_no_group)
    code, data = call(srv.path, "POST", "/v1/services/web/update?allow_downgrade=1")
    assert code == 403 and "update needs root" in data["error"]
    assert len(d.images.updates) == 3


# -- malformed, oversized, slow ---------------------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "code"),
    [
        (b"GET /nope HTTP/1.0\r\n\r\n", 404),
        (b"DELETE /v1/status HTTP/1.0\r\n\r\n", 405),
        (b"BREW /v1/status HTTP/1.0\r\n\r\n", 405),
        (b"POST /v1/status HTTP/1.0\r\n\r\n", 405),
        (b"GET /v1/status?bogus=1 HTTP/1.0\r\n\r\n", 400),
        (b"GET /v1/status?service=../../etc HTTP/1.0\r\n\r\n", 400),
        (b"GET /v1/events?wait=1e9 HTTP/1.0\r\n\r\n", 400),
        (b"GET /v1/events?after=x HTTP/1.0\r\n\r\n", 400),
        (b"GET /v1/status HTTP/2.0\r\n\r\n", 400),
        (b"garbage\r\n\r\n", 400),
        (b"GET /v1/status HTTP/1.0\r\nContent-Length: 99999999\r\n\r\n", 413),
        (b"GET /v1/status HTTP/1.0\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST /v1/reload HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
        (b"POST /v1/reload HTTP/1.0\r\nContent-Length: 5\r\n\r\n{oops", 400),
        (b"POST /v1/reload HTTP/1.0\r\nContent-Length: 2\r\n\r\n[]", 400),
        (b"POST /v1/reload HTTP/1.0\r\nContent-Length: 9\r\n\r\nabc", 400),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.0\r\n\r\n", 414),
        (b"GET /v1/status HTTP/1.0\r\n" + b"X: y\r\n" * 150 + b"\r\n", 431),
        # Lines each within the stdlib's limits, over 64 KiB together.
        (b"GET /v1/status HTTP/1.0\r\n" + (b"X: " + b"y" * 30000 + b"\r\n") * 3 + b"\r\n", 431),
    ],
)
def test_malformed_requests_get_a_4xx(served: Any, request_bytes: bytes, code: int) -> None:
    d, srv = served
    resp = raw(srv.path, request_bytes)
    assert resp.startswith(b"HTTP/1.0 "), resp[:100]
    assert int(resp.split(b" ", 2)[1]) == code, resp[:300]
    assert d.reload_requests == 0


def test_slow_client_is_cut_off_and_others_are_served(served: Any) -> None:
    _, srv = served
    slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    slow.connect(str(srv.path))
    slow.sendall(b"GET /v1/status HTTP/1.0\r\nX-Slow: ")
    t0 = time.monotonic()
    assert call(srv.path, "GET", "/v1/version")[0] == 200
    slow.settimeout(5)
    assert slow.recv(100) == b""  # closed by the deadline reaper
    assert 0.8 < time.monotonic() - t0 < 3
    slow.close()


def test_connection_flood_is_bounded_and_recovers(served: Any) -> None:
    _, srv = served
    held = []
    for _ in range(20):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(srv.path))
        held.append(s)
    time.sleep(0.2)
    for s in held:
        s.close()
    deadline = time.monotonic() + 5
    while True:
        try:
            if call(srv.path, "GET", "/v1/version")[0] == 200:
                break
        except (OSError, IndexError, ValueError):
            pass
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_handler_bug_is_a_500_not_a_crash(served: Any) -> None:
    d, srv = served
    d.controller.statuses = lambda: 1 / 0
    code, data = call(srv.path, "GET", "/v1/status")
    assert code == 500 and "internal error" in data["error"]
    assert call(srv.path, "GET", "/v1/version")[0] == 200


# -- socket file ----------------------------------------------------------------------------


def test_socket_mode_and_cleanup(tmp_path: Path) -> None:
    d = FakeDaemon(tmp_path / "healerd.sock")
    server = ApiServer(d)
    server.start()
    st = os.lstat(server.path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
    # A second daemon on the same socket must not steal it.
    with pytest.raises(OSError, match="in use"):
        ApiServer(FakeDaemon(tmp_path / "healerd.sock")).start()
    server.stop()
    assert not server.path.exists()


def test_stale_socket_is_replaced_and_a_regular_file_is_not(tmp_path: Path) -> None:
    path = tmp_path / "healerd.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    server = ApiServer(FakeDaemon(path))
    server.start()
    assert call(path, "GET", "/v1/version")[0] == 200
    server.stop()
    path.write_text("not a socket")
    with pytest.raises(OSError, match="not a socket"):
        ApiServer(FakeDaemon(path)).start()
    assert path.read_text() == "not a socket"


# -- auth decisions ---------------------------------------------------------------------------


def _no_group(name: str) -> Any:
    raise KeyError(name)


def _group(name: str) -> Any:
    return SimpleNamespace(gr_name=name, gr_gid=990, gr_mem=["alice"])


def _user(uid: int) -> Any:
    names = {0: "root", 1000: "alice", 1001: "bob", 65534: "nobody"}
    if uid not in names:
        raise KeyError(uid)
    return SimpleNamespace(pw_name=names[uid])


@pytest.mark.parametrize(
    ("peer", "group_lookup", "allowed"),
    [
        (Peer(1, 0, 0), _no_group, True),  # root, always
        (Peer(1, 1000, 1000), _group, True),  # listed in /etc/group
        (Peer(1, 1001, 990), _group, True),  # primary group
        (Peer(1, 1001, 1001, (5, 990)), _group, True),  # the process's supplementary groups
        (Peer(1, 1001, 1001), _group, False),
        (Peer(1, 65534, 65534), _group, False),
        (Peer(1, 1000, 1000), _no_group, False),  # the group does not exist: root only
        (Peer(1, 4242, 4242), _group, False),  # a uid without a name
    ],
)
def test_admin_policy(peer: Peer, group_lookup: Any, allowed: bool) -> None:
    d = AdminPolicy("healerd-admin", getgrnam=group_lookup, getpwuid=_user).decide(peer, "pause")
    assert d.allowed is allowed
    if not allowed:
        assert d.reason.startswith("pause needs root")


def test_admin_policy_without_group_or_peer() -> None:
    assert not AdminPolicy(None).decide(Peer(1, 1000, 1000), "reload").allowed
    assert AdminPolicy(None).decide(Peer(1, 0, 0), "reload").allowed
    assert not AdminPolicy("x").decide(None, "reload").allowed


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen(":9464") == ("0.0.0.0", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    for bad in ("9464", "host:", "host:0", "host:70000", "host:x"):
        with pytest.raises(ValueError):
            parse_listen(bad)


# -- metrics ----------------------------------------------------------------------------------


def test_metrics_from_state_and_hooks(served: Any) -> None:
    d, srv = served
    (hooks,) = d.controller.hooks
    hooks.on_action("create", "web", True)
    hooks.on_action("remove", "web", False)
    hooks.on_pass("web", 0.02)
    hooks.on_heal("web", 0.3, "in-place")
    hooks.on_heal("web", 0.4, "replaced")
    hooks.on_heal("web", 0.2, "in-place")
    d.controller.events.record(EventKind.BACKOFF, "web", "waiting")
    code, text = call(srv.path, "GET", "/metrics")
    assert code == 200
    lines = set(text.splitlines())
    for line in (
        'healerd_service_desired_replicas{service="web"} 2.0',
        'healerd_service_running_replicas{service="web"} 1.0',
        'healerd_service_available_replicas{service="web"} 1.0',
        'healerd_service_in_backoff{service="web"} 1.0',
        'healerd_service_converged{service="db"} 1.0',
        'healerd_actions_total{kind="create",result="ok"} 1.0',
        'healerd_actions_total{kind="remove",result="error"} 1.0',
        'healerd_reconcile_duration_seconds_count{service="web"} 1.0',
        'healerd_heal_latency_seconds_bucket{le="0.5",service="web"} 3.0',
        'healerd_heals_total{how="in-place",service="web"} 2.0',
        'healerd_heals_total{how="replaced",service="web"} 1.0',
        'healerd_events_total{kind="backoff"} 1.0',
        "healerd_engine_up 1.0",
        'healerd_engine_info{version="28.2.2"} 1.0',
        "healerd_config_errors 1.0",
        "healerd_reconcile_passes_total 3.0",
    ):
        assert line in lines, line
    # The host line and healerd's own footprint.
    for line in (
        'healerd_host_pressure{resource="memory"} 0.0',
        'healerd_host_pressure{resource="disk"} 0.0',
        "healerd_host_memory_available_threshold_bytes 1.048576e+08",
        'healerd_service_waiting_for_resources{service="web"} 1.0',
        "healerd_engine_calls_total 42.0",
        "healerd_engine_calls_per_second_limit 50.0",
    ):
        assert line in lines, line
    for prefix in (
        "healerd_host_memory_available_bytes ",
        'healerd_host_disk_free_bytes{path="/"} ',
        'healerd_host_inodes_free{path="/"} ',
        'healerd_host_load{period="1m"} ',
        "healerd_self_resident_memory_bytes ",
        "healerd_self_cpu_seconds_total ",
        "healerd_self_open_fds ",
    ):
        assert any(line.startswith(prefix) for line in lines), prefix
    # Event counts continue from the last scrape instead of restarting.
    _, text = call(srv.path, "GET", "/metrics")
    assert 'healerd_events_total{kind="backoff"} 1.0' in text.splitlines()


def test_metrics_on_a_tcp_address(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ApiServer(
        FakeDaemon(tmp_path / "healerd.sock"), ApiOptions(metrics_listen=f"127.0.0.1:{port}")
    )
    server.start()
    try:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200 and b"healerd_engine_up" in resp.read()
        conn.close()
        for method, target, code in (("GET", "/v1/status", 404), ("POST", "/metrics", 405)):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request(method, target)
            assert conn.getresponse().status == code
            conn.close()
    finally:
        server.stop()


def test_an_idle_server_sleeps_and_still_cuts_off_a_slow_client_on_time(tmp_path: Path) -> None:
    # The reaper sleeps half a deadline when nothing runs, so a request that arrives
    # meanwhile is still cut off at its own deadline, not one sleep later.
    d = FakeDaemon(tmp_path / "run" / "healerd.sock")
    server = ApiServer(d, ApiOptions(request_deadline=3.0))
    server.start()
    try:
        assert server._reap_in() == 1.5  # idle: no wake several times a second
        time.sleep(0.2)  # the reaper is asleep now
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        slow.connect(str(server.path))
        slow.sendall(b"GET /v1/status HTTP/1.0\r\nX-Slow: ")
        t0 = time.monotonic()
        slow.settimeout(10)
        assert slow.recv(100) == b""
        assert 2.7 < time.monotonic() - t0 < 3.5
        slow.close()
    finally:
        t0 = time.monotonic()
        server.stop()
        stopped = time.monotonic() - t0
    assert stopped < 1.0, f"stop waited out the accept loop's poll: {stopped:.2f}s"
    idle = ApiServer(FakeDaemon(tmp_path / "b.sock"))
    assert idle._reap_in() == 5.0
