"""Real software across a crash (issue 28, point 6): a Mosquitto broker with a
persistent-session subscriber keyed on its host name, and nginx proxying to a service by
name, all from Debian's packages (tests/support/debian_image.py), run by healerd from one
Compose-style file.

The crash is the host's `kill -9` of the container's PID 1 (an OOM kill or a segfault
looks the same to the engine). A heal that starts the same container again keeps its
host name and its address, as Compose's `restart: unless-stopped` does; a replacement
does not, and then:
- the subscriber comes back under a new client id, and its old persistent session stays
  in the broker's shared subscription and takes half of the messages, which nobody will
  ever read;
- nginx, which resolved `api` once at its start, keeps proxying to the old address.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import docker
import pytest

from tests.support import debian_image
from tests.support.cluster import Cluster
from tests.support.config import ConfigDir
from tests.support.dockerd import PrivateDockerd
from tests.support.healerd_process import Healerd
from tests.support.polling import WaitTimeout, wait_for

PROJECT = "edge"
TOPIC = "edge/readings"
MESSAGES = 100  # half published while the subscriber is down, half once it is back
NGINX_BACK_WITHIN = 5.0  # seconds from the kill of api (issue 28)
# A replacement started right after the old container's death races the engine's release
# of the old address (dockerd 20.10 hands out the lowest free one): it often gets that
# address back, and nginx then answers by luck. So api crashes several times, each after
# it ran past its restart `window` (so that each is healed at once, with no crash-loop
# backoff), and nginx must answer again after every one. Starting the same container
# again waits for that release and gets the address back every time.
API_CRASHES = 5
API_WINDOW = 1.0

MOSQUITTO_CONF = """\
listener 1883
allow_anonymous true
persistence false
log_dest stderr
log_type error
log_type warning
log_type notice
log_type information
log_type subscribe
connection_messages true
"""

# `api` is resolved once, when nginx starts (no `resolver`): as nginx is usually run.
NGINX_CONF = """\
worker_processes 1;
pid /tmp/nginx.pid;
error_log stderr;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path /tmp/body;
    proxy_temp_path /tmp/proxy;
    fastcgi_temp_path /tmp/fastcgi;
    uwsgi_temp_path /tmp/uwsgi;
    scgi_temp_path /tmp/scgi;
    server {
        listen 8080;
        location / {
            proxy_pass http://api:8000/;
            proxy_connect_timeout 1s;
        }
    }
}
"""

# The client id is the container's host name, its session persistent (-c) at QoS 1, its
# subscription shared ($share/GROUP/...): a common pattern for a pool of workers. `$$` is
# Compose's escape for a `$`. The loop retries until the broker answers.
SUBSCRIBE = (
    f"until mosquitto_sub -h broker -i \"$$(hostname)\" -c -q 1 -t '$$share/workers/{TOPIC}';"
    " do sleep 0.2; done"
)

# The proxied service: busybox's httpd, serving one page.
SERVE = "mkdir -p /www && echo api-ok > /www/index.html && exec busybox httpd -f -p 8000 -h /www"


def stack(image: str) -> str:
    def cmd(*argv: str) -> str:
        return json.dumps(list(argv))

    return f"""\
configs:
  mosquitto_conf: {{file: ./mosquitto.conf}}
  nginx_conf: {{file: ./nginx.conf}}
services:
  broker:
    image: {image}
    command: {cmd("mosquitto", "-c", "/etc/mosquitto/edge.conf")}
    configs: [{{source: mosquitto_conf, target: /etc/mosquitto/edge.conf}}]
    stop_grace_period: 1s
  subscriber:
    image: {image}
    command: {cmd("sh", "-c", SUBSCRIBE)}
    depends_on: [broker]
    stop_grace_period: 1s
  api:
    image: {image}
    command: {cmd("sh", "-c", SERVE)}
    restart_policy: {{window: {API_WINDOW:g}s}}
    stop_grace_period: 1s
  web:
    image: {image}
    command: {cmd("nginx", "-c", "/etc/nginx/edge.conf", "-g", "daemon off;")}
    configs: [{{source: nginx_conf, target: /etc/nginx/edge.conf}}]
    depends_on: [api]
    ports: [{{target: 8080, host_ip: 127.0.0.1}}]
    stop_grace_period: 1s
"""


@pytest.fixture(scope="module")
def debian(dockerd: PrivateDockerd) -> str:
    """The stack's image in the private engine: debootstrap once per machine (cached),
    an import of the cached rootfs per test run."""
    api = dockerd.client(timeout=300)
    t0 = time.monotonic()
    try:
        ref = debian_image.build(api)
    finally:
        api.close()
    print(f"{ref} ready in {time.monotonic() - t0:.1f}s")
    return ref


@pytest.fixture
def edge(
    debian: str,
    config: ConfigDir,
    healerd: Healerd,
    cluster: Cluster,
    api: docker.APIClient,
    forwarding: Callable[[docker.APIClient, str], None],
) -> None:
    """The stack, running under healerd: every service converged (each test then waits
    for what it needs: the subscriber subscribed, nginx answering)."""
    (config.conf_d / "mosquitto.conf").write_text(MOSQUITTO_CONF)
    (config.conf_d / "nginx.conf").write_text(NGINX_CONF)
    config.write(f"{PROJECT}.yaml", stack(debian))
    healerd.start()
    # The private engine runs without iptables: let the containers reach each other.
    wait_for("the project network", lambda: api.inspect_network(f"{PROJECT}_default"))
    forwarding(api, f"{PROJECT}_default")
    wait_for(
        "the stack running",
        lambda: all(cluster.converged(s, 1) for s in ("broker", "subscriber", "api", "web")),
        timeout=60,
        interval=0.1,
    )


# -- what the tests look at -----------------------------------------------------------------


def only(cluster: Cluster, service: str) -> dict[str, Any] | None:
    """The service's one container, running (from one list call)."""
    cs = cluster.running(service)
    return cs[0] if len(cs) == 1 else None


def new_run(
    api: docker.APIClient, cluster: Cluster, service: str, before: dict[str, Any]
) -> dict[str, Any] | None:
    """The service's one running container (inspected), if it is not the run that
    `before` inspected: the same container started again, or another one."""
    c = only(cluster, service)
    if c is None:
        return None
    info: dict[str, Any] = api.inspect_container(c["Id"])
    same = info["Id"] == before["Id"] and info["State"]["StartedAt"] == before["State"]["StartedAt"]
    return None if same or not info["State"]["Running"] else info


def describe(api: docker.APIClient, cluster: Cluster, service: str) -> str:
    """One line per container of the service (history too): what changed in a heal."""
    lines = []
    for c in cluster.containers(service, history=True):
        info = api.inspect_container(c["Id"])
        nets = info["NetworkSettings"]["Networks"] or {}
        ip = (nets.get(f"{PROJECT}_default") or {}).get("IPAddress")
        state = info["State"]
        lines.append(
            f"  {info['Id'][:12]} hostname={info['Config']['Hostname']} ip={ip}"
            f" status={state['Status']} exit={state['ExitCode']}"
            f" started={state['StartedAt']} restarts={info['RestartCount']}"
        )
    return f"{service}:\n" + "\n".join(lines)


def logs(api: docker.APIClient, cluster: Cluster, service: str) -> str:
    """The output of every run of every container of the service (an engine keeps a
    container's log across its runs; a replaced container stays, as history)."""
    return "".join(
        api.logs(c["Id"], stdout=True, stderr=True).decode(errors="replace")
        for c in cluster.containers(service, history=True)
    )


def exec_in(api: docker.APIClient, container: str, *argv: str) -> str:
    run = api.exec_create(container, list(argv))["Id"]
    out = api.exec_start(run).decode(errors="replace")
    code = api.exec_inspect(run)["ExitCode"]
    if code != 0:
        raise AssertionError(f"{argv[0]} in {container[:12]} exited {code}: {out}")
    return str(out)


def publish(api: docker.APIClient, cluster: Cluster, *messages: str) -> None:
    """Publish each message at QoS 1 from inside the broker's container (one client)."""
    broker = only(cluster, "broker")
    assert broker is not None, describe(api, cluster, "broker")
    script = f'printf "%s\\n" "$@" | mosquitto_pub -h 127.0.0.1 -q 1 -t {TOPIC} -l'
    exec_in(api, broker["Id"], "sh", "-c", script, "publish", *messages)


def received(api: docker.APIClient, cluster: Cluster) -> set[str]:
    return set(logs(api, cluster, "subscriber").split())


def delivered(api: docker.APIClient, cluster: Cluster, tag: str, timeout: float) -> None:
    """Publish probes until the subscriber receives one: it is connected and subscribed.
    (Probes do not count: a probe that a stale session takes is just lost.)"""
    sent: list[str] = []

    def one_arrived() -> bool:
        sent.append(f"{tag}-{len(sent)}")
        publish(api, cluster, sent[-1])
        return bool(received(api, cluster) & set(sent))

    wait_for(f"the subscriber to receive a probe ({tag})", one_arrived, timeout, 0.2)


def http_status(port: int) -> int | str:
    """The status of GET / through nginx, or what went wrong."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=3) as r:
            return int(r.status) if b"api-ok" in r.read() else f"{r.status}, not api's page"
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:
        return repr(e)


def healerd_tail(healerd: Healerd) -> str:
    return "--- healerd log tail ---\n" + healerd.log(since_start=False)[-2500:]


# -- the tests --------------------------------------------------------------------------------


def test_no_message_lost_when_the_subscriber_crashes(
    edge: None, healerd: Healerd, cluster: Cluster, api: docker.APIClient
) -> None:
    """Every message published after the subscriber's crash reaches it: the ones sent
    while it was down (queued in its persistent session) and the ones sent once it was
    back. A replacement's new host name is a new client id: the old session stays in the
    shared subscription and takes about every second message."""
    delivered(api, cluster, "warmup", timeout=30)
    sub = only(cluster, "subscriber")
    assert sub is not None
    before = api.inspect_container(sub["Id"])
    os.kill(before["State"]["Pid"], signal.SIGKILL)
    half = MESSAGES // 2
    publish(api, cluster, *(f"m-{i}" for i in range(half)))
    after = wait_for(
        "the subscriber healed",
        lambda: new_run(api, cluster, "subscriber", before),
        timeout=30,
        interval=0.05,
    )
    assert after is not None
    delivered(api, cluster, "back", timeout=30)
    publish(api, cluster, *(f"m-{i}" for i in range(half, MESSAGES)))
    expected = {f"m-{i}" for i in range(MESSAGES)}
    try:
        wait_for("every message", lambda: expected <= received(api, cluster), timeout=10)
    except WaitTimeout:
        missing = sorted(expected - received(api, cluster), key=lambda m: int(m[2:]))
        raise AssertionError(loss_report(api, cluster, healerd, missing, before, after)) from None


def loss_report(
    api: docker.APIClient,
    cluster: Cluster,
    healerd: Healerd,
    missing: list[str],
    before: dict[str, Any],
    after: dict[str, Any],
) -> str:
    half = MESSAGES // 2
    hint = (
        "the subscriber came back under a new host name, so as a new MQTT client: its old"
        " persistent session still holds a share of the subscription and queues what it"
        " gets for a client that never returns\n"
        if after["Config"]["Hostname"] != before["Config"]["Hostname"]
        else ""
    )
    return (
        f"{len(missing)} of {MESSAGES} messages published after the crash were lost"
        f" ({sum(int(m[2:]) < half for m in missing)} of the {half} sent while the"
        f" subscriber was down): {' '.join(missing)}\n"
        f"subscriber before the crash: {before['Id'][:12]}"
        f" hostname={before['Config']['Hostname']}; after: {after['Id'][:12]}"
        f" hostname={after['Config']['Hostname']}\n{hint}"
        f"{describe(api, cluster, 'subscriber')}\n"
        f"--- broker log tail ---\n{logs(api, cluster, 'broker')[-2500:]}\n"
        f"{healerd_tail(healerd)}"
    )


def test_nginx_answers_again_soon_after_the_proxied_service_crashes(
    edge: None, healerd: Healerd, cluster: Cluster, api: docker.APIClient
) -> None:
    """nginx proxies to `api` by the address it resolved at its start: it answers again
    within 5 s of each of api's crashes only if api comes back at that address."""
    web = only(cluster, "web")
    assert web is not None
    ports = api.inspect_container(web["Id"])["NetworkSettings"]["Ports"]
    port = int(ports["8080/tcp"][0]["HostPort"])
    wait_for("nginx answering through the proxy", lambda: http_status(port) == 200, timeout=20)
    for crash in range(1, API_CRASHES + 1):
        took = crash_api(api, cluster, healerd, port, crash)
        print(f"crash {crash}: nginx answered again {took:.2f}s after api's crash")
    print(describe(api, cluster, "api"))


def crash_api(
    api: docker.APIClient, cluster: Cluster, healerd: Healerd, port: int, crash: int
) -> float:
    """Kill api's PID 1 from the host once it ran past its restart window (so that the
    crash is healed at once, with no backoff), and return how long nginx took to answer
    200 again from api's next run."""
    running = wait_for("api running", lambda: only(cluster, "api"), timeout=10)
    assert running is not None
    before = api.inspect_container(running["Id"])
    started = datetime.fromisoformat(before["State"]["StartedAt"][:26]).replace(tzinfo=UTC)
    wait_for(
        "api to run past its restart window",
        lambda: (datetime.now(UTC) - started).total_seconds() > API_WINDOW + 0.2,
        timeout=API_WINDOW + 5,
    )
    seen: list[tuple[float, int | str]] = []

    def answers_from_a_new_run() -> bool:
        if new_run(api, cluster, "api", before) is None:
            return False  # not healed yet (or the old process, not yet dead)
        seen.append((time.monotonic() - t_kill, http_status(port)))
        return seen[-1][1] == 200

    t_kill = time.monotonic()
    os.kill(before["State"]["Pid"], signal.SIGKILL)
    try:
        wait_for("nginx to answer", answers_from_a_new_run, NGINX_BACK_WITHIN, interval=0.05)
    except WaitTimeout:
        statuses = ", ".join(f"{t:.2f}s: {s}" for t, s in seen[-8:]) or "api not healed yet"
        address = before["NetworkSettings"]["Networks"][f"{PROJECT}_default"]["IPAddress"]
        raise AssertionError(
            f"crash {crash} of {API_CRASHES}: nginx did not answer 200 within"
            f" {NGINX_BACK_WITHIN:g}s of api's crash (answers: {statuses};"
            f" and now: {http_status(port)})\n"
            f"api before the crash: {before['Id'][:12]} ip={address}\n"
            f"{describe(api, cluster, 'api')}\n"
            f"--- nginx log tail ---\n{logs(api, cluster, 'web')[-1500:]}\n"
            f"{healerd_tail(healerd)}"
        ) from None
    return seen[-1][0]
