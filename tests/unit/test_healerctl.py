"""healerctl: formatting, exit codes and messages, against the real API server and a fake daemon."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from healerd.cli import healerctl
from healerd.cli.client import explain_unreachable
from healerd.cli.healerctl import (
    EXIT_API,
    EXIT_FORBIDDEN,
    EXIT_NO,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    check_problems,
    container_status,
)
from healerd.cli.output import human_age, human_bytes, table
from healerd.cli.views import engine_host_line
from healerd.daemon.api import server as api_module
from healerd.daemon.api.server import ApiOptions, ApiServer, Peer
from healerd.vocabulary import EventKind
from tests.support.config import trusted_copy
from tests.unit.harness.api import SECRET, FakeDaemon

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[FakeDaemon]:
    d = FakeDaemon(tmp_path / "healerd.sock")
    server = ApiServer(d, ApiOptions(request_deadline=2.0))
    server.start()
    yield d
    server.stop()


def run(*argv: str, socket_path: Path | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = (["--socket", str(socket_path)] if socket_path else []) + list(argv)
    code = healerctl.main(args, out, err)
    return code, out.getvalue(), err.getvalue()


def ctl(d: FakeDaemon, *argv: str) -> tuple[int, str, str]:
    return run(*argv, socket_path=d.settings.socket_path)


# -- formatting -----------------------------------------------------------------------------


def test_table_aligns_like_kubectl() -> None:
    assert table(["A", "LONGER"], [["x", 1], ["yyyy", None]]) == "A      LONGER\nx      1\nyyyy"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0, "0s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 120, "3h2m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 3600, "3d1h"),
        (40 * 86400, "40d"),
    ],
)
def test_human_age(seconds: float | None, text: str) -> None:
    assert human_age(seconds) == text


def test_human_bytes() -> None:
    assert human_bytes(512) == "512 B"
    assert human_bytes(3 * 1024**3) == "3.0 GiB"


def test_container_status_and_engine_line() -> None:
    assert container_status({"state": "running", "exit_code": None}) == "Running"
    assert container_status({"state": "exited", "exit_code": 137}) == "Exited (137)"
    line = engine_host_line(
        {
            "engine": {"reachable": False, "version": None},
            "host": {
                "memory": {"total_bytes": 8 * 1024**3, "available_bytes": 6 * 1024**3,
                           "used_percent": 25.0},
                "disk": {"path": "/var/lib/docker", "total_bytes": 100, "free_bytes": 40,
                         "used_percent": 60.0},
                "load": [0.5, 0.25, 0.0],
            },
        }
    )  # fmt: skip
    assert line == (
        "engine: UNREACHABLE; host: memory 2.0 GiB/8.0 GiB (25%), "
        "disk /var/lib/docker 60% used (40 B free), load 0.50 0.25 0.00"
    )


def test_check_problems_names_each_reason() -> None:
    ok = {"name": "a", "state": "Converged", "running": 1, "desired": 1, "up_to_date": 1,
          "available": 1, "reason": "", "converged": True}  # fmt: skip
    paused = dict(ok, name="p", state="Paused", paused=True, reason="paused by an operator",
                  converged=False)  # fmt: skip
    assert check_problems({"services": [ok]}) == []
    problems = check_problems(
        {
            "services": [ok, paused],
            "missing": ["x"],
            "config_errors": [{"message": "f.yaml:1: image: required"}],
            "engine": {"reachable": False},
            "sources": [
                {"name": "fleet", "last_error": "commit 1a2b3c refused: no valid signature"},
                {"name": "ok", "last_error": ""},
            ],
        }
    )
    assert problems == [
        "p: Paused: paused by an operator (1/1 running, 1 up to date, 1 available)",
        "no such service: x",
        "config error: f.yaml:1: image: required",
        "engine unreachable",
        "source fleet: commit 1a2b3c refused: no valid signature",
    ]


# -- verbs against the API (fake daemon) ------------------------------------------------------


def test_status_table_and_check(daemon: FakeDaemon) -> None:
    code, out, _ = ctl(daemon, "status")
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0].split() == [
        "SERVICE", "DESIRED", "READY", "UP-TO-DATE", "AVAILABLE", "RESTARTS", "STATE", "AGE",
        "REASON",
    ]  # fmt: skip
    assert lines[1].split()[:8] == ["db", "1", "1", "1", "1", "0", "Converged", "0s"]
    assert lines[2].split()[:8] == ["web", "2", "1", "1", "1", "4", "CrashLoopBackOff", "90s"]
    assert lines[2].endswith("containers keep stopping; next replacement in 3.0s")
    assert "config: 1 error(s)" in out and "bad.yaml:3: services.x.image: bad" in out
    assert lines[-2].startswith("engine: reachable, docker 28.2.2 (API 1.45); host: memory ")
    assert lines[-2].endswith(", pressure: none")
    assert lines[-1].startswith("healerd: rss ") and "engine calls 42 (cap 50/s" in lines[-1]
    code, _, err = ctl(daemon, "status", "--check")
    assert code == EXIT_NO and "not converged: web: CrashLoopBackOff" in err
    code, _, err = ctl(daemon, "status", "db", "--check")
    assert code == EXIT_NO and "config error" in err  # a broken file fails the check too
    daemon.controller.desired = daemon.controller.desired.__class__(
        daemon.controller.desired.services, (), False, ()
    )
    assert ctl(daemon, "status", "db", "--check")[0] == EXIT_OK
    daemon.settings_errors = ("healerd.yaml:2: pressure_disk_free: bad",)
    code, out, _ = ctl(daemon, "status")
    assert "healerd.yaml: not reloaded; the settings in force stay:" in out
    assert "  healerd.yaml:2: pressure_disk_free: bad" in out
    assert ctl(daemon, "status", "-o", "json")[1].count("pressure_disk_free: bad") == 1


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_status_documents(daemon: FakeDaemon, fmt: str) -> None:
    code, out, _ = ctl(daemon, "status", "-o", fmt)
    data = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    assert code == EXIT_OK and [s["name"] for s in data["services"]] == ["db", "web"]


def test_status_of_a_service_and_an_unknown_one_exits_5(daemon: FakeDaemon) -> None:
    """Review: one name unknown among known ones exited 0 (the help says 5)."""
    code, out, err = ctl(daemon, "status", "web", "nosuch")
    assert code == EXIT_API and "web" in out and "no such service: nosuch" in err
    assert ctl(daemon, "status", "web")[0] == EXIT_OK


def test_get_table_and_json(daemon: FakeDaemon) -> None:
    code, out, _ = ctl(daemon, "get")
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "SERVICE", "STATUS", "HEALTH", "RESTARTS", "AGE", "IMAGE"]
    assert lines[1].split() == ["db-abcde-22222", "db", "Exited", "(1)", "unhealthy", "0", "5s",
                                "img:1"]  # fmt: skip
    code, out, _ = ctl(daemon, "get", "web", "-o", "json")
    (c,) = json.loads(out)["containers"]
    assert c["name"] == "web-abcde-11111" and c["restarts"] == 4 and c["health"] is None
    daemon.controller.engine_down = True
    code, _, err = ctl(daemon, "get")
    assert code == EXIT_API and "engine unreachable" in err


def test_events_table_json_and_since(daemon: FakeDaemon) -> None:
    log = daemon.controller.events
    log.record(EventKind.CREATED, "web", "1/2 running", "web-abcde-11111")
    log.record(EventKind.CONFIG_ERROR, "", "bad.yaml:3: image: bad")
    code, out, _ = ctl(daemon, "events")
    lines = out.splitlines()
    assert code == EXIT_OK and lines[0].split() == ["TIME", "KIND", "SERVICE", "CONTAINER",
                                                    "MESSAGE"]  # fmt: skip
    assert lines[1].split()[1:] == ["created", "web", "web-abcde-11111", "1/2", "running"]
    assert lines[2].split()[1:3] == ["config-error", "-"]
    code, out, _ = ctl(daemon, "events", "-o", "json", "--since", "1h")
    assert [e["kind"] for e in json.loads(out)["events"]] == ["created", "config-error"]
    assert ctl(daemon, "events", "--since", "soon")[0] == EXIT_USAGE


def test_diff_exit_codes(daemon: FakeDaemon) -> None:
    code, out, _ = ctl(daemon, "diff")
    assert code == EXIT_NO
    assert out.splitlines()[1].split() == ["create", "web", "(new)", "1/2", "running"]
    daemon.controller.preview = lambda service, reader=None: []  # type: ignore[method-assign]
    code, out, _ = ctl(daemon, "diff", "-o", "json")
    assert code == EXIT_OK and json.loads(out) == {"actions": []}


def test_changes_as_root(daemon: FakeDaemon) -> None:
    assert ctl(daemon, "pause", "web") == (EXIT_OK, "web is now paused\n", "")
    assert ctl(daemon, "pause", "web")[1] == "web was already paused\n"
    assert ctl(daemon, "resume", "web")[1] == "web resumed\n"
    assert ctl(daemon, "reconcile", "db")[1] == "reconcile of db queued\n"
    assert ctl(daemon, "reconcile")[1] == "reconcile of every service queued\n"
    code, out, _ = ctl(daemon, "reload")
    assert code == EXIT_OK and out == "configuration reloaded: 2 service(s) declared\n"
    code, _, err = ctl(daemon, "pause", "nope")
    assert code == EXIT_API and "no such service: nope" in err and "HTTP 404" in err


def test_refused_is_exit_4_with_the_reason(
    daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_module, "peer_of", lambda sock: Peer(1, 65534, 65534))
    for verb in (["pause", "web"], ["reconcile"], ["reload"]):
        code, _, err = ctl(daemon, *verb)
        assert code == EXIT_FORBIDDEN, verb
        assert err.startswith("healerctl: refused: ") and "needs root" in err
    assert daemon.controller.calls == [] and daemon.reload_requests == 0


def test_wait(daemon: FakeDaemon) -> None:
    assert ctl(daemon, "wait", "db", "--timeout", "2s") == (EXIT_OK, "converged: db\n", "")
    code, _, err = ctl(daemon, "wait", "--timeout", "0.5s")
    assert code == EXIT_NO
    assert "timed out after 0s waiting for convergence" in err
    assert "web: CrashLoopBackOff: containers keep stopping" in err
    code, _, err = ctl(daemon, "wait", "nope", "--timeout", "0.3s")
    assert code == EXIT_NO and "nope: not declared" in err


def test_no_secret_in_any_output(daemon: FakeDaemon) -> None:
    daemon.controller.events.record(EventKind.CREATED, "web", "1/2 running")
    for argv in (["status"], ["get"], ["events"], ["diff"]):
        for fmt in ("table", "json", "yaml"):
            _, out, err = ctl(daemon, *argv, "-o", fmt)
            assert SECRET not in out + err


# -- unreachable, usage, version -------------------------------------------------------------


def test_unreachable_messages(tmp_path: Path) -> None:
    missing = tmp_path / "none.sock"
    code, out, err = run("status", socket_path=missing)
    assert code == EXIT_UNREACHABLE and out == ""
    assert err == (
        f"healerctl: cannot reach healerd at {missing}: no such socket: healerd is not "
        "running or uses another socket (set --socket or HEALERD_SOCKET if it listens "
        "elsewhere)\n"
    )
    dead = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(dead))
    s.close()
    code, _, err = run("get", socket_path=dead)
    assert code == EXIT_UNREACHABLE and "the socket exists but nobody listens" in err
    plain = tmp_path / "plain"
    plain.write_text("")
    assert "exists but is not a socket" in run("status", socket_path=plain)[2]
    # Root is never refused by file permissions, so the message is checked directly.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(dead.with_name("perm.sock")))
    msg = explain_unreachable(str(dead.with_name("perm.sock")), PermissionError(13, "denied"))
    assert "permission denied: the socket exists but you may not open it" in msg
    s.close()


def test_socket_from_environment(daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEALERD_SOCKET", str(daemon.settings.socket_path))
    assert run("status")[0] == EXIT_OK


def test_usage_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("frobnicate")[0] == EXIT_USAGE
    assert run()[0] == EXIT_USAGE
    assert run("status", "-o", "xml")[0] == EXIT_USAGE
    assert run("--version")[0] == EXIT_OK
    assert capsys.readouterr().out.startswith("healerctl 0.")
    assert run("--help")[0] == EXIT_OK
    assert "exit codes:" in capsys.readouterr().out


# -- validate (no daemon) ------------------------------------------------------------------------

# A corpus of broken files: each with the lines `validate` must print for it.
BAD = {
    "negative.yaml": (
        "services:\n  web:\n    image: img:1\n    replicas: -1\n    imagee: x\n",
        [
            "negative.yaml:4:5: services.web.replicas: must not be negative",
            "negative.yaml:5:5: services.web.imagee: unknown key 'imagee' (did you mean 'image'?)",
        ],
    ),
    "syntax.yaml": (
        "services:\n  x:\n    image: [unclosed\n",
        ["syntax.yaml:4:1: yaml: while parsing a flow sequence"],
    ),
    "port.yml": (
        'services:\n  db:\n    image: img\n    ports: ["99999"]\n',
        ["port.yml:4:13: services.db.ports[0]: container port '99999' must be a number"],
    ),
}


def test_validate_bad_corpus_prints_file_line_and_exits_1(tmp_path: Path) -> None:
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    for name, (text, _) in BAD.items():
        (conf_d / name).write_text(text)
    code, out, err = run("validate", str(conf_d))
    assert code == EXIT_NO
    lines = out.splitlines()
    expected = [f"{conf_d}/{line}" for _, (_, want) in sorted(BAD.items()) for line in want]
    assert len(lines) == len(expected)
    for got, want in zip(lines, expected, strict=True):
        assert got.startswith(want), (got, want)
    assert err == f"{len(expected)} error(s) in 3 file(s) checked\n"
    # One file at a time, JSON, too.
    code, out, _ = run("validate", "-o", "json", str(conf_d / "negative.yaml"))
    data = json.loads(out)
    assert code == EXIT_NO and data["ok"] is False
    assert [(e["line"], e["field"]) for e in data["errors"]] == [
        (4, "services.web.replicas"),
        (5, "services.web.imagee"),
    ]


def test_validate_cross_file_and_settings(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    one = "services:\n  web:\n    image: img:1\n"
    (tmp_path / "conf.d" / "a.yaml").write_text(one)
    (tmp_path / "conf.d" / "b.yaml").write_text(one)
    (tmp_path / "healerd.yaml").write_text("workers: 0\n")
    code, out, _ = run("validate", str(tmp_path))
    assert code == EXIT_NO
    assert f"{tmp_path}/healerd.yaml:1: workers: " in out
    assert "b.yaml:2:3: services.web: declared in both" in out or "declared in both" in out


def test_validate_missing_file(tmp_path: Path) -> None:
    code, out, _ = run("validate", str(tmp_path / "nope.yaml"))
    assert code == EXIT_NO and out.startswith(f"{tmp_path}/nope.yaml: ")


def test_validate_examples_in_config_exit_0(tmp_path: Path) -> None:
    config = trusted_copy(REPO / "config", tmp_path)
    code, out, _ = run("validate", str(config))
    assert code == EXIT_OK and out.startswith("ok: ")
    assert run("validate", str(config / "conf.d" / "example.yaml"))[0] == EXIT_OK
    assert run("validate", str(config / "healerd.yaml"))[0] == EXIT_OK


def test_validate_one_file_applies_the_daemons_strict_modes(tmp_path: Path) -> None:
    """A single file was loaded with strict modes off: a service file anyone may write
    (which the daemon refuses) passed. Now the daemon's rule, healerd.yaml included."""
    config = trusted_copy(REPO / "config", tmp_path)
    loose = config / "conf.d" / "loose.yaml"
    loose.write_text("services:\n  web: {image: busybox}\n")
    loose.chmod(0o666)
    code, out, _ = run("validate", str(loose))
    assert code == EXIT_NO
    assert out.startswith(f"{loose}: ") and "writable by group and others" in out
    assert run("validate", str(config))[0] == EXIT_NO  # as the directory form says
    # A config directory whose healerd.yaml turns strict modes off: as the daemon does.
    (config / "healerd.yaml").write_text("strict_modes: false\n")
    assert run("validate", str(loose))[0] == EXIT_OK
    assert run("validate", str(config))[0] == EXIT_OK


def test_validate_is_the_daemons_code_path(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    import healerd.cli.validate as v
    import healerd.config as cfg

    real = cfg.load_service_file

    def spy(path: Path, display_name: str | None = None, *, strict_modes: bool = False) -> Any:
        seen.append(str(path))
        return real(path, display_name, strict_modes=strict_modes)

    monkeypatch.setattr(v, "load_service_file", spy)
    run("validate", str(REPO / "config" / "conf.d" / "example.yaml"))
    assert seen == [str(REPO / "config" / "conf.d" / "example.yaml")]


def test_prune_volumes_says_what_went_and_a_dry_run_removes_nothing(daemon: FakeDaemon) -> None:
    code, out, _ = ctl(daemon, "prune", "volumes", "--dry-run")
    assert code == 0 and out.strip() == "would remove 1 volume(s): p_data"
    code, out, _ = ctl(daemon, "prune", "volumes")
    assert code == 0 and out.strip() == "removed 1 volume(s): p_data"
    assert daemon.controller.pruned == [True, False]
    code, _, _ = ctl(daemon, "prune", "networks")
    assert code != 0  # only volumes: argparse refuses the rest


def test_update_checks_now_and_passes_the_operators_allowances(daemon: FakeDaemon) -> None:
    """Issue 29, L5: the explicit action that lets a tag moved back roll the service back."""
    code, out, _ = ctl(daemon, "update", "web", "--allow-downgrade")
    assert code == 0 and out.startswith("update of web queued (now, whatever update_window")
    assert "a downgrade allowed once" in out
    assert ctl(daemon, "update", "web", "--retry-failed", "-o", "json")[0] == 0
    assert ctl(daemon, "update", "web")[0] == 0
    assert daemon.images.updates == [
        ("web", True, False),
        ("web", False, True),
        ("web", False, False),
    ]
    code, _, err = ctl(daemon, "update", "db")
    assert code == EXIT_API and "does not follow its tag" in err


def test_update_check_rollback_pin_and_unpin_reach_the_updater(daemon: FakeDaemon) -> None:
    code, out, _ = ctl(daemon, "update", "web", "--check")
    assert code == 0 and "update check of web queued (look only)" in out
    assert daemon.images.looks == ["web"]
    asked = [e for e in daemon.controller.events.since(0) if e.kind == "update-requested"]
    assert [e.message for e in asked][-1].startswith("healerctl update check by ")
    digest = "sha256:" + "ab" * 32
    assert ctl(daemon, "rollback", "web")[0] == 0
    code, out, _ = ctl(daemon, "pin", "web", digest)
    assert code == 0 and f"pinned to {digest}" in out
    assert ctl(daemon, "unpin", "web")[0] == 0
    assert daemon.images.verbs == [
        ("rollback", "web"),
        ("pin", f"web {digest}"),
        ("unpin", "web"),
    ]
    code, _, err = ctl(daemon, "rollback", "db")
    assert code == EXIT_API and "does not follow its tag" in err


def test_a_converged_service_shows_what_its_last_update_did_and_when(daemon: FakeDaemon) -> None:
    note = "rolled back to 1a2b3c4d5e6f: 9f8e7d6c5b4a failed (exited with code 1)"
    daemon.images.said["db"] = {"note": note, "at": 1.0, "age_seconds": 3 * 3600.0, "pinned": ""}
    code, out, _ = ctl(daemon, "status", "-o", "wide")
    line = next(line for line in out.splitlines() if line.startswith("db "))
    assert code == 0 and f"{note} (3h ago)" in line, out


def test_healerctl_starts_without_the_config_package() -> None:
    # Every call pays for what healerctl imports: the config package was a tenth of a
    # second of a `healerctl status` (issue 19: < 300 ms at 1,000 containers).
    import subprocess
    import sys

    code = (
        "import sys, healerd.cli.healerctl as h; h.build_parser(); "
        "print('healerd.config' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_rollback_whose_pull_outlasts_the_request_deadline_is_answered(
    tmp_path: Path,
) -> None:
    """Review: healerctl waited for the previous image's pull, the server cut the request
    at its deadline: healerctl said healerd could not be reached, the rollback went on."""
    import time

    d = FakeDaemon(tmp_path / "healerd.sock")
    slow = d.images.rollback

    def pulling_first(service: str) -> str:
        time.sleep(1.5)  # the previous image pulled first
        return slow(service)

    d.images.rollback = pulling_first  # type: ignore[method-assign]
    server = ApiServer(d, ApiOptions(request_deadline=0.5))
    server.start()
    try:
        code, out, err = run("rollback", "web", socket_path=d.settings.socket_path)
    finally:
        server.stop()
    assert code == EXIT_OK and ("rollback", "web") in d.images.verbs, (out, err)
