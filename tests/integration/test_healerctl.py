"""healerctl against a running healerd and a real (private) dockerd."""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml

from healerd.cli.client import Client
from tests.integration.harness import started_again, unique
from tests.support import engines
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir, trusted_copy
from tests.support.healerd_process import REPO, Healerd
from tests.support.polling import holds_for, wait_for

SECRET = "tok-5ecr3t-do-not-print"
NOBODY = 65534
# Run healerctl as `nobody` although the interpreter lives under /root (0700): start it
# as root, import everything, then drop to nobody before the first request.
AS_NOBODY = (
    "import os, sys\n"
    "import healerd.cli.healerctl as h\n"
    # Python's own files may sit under /root (0700): load what argparse and the client
    # import lazily while still root, then drop to nobody.
    "import shutil, gettext, textwrap, json, http.client, encodings.idna\n"
    "h.build_parser()\n"
    f"os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})\n"
    "assert os.getuid() == os.geteuid() == " + str(NOBODY) + "\n"
    "sys.exit(h.main(sys.argv[1:]))\n"
)


@pytest.fixture
def sock() -> Iterator[Path]:
    """A socket path in a directory anyone may traverse (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="healerd-api-"))
    d.chmod(0o755)
    yield d / "healerd.sock"
    shutil.rmtree(d, ignore_errors=True)


def ctl(sock: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "healerd.cli.healerctl", "--socket", str(sock), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )


def ctl_as_nobody(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", AS_NOBODY, "--socket", str(sock), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        cwd="/",
    )


def ok(p: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert p.returncode == code, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout


def start(healerd: Healerd, sock: Path, *extra: str) -> None:
    healerd.start("--socket", str(sock), *extra)
    wait_for("the API socket", sock.exists, timeout=10)


def running_ids(cluster: Cluster, service: str) -> set[str]:
    return {c["Id"] for c in cluster.running(service)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_every_verb_in_table_and_json(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient, sock: Path
) -> None:
    svc = unique("web")
    config.service("web.yaml", svc, 2, environment=json.dumps({"API_TOKEN": SECRET}))
    port = free_port()
    start(healerd, sock, "--metrics-listen", f"127.0.0.1:{port}")
    outputs: list[str] = []

    def run(*args: str, code: int = 0) -> str:
        p = ctl(sock, *args)
        outputs.append(p.stdout + p.stderr)
        return ok(p, code)

    assert run("wait", svc, "--timeout", "30s").strip() == f"converged: {svc}"

    # status
    table = run("status").splitlines()
    assert table[0].split() == [
        "SERVICE", "DESIRED", "READY", "UP-TO-DATE", "AVAILABLE", "RESTARTS", "STATE", "AGE",
        "REASON",
    ]  # fmt: skip
    row = next(line.split() for line in table if line.startswith(svc + " "))
    assert row[:7] == [svc, "2", "2", "2", "2", "0", "Converged"]
    assert table[-2].startswith(f"engine: reachable, {engines.engine_kind()} ")
    assert "; host: memory " in table[-2] and " load " in table[-2]
    assert table[-2].endswith(", pressure: none") and " inodes " in table[-2]
    assert table[-1].startswith("healerd: rss ") and " fds; engine calls " in table[-1]
    data = json.loads(run("status", "-o", "json"))
    (s,) = [s for s in data["services"] if s["name"] == svc]
    for key in ("name", "desired", "running", "available", "up_to_date", "state", "reason"):
        assert key in s, key
    assert (s["desired"], s["running"], s["available"], s["up_to_date"]) == (2, 2, 2, 2)
    assert s["state"] == "Converged" and s["reason"] == ""
    assert data["engine"]["reachable"] is True and data["engine"]["version"]
    assert yaml.safe_load(run("status", svc, "-o", "yaml"))["services"][0]["name"] == svc
    run("status", "--check")

    # get
    table = run("get", svc).splitlines()
    assert table[0].split() == ["NAME", "SERVICE", "STATUS", "HEALTH", "RESTARTS", "AGE", "IMAGE"]
    assert len(table) == 3 and all(line.split()[1:3] == [svc, "Running"] for line in table[1:])
    containers = json.loads(run("get", "-o", "json"))["containers"]
    mine = [c for c in containers if c["service"] == svc]
    assert {c["id"] for c in mine} == running_ids(cluster, svc)
    for c in mine:
        for key in ("name", "id", "service", "status", "health", "restarts"):
            assert key in c, key
        assert c["status"].startswith("Up") and c["restarts"] == 0

    # diff: nothing to do, then something (while paused nothing is healed)
    assert run("diff").strip() == "No changes: what runs is what is declared."
    assert json.loads(run("diff", svc, "-o", "json")) == {"actions": []}

    # pause: a paused service is left alone and shown as Paused
    assert run("pause", svc).strip() == f"{svc} is now paused"
    victim = sorted(running_ids(cluster, svc))[0]
    api.remove_container(victim, force=True)
    holds_for("a paused service is left alone", lambda: len(cluster.running(svc)) == 1, 1.5)
    wait_for("Paused in status", lambda: "Paused" in run("status", svc))
    run("status", svc, "--check", code=1)
    paused = json.loads(run("status", svc, "-o", "json"))["services"][0]
    assert paused["state"] == "Paused" and paused["paused"] is True
    assert run("resume", svc).strip() == f"{svc} resumed"
    run("wait", svc, "--timeout", "20s")
    assert len(cluster.running(svc)) == 2

    # diff with a pending action: pause, break, diff, resume
    run("pause", svc)
    api.remove_container(sorted(running_ids(cluster, svc))[0], force=True)
    wait_for("the removal", lambda: len(cluster.running(svc)) == 1)
    run("resume", svc)
    # (the resume queues a pass at once, so the diff may already be empty again)
    d = ctl(sock, "diff", svc, "-o", "json")
    assert d.returncode in (0, 1) and "actions" in json.loads(d.stdout)
    run("wait", svc, "--timeout", "20s")

    # events, newest last
    table = run("events").splitlines()
    assert table[0].split() == ["TIME", "KIND", "SERVICE", "CONTAINER", "MESSAGE"]
    kinds = [line.split()[1] for line in table[1:]]
    assert "created" in kinds and "paused" in kinds and "resumed" in kinds
    assert kinds.index("paused") < len(kinds) - 1 - kinds[::-1].index("created")
    events = json.loads(run("events", "-o", "json", "--since", "5m", "--service", svc))["events"]
    assert {e["service"] for e in events} == {svc}
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)

    # events --follow prints what happens next. It has read what happened before once it
    # has printed the latest event so far (its `--since` covers this test): only then the
    # pause, which it can then learn of only by following (a pause made before its first
    # read, on a slow start, would be missed with `--since 0s`, and readline hang).
    latest = json.loads(run("events", "-o", "json"))["last_seq"]
    follow = subprocess.Popen(
        [sys.executable, "-m", "healerd.cli.healerctl", "--socket", str(sock), "events",
         "--follow", "-o", "json", "--since", "1h"],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    watchdog = threading.Timer(60, follow.kill)  # readline gets EOF instead of hanging
    watchdog.start()
    try:
        assert follow.stdout is not None
        while (line := follow.stdout.readline()) and json.loads(line)["seq"] < latest:
            pass
        assert line, "events --follow ended before the latest event"
        run("pause", svc)
        line = follow.stdout.readline()
        assert line and json.loads(line)["kind"] == "paused", line
    finally:
        watchdog.cancel()
        follow.terminate()
        follow.wait(timeout=10)
    run("resume", svc)

    # reconcile, reload, validate
    assert run("reconcile", svc).strip() == f"reconcile of {svc} queued"
    assert run("reconcile").strip() == "reconcile of every service queued"
    assert run("reload").startswith("configuration reloaded: ")
    assert json.loads(run("reload", "-o", "json"))["applied"] is True
    assert run("validate", str(config.root)).startswith("ok: 1 service(s)")
    run("pause", "no-such-svc", code=5)

    # metrics, on the socket and on the TCP address, after a heal
    killed = sorted(running_ids(cluster, svc))[0]
    started = api.inspect_container(killed)["State"]["StartedAt"]
    api.kill(killed)
    wait_for(
        "the heal in place",
        lambda: started_again(api, killed, started) and running_ids(cluster, svc) >= {killed},
        timeout=10,
    )
    run("wait", svc, "--timeout", "20s")
    text = Client(str(sock)).request("GET", "/metrics", raw=True).decode()
    for line in (
        f'healerd_service_desired_replicas{{service="{svc}"}} 2.0',
        f'healerd_service_running_replicas{{service="{svc}"}} 2.0',
        f'healerd_service_available_replicas{{service="{svc}"}} 2.0',
        "healerd_engine_up 1.0",
        "healerd_config_errors 0.0",
    ):
        assert line in text.splitlines(), line
    assert 'healerd_actions_total{kind="create",result="ok"}' in text
    assert f'healerd_heal_latency_seconds_count{{service="{svc}"}}' in text
    assert f'healerd_reconcile_duration_seconds_count{{service="{svc}"}}' in text
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    assert resp.status == 200 and b"healerd_engine_up 1.0" in resp.read()
    conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/v1/status")
    assert conn.getresponse().status == 404  # only /metrics on TCP
    conn.close()

    for args in (["status"], ["get"], ["events"]):
        print(f"$ healerctl {' '.join(args)}\n{run(*args)}")
    # no environment value anywhere
    for args in (["status"], ["get"], ["events"], ["diff"]):
        for fmt in ("table", "json", "yaml"):
            p = ctl(sock, *args, "-o", fmt)
            outputs.append(p.stdout + p.stderr)
    assert not [o for o in outputs if SECRET in o]
    assert SECRET not in text


def test_unprivileged_user_reads_but_cannot_change(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, sock: Path
) -> None:
    svc = unique("ro")
    config.service("ro.yaml", svc, 1)
    start(healerd, sock)
    ok(ctl(sock, "wait", svc, "--timeout", "30s"))
    assert (sock.stat().st_mode & 0o777) == 0o660
    # Without access to the socket: a clear line, exit 3.
    p = ctl_as_nobody(sock, "status")
    assert p.returncode == 3 and "permission denied" in p.stderr, p.stderr
    # Give nobody read access to the socket (as a member of the socket's group would have).
    sock.chmod(0o666)
    before = running_ids(cluster, svc)
    last_seq = json.loads(ok(ctl(sock, "events", "-o", "json")))["events"][-1]["seq"]

    data = json.loads(ok(ctl_as_nobody(sock, "status", "-o", "json")))
    assert [s["name"] for s in data["services"]] == [svc]
    assert svc in ok(ctl_as_nobody(sock, "get"))
    for args in (["pause", svc], ["reconcile"], ["reconcile", svc], ["reload"], ["resume", svc]):
        p = ctl_as_nobody(sock, *args)
        assert p.returncode == 4, (args, p.stdout, p.stderr)
        assert p.stderr.startswith("healerctl: refused: ")
        assert "needs root or membership in group 'healerd-admin'" in p.stderr
        assert "nobody (uid 65534)" in p.stderr

    # Nothing changed.
    status = json.loads(ok(ctl(sock, "status", "-o", "json")))
    assert status["paused"] == [] and status["services"][0]["state"] == "Converged"
    assert running_ids(cluster, svc) == before
    events = json.loads(ok(ctl(sock, "events", "-o", "json")))["events"]
    assert [e for e in events if e["seq"] > last_seq] == []
    log = healerd.log()
    assert "refused POST /v1/services/" in log and "reload requested by" not in log


def test_validate_corpus_without_a_daemon(tmp_path: Path) -> None:
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    corpus = {
        "a-negative.yaml": (
            "services:\n  web:\n    image: img:1\n    replicas: -1\n",
            ["a-negative.yaml:4:5: services.web.replicas: must not be negative"],
        ),
        "b-typo.yaml": (
            "services:\n  web2:\n    image: img:1\n    replica: 2\n",
            ["b-typo.yaml:4:5: services.web2.replica: unknown key 'replica' (did you mean"],
        ),
        "c-noimage.yml": (
            "services:\n  db:\n    replicas: 1\n",
            ["c-noimage.yml:2:3: services.db"],
        ),
        "d-syntax.yaml": ("services:\n  x: [\n", ["d-syntax.yaml:3:1: yaml: "]),
    }
    for name, (text, _) in corpus.items():
        (conf_d / name).write_text(text)
    p = ctl(tmp_path / "no.sock", "validate", str(conf_d))
    lines = ok(p, 1).splitlines()
    expected = [f"{conf_d}/{w}" for _, (_, want) in sorted(corpus.items()) for w in want]
    assert len(lines) == len(expected), lines
    for got, want in zip(lines, expected, strict=True):
        assert got.startswith(want), (got, want)
    assert "error(s) in 4 file(s) checked" in p.stderr
    config = trusted_copy(REPO / "config", tmp_path)
    assert ok(ctl(tmp_path / "no.sock", "validate", str(config))).startswith("ok: ")


def test_wait_after_scale_up_and_for_a_service_that_cannot_converge(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, sock: Path
) -> None:
    svc = unique("scale")
    config.service("scale.yaml", svc, 1)
    start(healerd, sock)
    ok(ctl(sock, "wait", svc, "--timeout", "30s"))
    config.service("scale.yaml", svc, 3)
    ok(ctl(sock, "reload"))
    t0 = time.monotonic()
    assert ok(ctl(sock, "wait", svc, "--timeout", "30s")).strip() == f"converged: {svc}"
    assert len(cluster.running(svc)) == 3, "wait returned before the scale-up converged"
    print(f"scale-up 1 -> 3 converged in {time.monotonic() - t0:.2f}s")

    bad = unique("broken")
    config.write(
        "broken.yaml",
        f"services:\n  {bad}:\n    image: healerd-test/does-not-exist:1\n    replicas: 1\n",
    )
    ok(ctl(sock, "reload"))
    t0 = time.monotonic()
    p = ctl(sock, "wait", bad, "--timeout", "4s")
    assert p.returncode == 1, p
    assert 4 <= time.monotonic() - t0 < 15
    assert "timed out after 4s waiting for convergence" in p.stderr
    reason = p.stderr.splitlines()[1]
    assert reason.startswith(f"  {bad}: ") and "0/1 running" in reason, p.stderr
    # The service's reason is what `wait` says, in one status: a second read (`healerctl
    # status`) may fall after a retry began ("pulling ...") or with a new "retry in Ns".
    # `-o json` gives the pending lines the table prints and the status they came from.
    p = ctl(sock, "wait", bad, "--timeout", "1s", "-o", "json")
    assert p.returncode == 1, p
    timed_out = json.loads(p.stdout)
    (state,) = [s for s in timed_out["services"] if s["name"] == bad]
    assert state["state"] != "Converged" and state["reason"]
    (line,) = timed_out["pending"]
    assert line.startswith(f"{bad}: ") and state["reason"] in line, timed_out
    # Every service: the broken one keeps `wait` and `status --check` failing.
    ok(ctl(sock, "wait", "--timeout", "1s"), 1)
    ok(ctl(sock, "status", "--check"), 1)


def test_daemon_unreachable_is_one_line_and_exit_3(
    healerd: Healerd, config: ConfigDir, sock: Path
) -> None:
    p = ctl(sock, "status")
    assert p.returncode == 3 and p.stdout == ""
    assert p.stderr.count("\n") == 1
    assert f"cannot reach healerd at {sock}: no such socket" in p.stderr
    config.service("u.yaml", unique("u"), 0)
    start(healerd, sock)
    ok(ctl(sock, "status"))
    healerd.stop()
    assert not sock.exists(), "healerd leaves no socket behind"
    assert ctl(sock, "get").returncode == 3


# -- fuzz ---------------------------------------------------------------------------------------

FUZZ_SECONDS = 12.0
PATHS = [
    *("/v1/status", "/v1/containers", "/v1/events", "/v1/diff", "/metrics", "/v1/version"),
    *("/v1/services/x/nope", "/", "/v1/status?service=", "/v1/events?wait=-1", "/%00"),
    "/v1/events?after=99999999999999999999999",
    "/v1/status?service=a&service=" + "b" * 300,
]
# Changes a root client may make without harming the run (never pause).
POSTS = ["/v1/reload", "/v1/reconcile", "/v1/services/{svc}/reconcile", "/v1/services/{svc}/resume"]


def fuzz_request(rng: random.Random, svc: str) -> bytes:
    kind = rng.randrange(9)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 4096))
    if kind == 1:
        return b"GET /" + b"x" * rng.randrange(60000, 200000) + b" HTTP/1.0\r\n\r\n"
    if kind == 2:
        return b"GET /v1/status HTTP/1.0\r\n" + b"X-A: b\r\n" * rng.randrange(50, 500) + b"\r\n"
    if kind == 3:
        n = rng.choice([10**6, 10**9, 2**63])
        return f"POST /v1/reload HTTP/1.0\r\nContent-Length: {n}\r\n\r\n".encode() + b"{" * 70000
    if kind == 4:
        body = rng.choice([b"[" * 60000, b"{oops", b"\xff\xfe", b'{"a":' * 5000, b"null"])
        target = rng.choice(POSTS).format(svc=svc)
        return f"POST {target} HTTP/1.0\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    if kind == 5:
        method = rng.choice([b"GET", b"PUT", b"DELETE", b"HEAD", b"OPTIONS", b"\x00\x01", b"G"])
        version = rng.choice([b"HTTP/1.0", b"HTTP/1.1", b"HTTP/2.0", b"HTTP/9", b"", b"FOO"])
        return method + b" " + rng.choice(PATHS).encode() + b" " + version + b"\r\n\r\n"
    if kind == 6:
        req = bytearray(f"GET {rng.choice(PATHS)} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        for _ in range(rng.randrange(1, 6)):
            req[rng.randrange(len(req))] = rng.randrange(256)
        return bytes(req)
    if kind == 7:
        return b"GET /v1/status HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n"
    return f"GET {rng.choice(PATHS)} HTTP/1.0\r\n\r\n".encode()


def fire(path: Path, data: bytes, codes: list[int]) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(15)
    try:
        try:
            s.connect(str(path))
        except BlockingIOError:
            codes.append(0)  # the listen backlog is full: busy, not broken
            return
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (413, 414, ...) and closed before reading it all
        resp = b""
        while len(resp) < 64:
            chunk = s.recv(4096)
            if not chunk:
                break
            resp += chunk
        if resp:
            assert resp.startswith(b"HTTP/1.0 "), resp[:80]
            codes.append(int(resp[9:12]))
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()


def test_fuzz_the_socket_while_healing(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient, sock: Path
) -> None:
    svc = unique("fz")
    config.service("fz.yaml", svc, 2)
    start(healerd, sock)
    ok(ctl(sock, "wait", svc, "--timeout", "30s"))
    stop = threading.Event()
    codes: list[int] = []
    failures: list[BaseException] = []

    def fuzzer(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            try:
                fire(sock, fuzz_request(rng, svc), codes)
            except BaseException as exc:
                failures.append(exc)
                return

    # A few slow clients hold connections open, sending a byte now and then.
    slow = []
    for _ in range(8):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(sock))
        s.sendall(b"GET /v1/status HTTP/1.0\r\nX-Slow: ")
        slow.append(s)
    threads = [threading.Thread(target=fuzzer, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    heals = []
    deadline = time.monotonic() + FUZZ_SECONDS
    try:
        while time.monotonic() < deadline:
            (victim, *_) = sorted(running_ids(cluster, svc))
            started = api.inspect_container(victim)["State"]["StartedAt"]
            t0 = time.monotonic()
            api.kill(victim)
            wait_for(
                "healing in place under fuzz",
                lambda v=victim, s=started: (
                    started_again(api, v, s) and len(running_ids(cluster, svc)) == 2
                ),
                timeout=5,
            )
            heals.append(time.monotonic() - t0)
            # The API keeps answering real clients too.
            data = json.loads(ok(ctl(sock, "--request-timeout", "10s", "status", "-o", "json")))
            assert data["services"][0]["name"] == svc
            time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=20)
        for s in slow:
            s.close()
    assert not failures, failures[:3]
    print(f"fuzz: {len(codes)} answers, codes {sorted(set(codes))}; heals {heals}")
    assert len(codes) > 50 and len(heals) >= 3
    assert all(400 <= c < 500 or c in (0, 200, 202) for c in codes), sorted(set(codes))
    assert healerd.alive()
    wait_for("convergence after the fuzz", lambda: cluster.converged(svc, 2), timeout=10)
    ok(ctl(sock, "wait", svc, "--timeout", "10s"))
    ok(ctl(sock, "status", svc, "--check"))
    assert "Traceback" not in healerd.log()
