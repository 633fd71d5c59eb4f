"""What an operator reads (issue 28, point 7): `describe`'s spec summary, `status`'s
reasons and `reload`'s verdict, through healerctl against the real API server and a
fake daemon."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import pytest

from healerd.cli import healerctl
from healerd.cli.healerctl import EXIT_NO, EXIT_OK
from healerd.config import ConfigError, DesiredState
from healerd.core.status import ServiceStatus
from healerd.daemon.api.server import ApiOptions, ApiServer
from healerd.model import HealthcheckSpec, PortSpec, VolumeSpec
from tests.unit.harness.api import SECRET, FakeDaemon, spec

# What the engine said when a start failed on a host port another process holds: its
# last words are the ones that matter.
PORT_TAKEN = (
    "start web-abcde-11111: 500 Server Error for http+docker://localhost/v1.41/containers/"
    '0123456789ab/start: Internal Server Error ("driver failed programming external '
    "connectivity on endpoint web-abcde-11111 (0123456789abcdef0123456789abcdef01234567"
    '89abcdef0123456789abcdef): Bind for 0.0.0.0:8080 failed: port is already allocated")'
)


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


def declare(d: FakeDaemon, **services: object) -> None:
    d.controller.desired = DesiredState(MappingProxyType(dict(services)), (), False, ())  # type: ignore[arg-type]


# -- describe ---------------------------------------------------------------------------


def test_describe_shows_env_names_volumes_ports_and_healthcheck_never_a_value(
    daemon: FakeDaemon,
) -> None:
    web = dataclasses.replace(
        spec("web", 2),
        environment=(("TOKEN", SECRET), ("DB_HOST", "db")),
        volumes=(VolumeSpec("web-data", "/data"), VolumeSpec("/srv/conf", "/etc/web", True)),
        ports=(PortSpec(80, host_port=8080),),
        healthcheck=HealthcheckSpec(("CMD-SHELL", "wget -q -O- localhost"), 5.0, 2.0, 3),
    )
    declare(daemon, web=web)
    code, out, _ = ctl(daemon, "describe", "web")
    assert code == EXIT_OK
    fields = dict(line.split(":", 1) for line in out.split("\n\n")[0].splitlines())
    fields = {k: v.strip() for k, v in fields.items()}
    assert fields["Command"] == "(image default)"  # was "None"
    assert fields["Environment"] == "TOKEN, DB_HOST (names only)"
    assert fields["Volumes"] == "web-data:/data, /srv/conf:/etc/web:ro"
    assert fields["Ports"] == "8080:80/tcp"
    assert fields["Healthcheck"] == "wget -q -O- localhost (every 5s, timeout 2s, 3 retries)"
    assert fields["Restart"] == "backoff 10s doubling to 5m, reset after 10m running"
    assert "None" not in out and SECRET not in out and "db" not in fields["Environment"]
    # -o json had them already; both agree.
    data = json.loads(ctl(daemon, "describe", "web", "-o", "json")[1])
    assert data["spec"]["environment"] == ["TOKEN", "DB_HOST"] and SECRET not in json.dumps(data)


def test_describe_says_what_is_left_to_the_image(daemon: FakeDaemon) -> None:
    web = dataclasses.replace(
        spec("web"),
        environment=(),
        command=("sh", "-c", "exec httpd -f -p 80"),
        healthcheck=HealthcheckSpec(disable=True),
    )
    declare(daemon, web=web)
    out = ctl(daemon, "describe", "web")[1]
    assert "Command:      sh -c 'exec httpd -f -p 80'\n" in out
    assert "Environment:  none\n" in out and "Volumes:      none\n" in out
    assert "Ports:        none\n" in out and "Healthcheck:  disabled\n" in out
    declare(daemon, web=dataclasses.replace(web, healthcheck=None))
    assert "Healthcheck:  (image default)\n" in ctl(daemon, "describe", "web")[1]


# -- status -----------------------------------------------------------------------------


def test_a_long_reason_keeps_its_end_in_status(
    daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = daemon.controller.raw_statuses

    def statuses() -> list[ServiceStatus]:
        rows = raw()
        rows[1].reason = PORT_TAKEN
        return rows

    monkeypatch.setattr(daemon.controller, "raw_statuses", statuses)
    code, out, _ = ctl(daemon, "status")
    (web,) = [line for line in out.splitlines() if line.startswith("web ")]
    assert code == EXIT_OK
    assert web.endswith('Bind for 0.0.0.0:8080 failed: port is already allocated")')
    assert web.split("CrashLoopBackOff")[1].split(None, 1)[1].startswith("start web-abcde-11111")
    assert " … " in web and len(web) < 200
    # -o wide and -o json: the whole reason.
    code, out, _ = ctl(daemon, "status", "-o", "wide")
    assert code == EXIT_OK and PORT_TAKEN in out
    data = json.loads(ctl(daemon, "status", "-o", "json")[1])
    assert data["services"][1]["reason"] == PORT_TAKEN


def test_keep_end_cuts_the_middle_at_word_boundaries() -> None:
    from healerd.cli.output import keep_end

    assert keep_end("a  b\n c", 100) == "a b c"
    cut = keep_end(PORT_TAKEN, 100)
    assert len(cut) <= 100 and cut.startswith("start web-abcde-11111: 500")
    assert cut.endswith('port is already allocated")') and " … " in cut
    assert keep_end(PORT_TAKEN, None) == PORT_TAKEN
    assert len(keep_end("x" * 300, 100)) == 100


# -- reload -----------------------------------------------------------------------------


def test_reload_says_reloaded_only_when_every_file_was_taken(
    daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = ctl(daemon, "reload")
    assert (code, out, err) == (EXIT_OK, "configuration reloaded: 2 service(s) declared\n", "")

    bad = ConfigError("/etc/healerd/conf.d/web.yaml", 4, "services.web.replicas", "not a number")

    def refused() -> None:
        c = daemon.controller
        c.desired = DesiredState(dict(c.desired.services), (bad,), False, (bad.file,))

    monkeypatch.setattr(daemon, "request_reload", refused)
    code, out, err = ctl(daemon, "reload")
    assert code == EXIT_NO and out == "" and "reloaded" not in err
    assert err.startswith("healerctl: reload refused: 1 error(s)")
    assert "config error: /etc/healerd/conf.d/web.yaml:4: services.web.replicas" in err
    data = json.loads(ctl(daemon, "reload", "-o", "json")[1])
    assert data["ok"] is False and data["message"].startswith("reload refused")


def test_reload_reports_a_refused_healerd_yaml(
    daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon.settings_errors = ("healerd.yaml:2: pressure_disk_free: not a size",)
    code, out, err = ctl(daemon, "reload")
    assert code == EXIT_NO and out == "" and "configuration reloaded" not in err
    assert "healerd.yaml not reloaded: healerd.yaml:2: pressure_disk_free: not a size" in err


def test_a_reload_not_applied_in_time_is_no_success(
    daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    from healerd.daemon.api import routes as api_routes

    monkeypatch.setattr(api_routes, "RELOAD_APPLY_WAIT", 0.2)
    monkeypatch.setattr(daemon, "request_reload", lambda: None)
    code, out, err = ctl(daemon, "reload")
    assert code == EXIT_NO and out == "" and "not applied" in err
