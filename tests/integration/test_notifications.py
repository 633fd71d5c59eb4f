"""Notifications against real receivers on loopback (issue 32): a JSON webhook (Apprise's
json://), Debian's Mosquitto (mqtt://) and an SMTP server (aiosmtpd, mailto://). A
service crash-loops: the message says which, its exit code and its last line of output,
never its secret; once fixed, one "recovered"; a storm of 20 kills is one digest; a
target that refuses connections is shown in status and holds no heal back."""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.healerd_process import Healerd
from tests.support.polling import wait_for

SECRET = "hunter2-not-for-your-phone"
CRASHING = json.dumps(
    ["sh", "-c", 'echo starting; echo "connecting with $$TOKEN"; echo last words 42; exit 3']
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Webhook:
    """Apprise's json:// posts {"title", "message", "type", ...}: each body, in order."""

    def __init__(self) -> None:
        self.got: queue.Queue[dict[str, Any]] = queue.Queue()
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                got.put(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def messages(self) -> list[dict[str, Any]]:
        out = []
        while not self.got.empty():
            out.append(self.got.get_nowait())
        return out


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    w = Webhook()
    yield w
    w.server.shutdown()


def settings(config: ConfigDir, targets: str) -> None:
    path = config.settings(f"notifications:\n{targets}")
    os.chmod(path, 0o600)  # it holds credentials: others may not read it


def crashing_service(config: ConfigDir, command: str = CRASHING) -> None:
    config.service("crashy.yaml", "crashy", 1, command=command, environment=f"{{TOKEN: {SECRET}}}")


def until(what: str, cond: Any, timeout: float) -> Any:
    return wait_for(what, cond, timeout=timeout, interval=0.1)


def test_a_crash_loop_its_recovery_and_a_storm_reach_a_webhook_and_a_dead_target_holds_nothing(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient, webhook: Webhook
) -> None:
    dead = free_port()  # nothing listens: connection refused
    settings(
        config,
        f"  - url: json://127.0.0.1:{webhook.port}/hook\n    name: hook\n"
        "    events: [crash-loop, failed, recovered, heal]\n"
        f"  - url: json://127.0.0.1:{dead}/gone\n    name: dead\n",
    )
    config.service("steady.yaml", "steady", 20)
    crashing_service(config)
    healerd.start()
    got: list[dict[str, Any]] = []

    def message(word: str) -> dict[str, Any] | None:
        """The first message that tells `word`, alone (its title) or in a digest."""
        got.extend(webhook.messages())
        return next((m for m in got if word in m["title"] or word in m["message"]), None)

    crash = until("the crash loop's message", lambda: message("crashy: crash loop"), 40)
    body = crash["message"]
    assert "exit code 3" in body and "restart(s) so far" in body and "next try in" in body
    assert "last words 42" in body, body
    assert SECRET not in json.dumps(got) and "connecting with [TOKEN]" in body
    assert crash["type"] == "failure"
    until("20 steady replicas", lambda: cluster.converged("steady", 20), 60)
    time.sleep(4)  # the gather of the first heals (pacing, not a wait for an outcome)
    webhook.messages()
    got.clear()

    # A storm: 20 replicas killed at once are one digest; every heal at engine speed
    # although the dead target refuses every send.
    victims = [c["Id"] for c in cluster.running("steady")]
    t0 = time.monotonic()
    for cid in victims:
        api.kill(cid)
    until("20 healed", lambda: cluster.converged("steady", 20), 20)
    healed_in = time.monotonic() - t0
    storm = until("the storm's digest", lambda: message("steady: healed"), 20)
    assert storm["message"].count("steady: healed") == 20, storm
    time.sleep(4)
    later = webhook.messages()
    assert not [m for m in later if "steady" in m["title"] + m["message"]], "one digest only"
    assert healed_in < 10, healed_in

    code, out, _ = healerd.ctl("status")
    assert "notifications to dead:" in out and "failed" in out, out
    assert f"127.0.0.1:{dead}" not in out

    # Fixed: one "recovered", after it has run as declared for 30 s.
    crashing_service(config, json.dumps(["sleep", "3600"]))
    got.clear()
    rec = until("recovered", lambda: message("crashy: recovered"), 90)
    assert "runs as declared again" in rec["message"]
    assert not [m for m in got if "crash loop" in m["title"]]
    log = healerd.log()
    assert f"127.0.0.1:{dead}/gone" not in log and f"{webhook.port}/hook" not in log
    assert "notification to dead not sent" in log

    code, out, err = healerd.ctl("notify", "test")
    assert code == 1, (out, err)
    assert "hook: sent" in out and "dead: FAILED" in out and str(dead) not in out
    assert any("test" in m["title"] for m in webhook.messages())


@pytest.mark.skipif(not shutil.which("mosquitto"), reason="apt-get install mosquitto")
def test_a_crash_loop_its_recovery_and_a_storm_reach_mosquitto_and_an_smtp_server(
    healerd: Healerd, config: ConfigDir, cluster: Cluster, api: docker.APIClient, tmp_path: Path
) -> None:
    from aiosmtpd.controller import Controller as SmtpServer  # a test tool: the dev extra
    from aiosmtpd.handlers import Message

    mails: list[str] = []

    class Keep(Message):
        def handle_message(self, message: Any) -> None:
            text = [str(message["Subject"])]
            for part in message.walk():
                if part.get_content_type() == "text/plain":
                    text.append(part.get_payload(decode=True).decode())
            mails.append("\n".join(text))

    smtp_port = free_port()
    smtp = SmtpServer(Keep(), hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    mqtt_port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {mqtt_port} 127.0.0.1\nallow_anonymous true\n")
    broker = subprocess.Popen(
        ["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        heard: list[str] = []
        client = mqtt.Client(CallbackAPIVersion.VERSION2)
        client.on_message = lambda _c, _u, msg: heard.append(msg.payload.decode())

        def connected() -> bool:
            try:
                return client.connect("127.0.0.1", mqtt_port) == 0
            except OSError:
                return False

        until("the broker", connected, 10)
        client.subscribe("healerd/alerts")
        client.loop_start()
        kinds = "    events: [crash-loop, failed, recovered, heal]\n"
        settings(
            config,
            f"  - url: mqtt://127.0.0.1:{mqtt_port}/healerd/alerts\n    name: broker\n{kinds}"
            f"  - url: mailto://localhost:{smtp_port}?from=healerd@localhost&to=ops@localhost"
            f"&secure=no\n    name: mail\n{kinds}",
        )
        config.service("steady.yaml", "steady", 20)
        crashing_service(config)
        healerd.start()
        until("the MQTT message", lambda: any("crash loop" in m for m in heard), 40)
        until("the mail", lambda: any("crash loop" in m for m in mails), 20)
        for text in ("\n".join(heard), "\n".join(mails)):
            assert "crashy" in text and "exit code 3" in text and "last words 42" in text
            assert SECRET not in text
        until("20 steady replicas", lambda: cluster.converged("steady", 20), 60)
        time.sleep(4)  # the gather of the first notices (pacing, not a wait for an outcome)
        heard.clear()
        mails.clear()

        # A storm of 20 kills: one digest on each; then the fix: one "recovered" on each.
        for c in cluster.running("steady"):
            api.kill(c["Id"])
        crashing_service(config, json.dumps(["sleep", "3600"]))
        for what, got in (("MQTT", heard), ("mail", mails)):
            storm = until(
                f"the storm's digest ({what})",
                lambda got=got: next((m for m in got if "steady: healed" in m), None),
                20,
            )
            assert storm.count("steady: healed") == 20, storm
        for what, got in (("MQTT", heard), ("mail", mails)):
            until(
                f"recovered ({what})",
                lambda got=got: any("crashy: recovered" in m for m in got),
                90,
            )
            assert sum("steady: healed" in m for m in got) == 1, "one digest only"
        client.loop_stop()
    finally:
        broker.terminate()
        broker.wait(10)
        smtp.stop()


def test_a_start_after_an_unclean_stop_is_told_and_a_clean_one_is_not(
    healerd: Healerd, config: ConfigDir, webhook: Webhook
) -> None:
    settings(config, f"  - url: json://127.0.0.1:{webhook.port}/hook\n")
    healerd.start()
    healerd.stop()  # SIGTERM: a clean stop
    healerd.start()
    time.sleep(3)  # a notice would be gathered and sent by now (pacing, not a wait)
    assert not [m for m in webhook.messages() if "unclean" in m["title"]]
    healerd.kill9()  # no clean stop
    healerd.start()
    told = until(
        "the unclean-stop notice",
        lambda: next((m for m in webhook.messages() if "unclean stop" in m["title"]), None),
        15,
    )
    assert "took over the containers" in told["message"]
