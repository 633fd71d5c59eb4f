"""The Compose merge (issue 34): every field's rule, the `!reset`/`!override` tags, and
errors of a merged document located in the file at fault (healerd.config.merge).

The rules are compose-spec 13-merge.md's, and docker-compose 1.29.2's where the two
differ on what 1.29.2 can express (tests/integration/test_compose_merge_diff.py
compares the merged models with 1.29.2's own)."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from healerd.config.errors import ConfigError
from healerd.config.keys import At, Context
from healerd.config.merge import merge_documents, strip_tags
from healerd.config.servicefile import _document
from healerd.config.yamlload import LineDict, LineList, Tag, load_yaml


def _load(text: str, file: str) -> LineDict:
    data, errors = load_yaml(textwrap.dedent(text), file)
    assert not errors and isinstance(data, LineDict), errors
    return data


def _merge(base: str, override: str) -> tuple[LineDict, list[ConfigError]]:
    errors: list[ConfigError] = []
    at = At(errors, "override.yaml", "", None)
    merged = merge_documents(_load(base, "base.yaml"), _load(override, "override.yaml"), at)
    return merged, errors


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _service(base: str, override: str, name: str = "web") -> Any:
    merged, errors = _merge(base, override)
    assert not errors, errors
    return _plain(merged["services"][name])


def _svc(body: str) -> str:
    """A one-service file: `body` is the service's keys."""
    return "services:\n  web:\n" + textwrap.indent(textwrap.dedent(body), "    ")


# --- the specification's own examples (13-merge.md) ----------------------------------------


def test_a_mapping_merges_key_by_key() -> None:
    base = "services:\n  foo:\n    key1: value1\n    key2: value2\n"
    override = "services:\n  foo:\n    key2: VALUE\n    key3: value3\n"
    assert _service(base, override, "foo") == {"key1": "value1", "key2": "VALUE", "key3": "value3"}


def test_a_sequence_appends() -> None:
    base = _svc("dns: [1.1.1.1]")
    assert _service(base, _svc("dns: [8.8.8.8]"))["dns"] == ["1.1.1.1", "8.8.8.8"]


def test_shell_commands_are_replaced_not_appended() -> None:
    base = _svc('command: ["echo", "foo"]\nentrypoint: [a, b]\nhealthcheck: {test: [CMD, x]}')
    override = _svc('command: ["echo", "bar"]\nentrypoint: c\nhealthcheck: {test: [CMD, y]}')
    web = _service(base, override)
    assert (web["command"], web["entrypoint"]) == (["echo", "bar"], "c")
    assert web["healthcheck"] == {"test": ["CMD", "y"]}


def test_a_mount_is_one_per_target() -> None:
    base = _svc("volumes: [foo:/work, other:/other]")
    assert _service(base, _svc("volumes: [bar:/work]"))["volumes"] == ["bar:/work", "other:/other"]


def test_reset_removes_what_it_overrides() -> None:
    base = _svc('image: myapp\nports: ["8080:80"]\nenvironment: {FOO: BAR}')
    override = _svc("image: myapp\nports: !reset []\nenvironment:\n  FOO: !reset null")
    assert _service(base, override) == {"image": "myapp", "environment": {}}


def test_override_replaces_whole() -> None:
    base = _svc('image: myapp\nports: ["8080:80"]')
    override = _svc('ports: !override\n  - "8443:443"')
    assert _service(base, override) == {"image": "myapp", "ports": ["8443:443"]}


# --- every field ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["environment", "labels", "sysctls"])
def test_pairs_merge_by_key_whatever_the_spelling(key: str) -> None:
    lists = _service(_svc(f"{key}: [A=1, B=2]"), _svc(f"{key}: [B=3, C=4]"))[key]
    assert lists == ["A=1", "B=3", "C=4"]  # both lists: a list, B replaced in place
    mixed = _service(_svc(f"{key}: [A=1, B=2, C]"), _svc(f"{key}: {{B: 3, D: x}}"))[key]
    assert mixed == {"A": "1", "B": 3, "C": None, "D": "x"}
    back = _service(_svc(f"{key}: {{A: 1, B: 2}}"), _svc(f"{key}: [B=x=y]"))[key]
    assert back == {"A": 1, "B": "x=y"}


def test_a_null_variable_still_overrides() -> None:
    """`KEY:` in environment is a value (empty), not an absent key."""
    assert _service(_svc("environment: {A: 1}"), _svc("environment: {A: }"))["environment"] == {
        "A": None
    }


def test_an_entry_that_is_no_pair_is_reported_where_it_is_without_its_text() -> None:
    merged, errors = _merge(_svc("environment: [A=1, {x: secret}]"), _svc("environment: {B: 2}"))
    assert [str(e) for e in errors] == [
        "base.yaml:3:24: services.web.environment[1]: must be a 'KEY=value' string to be "
        "merged with a mapping, not a mapping"
    ]
    assert _plain(merged["services"]["web"]["environment"]) == {"A": "1", "B": 2}


def test_extra_hosts_by_host_name() -> None:
    web = _service(
        _svc('extra_hosts: ["a:1.1.1.1", "b=2.2.2.2"]'), _svc("extra_hosts: {a: 3.3.3.3}")
    )
    assert web["extra_hosts"] == {"a": "3.3.3.3", "b": "2.2.2.2"}
    lists = _service(_svc('extra_hosts: ["a:1.1.1.1"]'), _svc('extra_hosts: ["a=9.9.9.9", "c:1"]'))
    assert lists["extra_hosts"] == ["a=9.9.9.9", "c:1"]


def test_ports_are_one_per_address_target_published_port_and_protocol() -> None:
    base = _svc('ports: ["8080:80", "127.0.0.1:53:53/udp", 9000, {target: 81, published: 8081}]')
    override = _svc(
        'ports: ["8080:80", "8081:80", "53:53/udp", "9000", {target: 81, published: "8081"}]'
    )
    assert _service(base, override)["ports"] == [
        "8080:80",
        "127.0.0.1:53:53/udp",
        "9000",
        {"target": 81, "published": "8081"},
        "8081:80",
        "53:53/udp",
    ]
    ipv6 = _service(_svc('ports: ["[::1]:80:80"]'), _svc('ports: ["[::1]:80:80", "[::1]:81:80"]'))
    assert ipv6["ports"] == ["[::1]:80:80", "[::1]:81:80"]


def test_long_and_short_mounts_and_devices_are_one_per_target() -> None:
    base = _svc(
        "volumes: [./a:/a, {type: volume, source: v, target: /v}, /anon]\n"
        'devices: ["/dev/null:/dev/x", "/dev/zero"]'
    )
    override = _svc(
        "volumes: [{type: bind, source: ./b, target: /a}, w:/v:ro, ./c:/anon]\n"
        'devices: ["/dev/random:/dev/x:r", "/dev/zero:/dev/zero:rw"]'
    )
    web = _service(base, override)
    assert web["volumes"] == [
        {"type": "bind", "source": "./b", "target": "/a"},
        "w:/v:ro",
        "./c:/anon",
    ]
    assert web["devices"] == ["/dev/random:/dev/x:r", "/dev/zero:/dev/zero:rw"]


def test_secrets_and_configs_by_source_links_by_alias() -> None:
    base = _svc("secrets: [a, {source: b, target: /b}]\nconfigs: [c]\nlinks: [db, 'cache:kv']")
    override = _svc("secrets: [{source: a, target: /x}, b2]\nconfigs: [{source: c, mode: 0400}]\n"
                    "links: ['db2:db', 'kv']")  # fmt: skip
    web = _service(base, override)
    assert web["secrets"] == [
        {"source": "a", "target": "/x"},
        {"source": "b", "target": "/b"},
        "b2",
    ]
    assert web["configs"] == [{"source": "c", "mode": 256}]
    assert web["links"] == ["db2:db", "kv"]


@pytest.mark.parametrize(
    "key", ["cap_add", "cap_drop", "expose", "security_opt", "device_cgroup_rules", "profiles"]
)
def test_these_lists_keep_one_copy_of_each_entry(key: str) -> None:
    assert _service(_svc(f"{key}: [a, b]"), _svc(f"{key}: [b, c, a]"))[key] == ["a", "b", "c"]


def test_expose_numbers_and_their_text_are_one() -> None:
    """The override's spelling, in the base's place."""
    assert _service(_svc("expose: [80, '81']"), _svc("expose: ['80', 81, 82]"))["expose"] == [
        "80",
        81,
        82,
    ]


@pytest.mark.parametrize("key", ["dns", "dns_search", "tmpfs"])
def test_these_lists_append_a_string_as_one_entry_duplicates_kept(key: str) -> None:
    assert _service(_svc(f"{key}: a"), _svc(f"{key}: [b, a]"))[key] == ["a", "b", "a"]
    assert _service(_svc(f"{key}: [a]"), _svc(f"{key}: c"))[key] == ["a", "c"]


@pytest.mark.parametrize("key", ["dns_opt", "group_add"])
def test_these_are_replaced_as_docker_compose_1_29_2_does(key: str) -> None:
    assert _service(_svc(f"{key}: [a, b]"), _svc(f"{key}: [c]"))[key] == ["c"]


def test_env_files_keep_one_copy_of_each_file() -> None:
    web = _service(_svc("env_file: a.env"), _svc("env_file: [b.env, a.env, {path: c.env}]"))
    assert web["env_file"] == ["a.env", "b.env", {"path": "c.env"}]


def test_ulimits_and_storage_opt_entries_are_replaced_whole() -> None:
    base = _svc("ulimits: {nofile: {soft: 1, hard: 2}, nproc: 5}\nstorage_opt: {size: 1G}")
    override = _svc("ulimits: {nofile: {soft: 3}}\nstorage_opt: {x: '1'}")
    web = _service(base, override)
    assert web["ulimits"] == {"nofile": {"soft": 3}, "nproc": 5}
    assert web["storage_opt"] == {"size": "1G", "x": "1"}


def test_networks_merge_by_name_aliases_once_each() -> None:
    base = _svc("networks:\n  front: {aliases: [a, b], ipv4_address: 10.0.0.2}\n  back:")
    override = _svc("networks:\n  front: {aliases: [b, c], priority: 5}\n  back: {aliases: [d]}")
    assert _service(base, override)["networks"] == {
        "front": {"aliases": ["a", "b", "c"], "ipv4_address": "10.0.0.2", "priority": 5},
        "back": {"aliases": ["d"]},
    }
    assert _service(_svc("networks: [a, b]"), _svc("networks: [b, c]"))["networks"] == [
        "a",
        "b",
        "c",
    ]
    mixed = _service(_svc("networks: [a, b]"), _svc("networks: {b: {aliases: [x]}, c: }"))
    assert mixed["networks"] == {"a": None, "b": {"aliases": ["x"]}, "c": None}


def test_depends_on_in_either_spelling() -> None:
    assert _service(_svc("depends_on: [a]"), _svc("depends_on: [b, a]"))["depends_on"] == ["a", "b"]
    web = _service(
        _svc("depends_on: [a, b]"),
        _svc("depends_on: {a: {condition: service_healthy}, c: {condition: service_started}}"),
    )
    assert web["depends_on"] == {
        "a": {"condition": "service_healthy"},
        "b": {"condition": "service_started"},
        "c": {"condition": "service_started"},
    }
    deep = _service(
        _svc("depends_on: {a: {condition: service_healthy, restart: true}}"),
        _svc("depends_on: {a: {required: false}}"),
    )
    assert deep["depends_on"] == {
        "a": {"condition": "service_healthy", "restart": True, "required": False}
    }


def test_logging_options_merge_only_while_the_driver_stays() -> None:
    base = _svc("logging: {driver: json-file, options: {max-size: 1m, max-file: '3'}}")
    same = _service(base, _svc("logging: {options: {max-file: '5'}}"))
    assert same["logging"] == {
        "driver": "json-file",
        "options": {"max-size": "1m", "max-file": "5"},
    }
    other = _service(base, _svc("logging: {driver: local}"))
    assert other["logging"] == {"driver": "local"}
    named = _service(base, _svc("logging: {driver: json-file, options: {compress: 'true'}}"))
    assert named["logging"]["options"] == {"max-size": "1m", "max-file": "3", "compress": "true"}


def test_healthcheck_merges_and_disable_drops_what_it_overrides() -> None:
    base = _svc("healthcheck: {test: [CMD, a], interval: 5s, retries: 3}")
    assert _service(base, _svc("healthcheck: {interval: 10s}"))["healthcheck"] == {
        "test": ["CMD", "a"],
        "interval": "10s",
        "retries": 3,
    }
    assert _service(base, _svc("healthcheck: {disable: true}"))["healthcheck"] == {"disable": True}


def test_build_merges_a_string_context_with_a_mapping() -> None:
    base = _svc("build: ./app")
    override = _svc("build: {dockerfile: Dockerfile.prod, args: [A=1], cache_from: [x]}")
    assert _service(base, override)["build"] == {
        "context": "./app",
        "dockerfile": "Dockerfile.prod",
        "args": ["A=1"],
        "cache_from": ["x"],
    }
    args = _service(_svc("build: {context: ., args: {A: 1, B: 2}}"), _svc("build: {args: [B=3]}"))
    assert args["build"] == {"context": ".", "args": {"A": 1, "B": "3"}}
    assert _service(_svc("build: ./a"), _svc("build: ./b"))["build"] == "./b"


def test_deploy_and_healerds_own_mappings_merge_key_by_key() -> None:
    base = _svc(
        "deploy: {replicas: 2, resources: {limits: {cpus: '0.5', memory: 64m}}}\n"
        "x-healerd: {auto_update: registry, update_window: 'Sat 02:00-05:00'}\n"
        "update_config: {parallelism: 1}\n"
        "post_start: [{command: a}]"
    )
    override = _svc(
        "deploy: {resources: {limits: {memory: 128m}, reservations: {memory: 32m}}}\n"
        "x-healerd: {auto_update: notify}\n"
        "update_config: {order: start-first}\n"
        "post_start: [{command: b}]"
    )
    web = _service(base, override)
    assert web["deploy"] == {
        "replicas": 2,
        "resources": {
            "limits": {"cpus": "0.5", "memory": "128m"},
            "reservations": {"memory": "32m"},
        },
    }
    assert web["x-healerd"] == {"auto_update": "notify", "update_window": "Sat 02:00-05:00"}
    assert web["update_config"] == {"parallelism": 1, "order": "start-first"}
    assert web["post_start"] == [{"command": "a"}, {"command": "b"}]


def test_a_null_overrides_nothing_and_reset_removes() -> None:
    web = _service(_svc("image: a\nuser: '1'\nports: ['80']"), _svc("image:\nuser: !reset\nports:"))
    assert web == {"image": "a", "ports": ["80"]}


def test_services_and_top_level_declarations() -> None:
    base = """
        name: one
        services:
          web: {image: a}
        networks:
          net: {driver: bridge, ipam: {config: [{subnet: 10.1.0.0/24}]}}
          kept: {}
        volumes:
          data: {labels: {a: '1'}}
        x-common: {a: 1}
    """
    override = """
        name: two
        services:
          db: {image: b}
        networks:
          net: {internal: true}
        volumes:
          more: {}
          data:
        x-common: {b: 2}
    """
    merged, errors = _merge(base, override)
    assert not errors
    assert _plain(merged) == {
        "name": "two",
        "services": {"web": {"image": "a"}, "db": {"image": "b"}},
        "networks": {"net": {"internal": True}, "kept": {}},  # replaced whole, as 1.29.2
        "volumes": {"data": None, "more": {}},
        "x-common": {"a": 1, "b": 2},
    }


def test_the_inputs_are_never_changed() -> None:
    base = _load(_svc("environment: [A=1]\nports: ['80']\nlabels: !reset {}"), "base.yaml")
    override = _load(_svc("environment: {B: 2}\nports: !override ['81']"), "override.yaml")
    before = (_plain(base), _plain(override), dict(override["services"]["web"].tags))
    merge_documents(base, override, At([], "override.yaml", "", None))
    assert (_plain(base), _plain(override), dict(override["services"]["web"].tags)) == before


# --- tags ----------------------------------------------------------------------------------


def test_tags_are_read_as_markers_beside_plain_values() -> None:
    data = _load(
        "a: !reset [1]\nb: !override {x: 1}\nc: [!reset 1, 2, !override 3]\nd: !reset\n", "f"
    )
    assert _plain(data) == {"a": [1], "b": {"x": 1}, "c": [2, 3], "d": None}
    assert data.tags == {"a": Tag.RESET, "b": Tag.OVERRIDE, "d": Tag.RESET}
    assert data["c"].item_lines == [3, 3]


def test_an_alias_carries_its_anchors_tag() -> None:
    data = _load("x: &a !reset 1\ny: *a\nz: 2\n", "f")
    assert data.tags == {"x": Tag.RESET, "y": Tag.RESET}


def test_a_file_used_alone_drops_its_reset_keys_and_keeps_override_values() -> None:
    data = _load(_svc("image: a\nports: !reset ['80']\nuser: !override '1'"), "f")
    strip_tags(data)
    assert _plain(data) == {"services": {"web": {"image": "a", "user": "1"}}}
    assert not data["services"]["web"].tags


@pytest.mark.parametrize("text", ["a: !foo 1\n", "a: !!binary aGk=\n", "!reset a: 1\n"])
def test_other_tags_stay_refused(text: str) -> None:
    data, errors = load_yaml(text, "f.yaml")
    assert data is None and errors and errors[0].field == "yaml"


def test_healerd_yaml_takes_no_merge_tags() -> None:
    data, errors = load_yaml("log_level: !reset info\n", "healerd.yaml", merge_tags=False)
    assert data is None
    assert "!reset" in errors[0].reason


# --- where errors of a merged document point -----------------------------------------------


def _checked(base: str, override: str) -> list[str]:
    merged, errors = _merge(base, override)
    strip_tags(merged)
    _document(merged, At(errors, "base.yaml", "", None, None, Context()))
    return [str(e) for e in errors]


def test_an_error_names_the_file_and_line_of_the_value_at_fault() -> None:
    base = _svc("image: busybox\ncpus: 0.5\nenvironment: {A: 1}")
    override = _svc("mem_limit: 1k\nenvironment: {'1B': x}\nvolumes: [rel:not-absolute]")
    assert sorted(_checked(base, override)) == [
        "override.yaml:3:5: services.web.mem_limit: must be at least 6m: Docker refuses a "
        "smaller memory limit, not '1k'",
        "override.yaml:4:19: services.web.environment: a variable name must be letters, "
        "digits, '_', '.' or '-', not starting with a digit; the entry is not shown, as it "
        "may hold a secret",
        "override.yaml:5:15: services.web.volumes[0]: target 'not-absolute' must be an "
        "absolute path",
    ]


def test_a_base_value_is_reported_in_the_base_file() -> None:
    base = _svc("image: busybox\nports: ['99999']")
    override = _svc("ports: ['8080:80']\nhostname: h")
    errors = _checked(base, override)
    assert len(errors) == 1 and errors[0].startswith("base.yaml:4:13: services.web.ports[0]"), (
        errors
    )


def test_a_service_only_in_the_override_is_reported_there() -> None:
    errors = _checked(_svc("image: a"), "services:\n  db:\n    image: a\n    cpus: lots\n")
    assert len(errors) == 1 and errors[0].startswith("override.yaml:4:5: services.db.cpus"), errors


def test_merged_containers_remember_each_items_file() -> None:
    merged, _ = _merge(_svc("volumes: [a:/a, b:/b]"), _svc("volumes: [c:/b, d:/d]"))
    volumes = merged["services"]["web"]["volumes"]
    assert isinstance(volumes, LineList)
    assert [volumes.file_at(i) for i in range(3)] == ["base.yaml", "override.yaml", "override.yaml"]
    assert [volumes.line_at(i) for i in range(3)] == [3, 3, 3]
