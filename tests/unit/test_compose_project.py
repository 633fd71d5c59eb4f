"""A service file is a Compose project (issue 16): project name, default network, declared
networks and volumes, aliases, and the names a file does not declare."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from healerd.config import parse_service_text
from healerd.config.project import default_name
from healerd.model import NetworkDecl, ServiceSpec, VolumeDecl, VolumeSpec


def specs(text: str, file: str = "conf.d/Home_Lab.yaml") -> dict[str, ServiceSpec]:
    result = parse_service_text(textwrap.dedent(text), file, env={})
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None
    return result.services


def errors(text: str) -> list[str]:
    return [str(e) for e in parse_service_text(textwrap.dedent(text), "p.yaml", env={}).errors]


@pytest.mark.parametrize(
    ("file", "name"),
    [("conf.d/Home_Lab.yaml", "home_lab"), ("iot stack.yaml", "iotstack"), ("_x.yml", "x")],
)
def test_the_project_is_named_after_the_file_as_compose_names_it(file: str, name: str) -> None:
    assert default_name(file) == name


def test_a_service_joins_the_default_network_with_its_name_as_alias() -> None:
    (web,) = specs("services:\n  web:\n    image: busybox\n").values()
    assert web.project == "home_lab" and web.networks == ("home_lab_default",)
    assert web.networks_to_create == (NetworkDecl("home_lab_default", "home_lab", "default"),)


def test_declared_networks_and_volumes_get_project_names_and_are_made() -> None:
    s = specs(
        """\
        name: iot
        version: "3.8"
        services:
          broker:
            image: eclipse-mosquitto:2
            networks:
              default:
              back: {aliases: [mqtt, mosquitto]}
              legacy:
            volumes: [data:/mosquitto/data, shared:/s, /srv/cfg:/cfg]
          host:
            image: busybox
            network_mode: host
        networks:
          back: {internal: true, labels: {tier: back}}
          outside: {external: true}
        volumes:
          data:
          shared: {external: true, name: nas-share}
        """
    )
    broker, host = s["broker"], s["host"]
    assert broker.networks == ("iot_back", "iot_default", "legacy")  # legacy: as named
    assert broker.network_aliases == (("iot_back", ("mqtt", "mosquitto")),)
    made = {n.name: n for n in broker.networks_to_create}
    assert sorted(made) == ["iot_back", "iot_default"]  # never `outside` or `legacy`
    assert made["iot_back"].internal and made["iot_back"].labels == (("tier", "back"),)
    assert broker.volumes == (
        VolumeSpec("iot_data", "/mosquitto/data"),
        VolumeSpec("nas-share", "/s"),
        VolumeSpec("/srv/cfg", "/cfg"),
    )
    assert broker.volumes_to_create == (VolumeDecl("iot_data", "iot", "data"),)
    assert host.networks == () and host.networks_to_create == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: Shop\nservices: {}\n", "p.yaml:1:1: name: 'Shop' is not a project name"),
        ("networks:\n  n: {ipam: []}\nservices: {}\n", "networks.n.ipam: must be a mapping"),
        ("volumes:\n  v: [a]\nservices: {}\n", "volumes.v: must be a mapping (or empty)"),
        ("networks: [a]\nservices: {}\n", "networks: must map names to their settings"),
        ("configs: []\nservices: {}\n", "configs: must map names to their settings"),
        (
            "services:\n  s:\n    image: busybox\n    networks:\n      n: {aliases: x}\n",
            "services.s.networks.n.aliases: must be a list of names",
        ),
    ],
)
def test_wrong_declarations_are_refused_with_file_line_and_field(text: str, message: str) -> None:
    found = errors(text)
    assert any(message in e for e in found), found


def test_build_alone_is_tagged_project_dash_service_and_ssh_is_refused(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM busybox\n")
    from healerd.config import parse_service_text

    found = parse_service_text("services:\n  app:\n    build: .\n", str(tmp_path / "p.yaml"))
    assert found.services is not None
    assert found.services["app"].image == "p-app"
    bad = parse_service_text(
        "services:\n  app:\n    build: {context: ., ssh: [default]}\n", str(tmp_path / "p.yaml")
    )
    assert [e.field for e in bad.errors] == ["services.app.build.ssh"]
    assert "BuildKit" in bad.errors[0].reason


def test_a_single_file_includes_another_project(tmp_path: Path) -> None:
    """Issue 34: include works in a conf.d file too, its paths from the file's directory."""
    from healerd.config import load_service_file

    (tmp_path / "broker").mkdir()
    (tmp_path / "broker" / "compose.yaml").write_text(
        "services:\n  mqtt:\n    image: busybox\n    env_file: [mqtt.env]\n"
    )
    (tmp_path / "broker" / "mqtt.env").write_text("A=1\n")
    main = tmp_path / "site.yaml"
    main.write_text("include: [broker/compose.yaml]\nservices:\n  web:\n    image: busybox\n")
    result = load_service_file(main)
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None and set(result.services) == {"web", "mqtt"}
    assert result.services["mqtt"].env_files == (str(tmp_path / "broker" / "mqtt.env"),)
    assert str(tmp_path / "broker" / "compose.yaml") in result.sources
    missing = parse_service_text("include: [other.yml]\nservices: {}\n", "i.yaml", env={})
    assert missing.services is None and "does not exist" in missing.errors[0].reason
