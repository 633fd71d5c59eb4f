"""Legacy Compose spellings (issue 34, point 4; docs/reference/compose.md "Legacy
spellings"): `external: {name: X}` taken as Compose takes it, with `docker-compose
config` (1.29.2, no engine needed) as the oracle where it is installed; format 1 and its
keys refused, naming what to write instead."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from healerd.config import parse_service_text
from healerd.model import ServiceSpec
from tests.unit.harness.documents import validator as validator_of_the_shipped_schema

LEGACY_EXTERNAL = """\
version: "3.4"
services:
  web:
    image: busybox
    networks: [backend]
    volumes: ["data:/data"]
  proxy:
    image: busybox
networks:
  default:
    external:
      name: shared_proxy
  backend:
    external:
      name: real_backend
volumes:
  data:
    external: {name: real_data}
"""


def specs(text: str) -> dict[str, ServiceSpec]:
    result = parse_service_text(textwrap.dedent(text), "legacy.yaml", env={})
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None
    return result.services


def errors(text: str) -> list[str]:
    result = parse_service_text(textwrap.dedent(text), "legacy.yaml", env={})
    return [str(e) for e in result.errors]


def test_external_name_names_an_existing_network_or_volume() -> None:
    s = specs(LEGACY_EXTERNAL)
    assert s["web"].networks == ("real_backend",)
    assert s["proxy"].networks == ("shared_proxy",)  # the default network, external
    assert [v.source for v in s["web"].volumes] == ["real_data"]
    # External: used as it is, never created.
    assert not s["web"].networks_to_create and not s["web"].volumes_to_create
    assert not s["proxy"].networks_to_create


def test_the_schema_takes_the_legacy_external_too() -> None:
    validator = validator_of_the_shipped_schema()
    assert list(validator.iter_errors(yaml.safe_load(LEGACY_EXTERNAL))) == []
    wrong = yaml.safe_load(LEGACY_EXTERNAL.replace("{name: real_data}", "{driver: local}"))
    assert list(validator.iter_errors(wrong))


def test_external_mapping_without_a_name_is_external_under_its_key() -> None:
    s = specs(
        """\
        services: {web: {image: busybox, networks: [edge], volumes: ["data:/d"]}}
        networks: {edge: {external: {}}}
        volumes: {data: {name: kept, external: {name: kept}}}
        """
    )
    assert s["web"].networks == ("edge",) and not s["web"].networks_to_create
    assert [v.source for v in s["web"].volumes] == ["kept"] and not s["web"].volumes_to_create


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("{name: a, external: {name: b}}", "volumes.data.external.name: 'b' differs from name 'a'"),
        ("{external: {name: ''}}", "volumes.data.external.name: must be a name"),
        ("{external: {driver: local}}", "external takes only name"),
        ("{external: maybe}", "volumes.data.external: must be true or false"),
    ],
)
def test_a_wrong_external_mapping_is_an_error(body: str, expected: str) -> None:
    found = errors(f"services: {{web: {{image: busybox}}}}\nvolumes: {{data: {body}}}\n")
    assert any(expected in e for e in found), found


def test_format_one_is_refused_pointing_at_services() -> None:
    found = errors("web:\n  image: busybox\n  net: host\ndb:\n  build: .\n")
    assert len(found) == 2, found
    assert found[0].startswith("legacy.yaml:1:1: web: a service at the top level is Compose")
    assert "put the services under services:" in found[0] and "db:" in found[1]


@pytest.mark.parametrize(
    ("key", "value", "write"),
    [
        ("net", "host", "write network_mode"),
        ("log_driver", "syslog", "write logging: {driver: ...}"),
        ("log_opt", "{tag: x}", "write logging: {options: ...}"),
        ("volume_driver", "local", "top-level volumes (driver: ...)"),
        ("dockerfile", "Dockerfile.dev", "write build: {dockerfile: ...}"),
    ],
)
def test_format_one_keys_beside_services_name_the_key_to_write(
    key: str, value: str, write: str
) -> None:
    (found,) = errors(f"services:\n  web:\n    image: busybox\n    {key}: {value}\n")
    assert f"services.web.{key}: is" in found and write in found, found
    assert "unknown key" not in found


@pytest.mark.parametrize(
    ("policy", "restart"),
    [
        ("{condition: none}", '"no"'),
        ("{condition: on-failure}", "on-failure"),
        ("{condition: on-failure, max_attempts: 0}", "on-failure"),
        ("{condition: on-failure, max_attempts: 3, delay: 5s}", "on-failure:3"),
    ],
)
def test_deploy_restart_policy_condition_is_restart(policy: str, restart: str) -> None:
    """As docker-compose 1.29.2 reads it on one engine (compose/project.py,
    translate_deploy_keys_to_container_config): none, on-failure and max_attempts are
    the container's restart policy."""
    deploy = f"services:\n  web:\n    image: busybox\n    deploy: {{restart_policy: {policy}}}\n"
    direct = f"services:\n  web:\n    image: busybox\n    restart: {restart}\n"
    spelled, written = specs(deploy)["web"], specs(direct)["web"]
    assert spelled.restart == written.restart and spelled.restart is not None
    assert spelled.spec_hash == written.spec_hash
    both = direct + f"    deploy: {{restart_policy: {policy}}}\n"
    assert specs(both)["web"].restart == written.restart, "the same twice is fine"
    (found,) = errors(
        direct.replace(restart, "always") + f"    deploy: {{restart_policy: {policy}}}\n"
    )
    assert "are one setting and disagree" in found and "'always'" in found, found


# -- docker-compose 1.29.2 as the oracle (no engine: `config` only) ------------------------


def _oracle_config(text: str, tmp_path: Path) -> dict[str, Any]:
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.skip("docker-compose (Debian's 1.29.2) is not installed")
    (tmp_path / "docker-compose.yml").write_text(text)
    p = subprocess.run(
        [compose, "-p", "legacy", "config"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    out: dict[str, Any] = yaml.safe_load(p.stdout)
    return out


def test_external_names_are_the_ones_docker_compose_uses(tmp_path: Path) -> None:
    oracle = _oracle_config(LEGACY_EXTERNAL, tmp_path)
    s = specs(LEGACY_EXTERNAL)
    networks, volumes = oracle["networks"], oracle["volumes"]
    assert all(n["external"] is True for n in (*networks.values(), *volumes.values()))
    assert s["web"].networks == (networks["backend"]["name"],)
    assert s["proxy"].networks == (networks["default"]["name"],)
    assert [v.source for v in s["web"].volumes] == [volumes["data"]["name"]]
