"""Compose's links, fixed addresses, network priority, ipam and network_mode
service:/container: (issue 16): read as Compose reads them, refused with file, line and
field when wrong, and the endpoint requests the engine gets."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from healerd.config import parse_service_text
from healerd.engine.docker import DockerEngine, request
from healerd.model import Dependency, IpamPool, NetworkEndpoint, ServiceSpec
from tests.unit.harness.documents import STACK


def load(text: str = STACK) -> dict[str, ServiceSpec]:
    result = parse_service_text(textwrap.dedent(text), "stack.yaml", env={})
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None
    return result.services


def errors(text: str) -> list[str]:
    return [str(e) for e in parse_service_text(textwrap.dedent(text), "stack.yaml", env={}).errors]


def test_fixed_addresses_priority_and_ipam_are_read_as_compose_reads_them() -> None:
    db = load()["db"]
    # default has the higher priority: it is joined first (the container is created on it).
    assert db.networks == ("iot_default", "iot_back")
    assert db.network_endpoints == (
        NetworkEndpoint("iot_back", "10.77.0.10", "fd00:77::10", ("169.254.8.8",)),
    )
    (back,) = [n for n in db.networks_to_create if n.key == "back"]
    assert back.enable_ipv6 and back.ipam_driver == "default"
    assert back.ipam_pools == (
        IpamPool("10.77.0.0/24", "10.77.0.128/25", "10.77.0.1"),
        IpamPool("fd00:77::/64"),
    )
    assert request.ipam(back) == {
        "Driver": "default",
        "Config": [
            {"Subnet": "10.77.0.0/24", "IPRange": "10.77.0.128/25", "Gateway": "10.77.0.1"},
            {"Subnet": "fd00:77::/64"},
        ],
        "Options": None,
    }
    assert request.endpoint(db, "iot_back") == {
        "aliases": ["db"],
        "ipv4_address": "10.77.0.10",
        "ipv6_address": "fd00:77::10",
        "link_local_ips": ["169.254.8.8"],
    }
    assert request.endpoint(db, "iot_default") == {"aliases": ["db"]}


def test_without_priorities_networks_keep_their_order_and_hash() -> None:
    text = "services:\n  w:\n    image: busybox\n    networks: [b, a]\n"
    plain = load(text)["w"]
    with_null = load(
        "services:\n  w:\n    image: busybox\n    networks: {b: , a: {priority: 0}}\n"
    )["w"]
    assert plain.networks == ("a", "b") == with_null.networks
    assert plain.spec_hash == with_null.spec_hash


def test_links_become_endpoint_links_and_a_dependency() -> None:
    specs = load()
    web = specs["web"]
    assert web.links == (("db", "db"), ("db", "database"))
    assert web.depends_on == (Dependency("db"),)  # once, though both name it
    assert request.endpoint(web, "iot_default") == {
        "aliases": ["web"],
        "links": [("db", "db"), ("db", "database")],
    }
    assert request.endpoint(web, "bridge") == {}
    text = "services:\n  a:\n    image: busybox\n    links: [b]\n  b:\n    image: busybox\n"
    assert load(text)["a"].depends_on == (Dependency("b"),)


def test_network_mode_service_and_container_are_accepted_with_a_dependency() -> None:
    specs = load()
    side, peer = specs["side"], specs["peer"]
    assert (side.network_mode, side.networks, side.depends_on) == (
        "service:db",
        (),
        (Dependency("db"),),
    )
    assert (peer.network_mode, peer.depends_on) == ("container:legacy-vpn", ())
    assert request.shared_network(side) == "db" and request.shared_network(peer) is None
    assert request.network_mode(peer) == "container:legacy-vpn"


class _Api:
    """The SDK's own request builders, with a canned container list."""

    def __init__(self, running: list[dict[str, Any]]) -> None:
        docker = pytest.importorskip("docker")
        self._real = docker.APIClient(base_url="unix:///nonexistent.sock", version="1.41")
        self.running = running
        self.filters: list[Any] = []

    def containers(self, **kwargs: Any) -> list[dict[str, Any]]:
        self.filters.append(kwargs.get("filters"))
        return self.running

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _engine(running: list[dict[str, Any]]) -> tuple[DockerEngine, _Api]:
    engine = DockerEngine("unix:///nonexistent.sock")
    api = _Api(running)
    engine._client.api = api
    engine._client.api_version = "1.41"  # negotiated: the canned list answers no /version
    return engine, api


def test_service_network_mode_joins_the_oldest_running_container() -> None:
    rows = [
        {"Id": "b" * 64, "Created": 20, "State": "running"},
        {"Id": "a" * 64, "Created": 10, "State": "running"},
        {"Id": "c" * 64, "Created": 5, "State": "exited"},  # older, but not running
    ]
    engine, api = _engine(rows)
    assert engine._network_mode(load()["side"]) == f"container:{'a' * 64}"
    assert api.filters == [{"label": "io.healerd.service=db"}]
    engine, _ = _engine([])
    with pytest.raises(Exception, match="no container of db is running yet"):
        engine._network_mode(load()["side"])


def _copy_and_original(labels: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two running rows of service db with `labels`: an older copy, then db-x-y."""
    copy = {
        "Id": "f" * 64,
        "Created": 2_000_000_000,
        "Names": ["/db-copy"],
        "Image": "busybox",
        "State": "running",
        "Labels": labels,
    }
    return copy, {**copy, "Id": "a" * 64, "Created": 2_000_000_100, "Names": ["/db-x-y"]}


def test_service_network_mode_never_joins_a_container_that_does_not_verify() -> None:
    """Review: the oldest running container labelled with the service was joined, signed
    or not (a `docker commit` copy, or labels made up by hand)."""
    from healerd.core.signing import HostKey, sign

    forged, real = _copy_and_original({"io.healerd.service": "db"})
    engine, _ = _engine([forged, real])
    sign(engine, HostKey(b"s" * 32, born=1_900_000_000.0), lambda: 0.0)
    with pytest.raises(Exception, match="no container of db is running yet"):
        engine._network_mode(load()["side"])


def test_the_sdk_takes_the_endpoints() -> None:
    engine, _ = _engine([])
    specs = load()
    config = engine._endpoints(specs["db"], ["iot_back"])
    endpoint = config["EndpointsConfig"]["iot_back"]
    assert endpoint["IPAMConfig"] == {
        "IPv4Address": "10.77.0.10",
        "IPv6Address": "fd00:77::10",
        "LinkLocalIPs": ["169.254.8.8"],
    }
    config = engine._endpoints(specs["web"], ["iot_default"])
    assert config["EndpointsConfig"]["iot_default"]["Links"] == ["db:database", "db:db"]


def test_the_list_call_shows_whose_network_a_container_joined() -> None:
    from healerd.engine.docker.listing import observed as _observed

    raw = {"Id": "c" * 64, "Names": ["/x"], "Labels": {}, "State": "running", "Status": "Up"}
    assert (
        _observed({**raw, "HostConfig": {"NetworkMode": "container:" + "a" * 64}}).network_of
        == "a" * 64
    )
    assert _observed({**raw, "HostConfig": {"NetworkMode": "iot_default"}}).network_of == ""
    assert _observed(raw).network_of == ""


NET = (
    "networks:\n  back:\n    ipam: {config: [{subnet: 10.77.0.0/24}]}\n"
    "services:\n  w:\n    image: busybox\n"
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (NET + "    networks: {back: {ipv4_address: 10.77.0.300}}\n",
         "7:23: services.w.networks.back.ipv4_address: '10.77.0.300' is not an IPv4 address"),
        (NET + "    networks: {back: {ipv4_address: 10.78.0.2}}\n",
         "services.w.networks.back.ipv4_address: 10.78.0.2 is in none of network 'back'"),
        (NET + "    networks: {back: {ipv6_address: 'fd00::2'}}\n",
         "services.w.networks.back.ipv6_address: network 'back' has no enable_ipv6: true"),
        (NET + "    replicas: 2\n    networks: {back: {ipv4_address: 10.77.0.2}}\n",
         "services.w.networks.back.ipv4_address: a fixed address allows only one replica"),
        (NET + "    networks: {back: {ipv4_address: 10.77.0.2}}\n  v:\n    image: busybox\n"
         "    networks: {back: {ipv4_address: 10.77.0.2}}\n",
         "services.v.networks: 10.77.0.2 on stack_back is also service 'w''s: two"),
        (NET + "    networks: {back: {priority: high}}\n",
         "services.w.networks.back.priority: must be a whole number"),
        (NET + "    networks: {back: {link_local_ips: [x]}}\n",
         "services.w.networks.back.link_local_ips[0]: 'x' is not an IP address"),
        (NET + "    networks: {back: {mac_address: x}}\n",
         "services.w.networks.back.mac_address: 'mac_address' is not supported"),
        ("networks:\n  n: {}\nservices:\n  w:\n    image: busybox\n"
         "    networks: {n: {ipv4_address: 10.0.0.2}}\n",
         "network 'n' declares no IPv4 subnet (ipam.config.subnet)"),
        ("networks:\n  n: {ipam: {config: [{gateway: 10.0.0.1}]}}\nservices: {}\n",
         "networks.n.ipam.config[0].subnet: is required"),
        ("networks:\n  n: {ipam: {config: [{subnet: 10.0.0.0/8, gateway: 11.0.0.1}]}}\n"
         "services: {}\n",
         "networks.n.ipam.config[0].gateway: 11.0.0.1 is not inside subnet 10.0.0.0/8"),
        ("networks:\n  n: {ipam: {config: [{subnet: ten}]}}\nservices: {}\n",
         "networks.n.ipam.config[0].subnet: 'ten' is not a network"),
        ("networks:\n  n: {ipam: {opts: {}}}\nservices: {}\n",
         "networks.n.ipam.opts: 'opts' is not supported (driver, config, options)"),
        ("networks:\n  n: {enable_ipv6: yes please}\nservices: {}\n",
         "networks.n.enable_ipv6: must be true or false"),
        ("services:\n  w:\n    image: busybox\n    links: [nope]\n",
         "4:5: services.w.links: names service 'nope', which this file does not declare"),
        ("services:\n  w:\n    image: busybox\n    links: [w]\n",
         "services.w.links: service 'w' cannot use itself here"),
        ("services:\n  w:\n    image: busybox\n    links: db\n",
         "services.w.links: must be a list of SERVICE or SERVICE:ALIAS"),
        ("services:\n  w:\n    image: busybox\n    links: ['a:b:c']\n",
         "services.w.links[0]: 'a:b:c' is not SERVICE or SERVICE:ALIAS"),
        ("services:\n  w:\n    image: busybox\n    network_mode: 'service:'\n",
         "services.w.network_mode: 'service:': service:NAME needs the name of a service"),
        ("services:\n  w:\n    image: busybox\n    network_mode: service:nope\n",
         "services.w.network_mode: names service 'nope', which this file does not declare"),
        ("services:\n  w:\n    image: busybox\n    network_mode: container:x\n    ports: ['80']\n",
         "services.w.ports: cannot be combined with network_mode container:x"),
        ("services:\n  w:\n    image: busybox\n    network_mode: container:x\n    hostname: h\n",
         "services.w.hostname: cannot be combined with network_mode container:x"),
    ],
)  # fmt: skip
def test_a_wrong_network_setting_is_refused_with_file_line_and_field(
    text: str, message: str
) -> None:
    found = errors(text)
    assert any(message in e for e in found), found


def test_a_cycle_through_links_is_an_error() -> None:
    text = "services:\n  a:\n    image: busybox\n    links: [b]\n"
    text += "  b:\n    image: busybox\n    depends_on: [a]\n"
    assert any("depends_on makes a cycle" in e for e in errors(text)), errors(text)


def test_the_exports_carry_them_or_report_them_lost(tmp_path: Any) -> None:
    import yaml

    from healerd.cli.export import compose as export_compose
    from healerd.cli.export import kubernetes as export_kubernetes
    from healerd.cli.export import swarm as export_swarm
    from healerd.cli.export.common import Options

    (tmp_path / "pw").write_text("x\n")
    text = (
        STACK + "    secrets: [pw]\n    gpus: all\n" + f"secrets:\n  pw: {{file: {tmp_path}/pw}}\n"
    )
    specs = list(load(text).values())
    compose = export_compose.render(specs, Options())
    doc = yaml.safe_load(compose.text)
    assert doc["services"]["web"]["links"] == ["db", "db:database"]
    assert doc["services"]["db"]["networks"]["iot_back"]["ipv4_address"] == "10.77.0.10"
    assert doc["services"]["peer"]["secrets"] == [{"source": "pw", "target": "/run/secrets/pw"}]
    assert doc["secrets"] == {"pw": {"file": f"{tmp_path}/pw"}}
    devices = doc["services"]["peer"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"capabilities": ["gpu"], "count": "all"}]
    swarm = export_swarm.render(specs, Options())
    assert yaml.safe_load(swarm.text)["services"]["peer"]["secrets"]
    lost = {(x.service, x.field) for x in swarm.losses}
    assert {("web", "links"), ("db", "networks"), ("peer", "gpus")} <= lost
    k8s = export_kubernetes.render(specs, Options())
    lost = {(x.service, x.field) for x in k8s.losses}
    assert {("web", "links"), ("db", "networks"), ("peer", "gpus"), ("peer", "secrets")} <= lost


IPAM_MORE = """\
services:
  cam:
    image: busybox
    networks: [lan]
networks:
  lan:
    ipam:
      driver: default
      options: {com.example.pool: edge}
      config:
        - subnet: 192.168.50.0/24
          gateway: 192.168.50.1
          aux_addresses: {router: 192.168.50.2, printer: 192.168.50.3}
"""


def test_ipam_options_and_aux_addresses_reach_the_engine_as_docker_compose_sends_them() -> None:
    """docker-compose 1.29.2 builds the request with the SDK's IPAMConfig and IPAMPool
    (compose/network.py, create_ipam_config_from_dict): the same, bar its empty keys."""
    import docker.types

    (lan,) = [n for n in load(IPAM_MORE)["cam"].networks_to_create if n.key == "lan"]
    oracle = docker.types.IPAMConfig(
        driver="default",
        pool_configs=[
            docker.types.IPAMPool(
                subnet="192.168.50.0/24",
                gateway="192.168.50.1",
                aux_addresses={"router": "192.168.50.2", "printer": "192.168.50.3"},
            )
        ],
        options={"com.example.pool": "edge"},
    )
    oracle["Config"] = [{k: v for k, v in p.items() if v is not None} for p in oracle["Config"]]
    assert request.ipam(lan) == dict(oracle)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("router: 192.168.50.2", "router: 10.0.0.2"),
        ("{com.example.pool: edge}", "[edge]"),
    ],
)
def test_wrong_ipam_options_and_aux_addresses_are_refused(change: str, message: str) -> None:
    found = errors(IPAM_MORE.replace(change, message))
    expected = "aux_addresses.router: '10.0.0.2' is not an address inside subnet 192.168.50.0/24"
    assert any((expected if "router" in message else "ipam.options: must map") in e for e in found)


def test_service_network_mode_keeps_the_report_of_unverified_stopped_containers() -> None:
    """Review: its look at the running containers only replaced the service's report of
    unverified ones: a stopped one dropped from `healerctl status`, told again later."""
    from healerd.core.signing import HostKey, sign
    from healerd.engine.docker.listing import observed

    told: list[str] = []
    stopped = {
        "Id": "e" * 64,
        "Created": 2_000_000_000,
        "Names": ["/db-copy"],
        "Image": "busybox",
        "State": "exited",
        "Labels": {"io.healerd.service": "db"},
    }
    engine, _ = _engine([stopped])
    key = HostKey(b"s" * 32, born=1_900_000_000.0)
    signer = sign(engine, key, lambda: 0.0, lambda u: told.append(u.id))
    signer.mine([observed(stopped)], "db")  # a full list of db (list_managed)
    with pytest.raises(Exception, match="no container of db is running yet"):
        engine._network_mode(load()["side"])
    assert [u.id for u in signer.unverified()] == ["e" * 64], "dropped from the report"
    signer.mine([observed(stopped)], "db")
    assert told == ["e" * 64], "told once"


def test_service_network_mode_joins_the_signed_one_past_an_older_copy() -> None:
    import dataclasses

    from healerd.core.signing import HostKey, sign

    key = HostKey(b"s" * 32, born=1_900_000_000.0)
    engine, _ = _engine([])
    labels = sign(engine, key, lambda: 0.0).labels(
        dataclasses.replace(load()["db"], image="busybox"), "db-x-y", {}
    )
    forged, real = _copy_and_original(labels)
    engine, _ = _engine([forged, real])
    sign(engine, key, lambda: 0.0)
    assert engine._network_mode(load()["side"]) == f"container:{'a' * 64}"
