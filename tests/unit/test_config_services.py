"""Service file parsing: accepted forms, rejections with their lines, and robustness."""

from __future__ import annotations

import dataclasses
import posixpath
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from healerd.config import ConfigError, FileResult, load_service_file, parse_service_text
from healerd.config.units import parse_duration, parse_size
from healerd.model import NetworkDecl, PortSpec, ServiceSpec, VolumeSpec

F = "conf.d/test.yaml"
REPO = Path(__file__).resolve().parents[2]


def service(fields: str = "", image: str = "busybox:1") -> str:
    """A one-service file; the first of `fields` lands on line 4."""
    body = textwrap.indent(textwrap.dedent(fields).strip("\n"), "    ")
    return f"services:\n  web:\n    image: {image}\n{body}\n"


def ok(text: str) -> dict[str, ServiceSpec]:
    result = parse_service_text(text, F)
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None
    return result.services


def web(fields: str = "") -> ServiceSpec:
    return ok(service(fields))["web"]


def bad(text: str) -> list[ConfigError]:
    result = parse_service_text(text, F)
    assert result.services is None
    assert result.errors
    return list(result.errors)


def one_error(fields: str) -> ConfigError:
    errors = bad(service(fields))
    assert len(errors) == 1, [str(e) for e in errors]
    return errors[0]


def where(errors: list[ConfigError]) -> list[tuple[int | None, str]]:
    return [(e.line, e.field) for e in errors]


# --- whole documents ---------------------------------------------------------------------


def test_minimal_service_gets_defaults() -> None:
    spec = web()
    # The Compose project (the file) gives it its default network (issue 16).
    assert spec.networks == ("test_default",) and spec.project == "test"
    assert spec.networks_to_create == (NetworkDecl("test_default", "test", "default"),)
    bare = dataclasses.replace(spec, networks=(), project="", networks_to_create=())
    assert bare == ServiceSpec(name="web", image="busybox:1")
    assert spec.replicas == 1
    assert spec.stop_grace_period == 10.0
    assert spec.command is None and spec.entrypoint is None
    assert spec.source_file == F


def test_full_example_from_the_docs() -> None:
    text = """
services:
  payment-api:
    image: registry.local/payment-api:1.4.2
    command: ["/app/server", "--port", "8080"]
    entrypoint: ["/bin/sh", "-c"]
    environment:
      LOG_LEVEL: info
    labels: {team: pay}
    user: "1000:1000"
    working_dir: /app
    volumes: ["data:/var/lib/data", "/srv/cfg:/etc/cfg:ro"]
    ports: ["8080", "127.0.0.1:8080:80", "9000:9000/udp"]
    networks: [backend]
    mem_limit: 256m
    cpus: 0.5
    stop_grace_period: 10s
    replicas: 1
"""
    assert ok(text)["payment-api"] == ServiceSpec(
        name="payment-api",
        image="registry.local/payment-api:1.4.2",
        command=("/app/server", "--port", "8080"),
        entrypoint=("/bin/sh", "-c"),
        environment=(("LOG_LEVEL", "info"),),
        labels=(("team", "pay"),),
        user="1000:1000",
        working_dir="/app",
        volumes=(VolumeSpec("data", "/var/lib/data"), VolumeSpec("/srv/cfg", "/etc/cfg", True)),
        ports=(
            PortSpec(8080),
            PortSpec(80, "tcp", "127.0.0.1", 8080),
            PortSpec(9000, "udp", "", 9000),
        ),
        networks=("backend",),
        mem_limit=256 * 1024**2,
        cpus=0.5,
        stop_grace_period=10.0,
        project="test",
    )


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "services:\n"])
def test_empty_file_declares_nothing(text: str) -> None:
    assert ok(text) == {}


def test_several_services_in_one_file() -> None:
    services = ok("services:\n  a: {image: x}\n  b.c_d-1: {image: y}\n")
    assert sorted(services) == ["a", "b.c_d-1"]


def test_extension_fields_are_ignored() -> None:
    text = """
x-common: &env
  A: "1"
services:
  web:
    image: busybox:1
    x-note: anything at all
    environment:
      <<: *env
      B: "2"
"""
    assert ok(text)["web"].environment == (("A", "1"), ("B", "2"))


def test_x_prefix_in_services_mapping_is_a_service_name() -> None:
    assert "x-ray" in ok("services:\n  x-ray: {image: x}\n")


def test_unknown_top_level_key_suggests_services() -> None:
    errors = bad("service:\n  web: {image: x}\n")
    assert where(errors) == [(1, "service")]
    assert errors[0].reason == "unknown key 'service' (did you mean 'services'?)"


def test_version_key_is_accepted_and_ignored_as_compose_does() -> None:
    assert ok('version: "3"\nservices: {}\n') == {}


@pytest.mark.parametrize(("text", "line"), [("- a\n- b\n", 1), ("just text\n", 1), ("42\n", 1)])
def test_document_must_be_a_mapping(text: str, line: int) -> None:
    errors = bad(text)
    assert where(errors) == [(line, "")]
    assert "mapping" in errors[0].reason


@pytest.mark.parametrize("value", ["[a, b]", "web", "3"])
def test_services_must_be_a_mapping(value: str) -> None:
    errors = bad(f"# comment\nservices: {value}\n")
    assert where(errors) == [(2, "services")]


def test_service_body_must_be_a_mapping() -> None:
    errors = bad("services:\n  web: busybox\n  db:\n")
    assert where(errors) == [(2, "services.web"), (3, "services.db")]


@pytest.mark.parametrize("name", ["a", "A1", "web_1.blue-2", "9lives", "x" * 50])
def test_valid_service_names(name: str) -> None:
    assert name in ok(f"services:\n  '{name}': {{image: x}}\n")


@pytest.mark.parametrize(
    ("name", "field"),
    [("'-web'", "-web"), ("'we b'", "we b"), ("web!", "web!"), ("x" * 51, "x" * 51),
     ("1", "1"), ("yes", "yes"), ("~", "~"), ("'_web'", "_web"), ("'.web'", ".web")],
)  # fmt: skip
def test_invalid_service_names(name: str, field: str) -> None:
    errors = bad(f"services:\n  ok: {{image: x}}\n  {name}: {{image: x}}\n")
    assert where(errors) == [(3, f"services.{field}")]
    assert "service name" in errors[0].reason


def test_all_errors_are_reported_at_once() -> None:
    text = """
services:
  web:
    image: busybox:1
    replica: 2
    ports: ["99999"]
  db:
    cpus: -1
  cache:
    image: redis:7
    mem_limit: lots
"""
    errors = bad(text)
    assert where(errors) == [
        (5, "services.web.replica"),
        (6, "services.web.ports[0]"),
        (7, "services.db.image"),
        (8, "services.db.cpus"),
        (11, "services.cache.mem_limit"),
    ]


def test_errors_make_the_whole_file_invalid() -> None:
    result = parse_service_text("services:\n  good: {image: x}\n  bad: {}\n", F)
    assert result.services is None
    assert where(list(result.errors)) == [(3, "services.bad.image")]


# --- YAML level ----------------------------------------------------------------------------


def test_yaml_syntax_error_has_the_problem_line() -> None:
    errors = bad("services:\n  web:\n    image: x\n   bad: [\n")
    assert len(errors) == 1
    assert errors[0].field == "yaml"
    assert errors[0].line == 4


def test_yaml_syntax_error_unclosed_flow() -> None:
    errors = bad("services:\n  web: {image: x\n\n")
    assert errors[0].field == "yaml"
    assert errors[0].line == 4


def test_duplicate_key_is_an_error_at_the_second_line() -> None:
    errors = bad(service("replicas: 2\nreplicas: 3"))
    assert where(errors) == [(5, "services.web.replicas")]
    assert "line 4" in errors[0].reason


def test_duplicate_service_name_in_one_file() -> None:
    errors = bad("services:\n  web: {image: x}\n  web: {image: y}\n")
    assert where(errors) == [(3, "services.web")]


def test_duplicate_top_level_key() -> None:
    errors = bad("services: {}\nservices: {}\n")
    assert where(errors) == [(2, "services")]


def test_duplicate_environment_key_and_other_errors_together() -> None:
    errors = bad(service("environment:\n  A: x\n  A: y\nreplicas: -1"))
    assert where(errors) == [(6, "services.web.environment.A"), (7, "services.web.replicas")]


def test_merge_key_may_be_overridden_once() -> None:
    text = "x-b: &b {A: '1', B: '2'}\nservices:\n  web:\n    image: x\n    environment:\n"
    text += "      <<: *b\n      A: '3'\n"
    assert ok(text)["web"].environment == (("A", "3"), ("B", "2"))


def test_multiple_documents_are_an_error() -> None:
    errors = bad("services: {}\n---\nservices: {}\n")
    assert errors[0].field == "yaml"
    assert errors[0].line == 2


@pytest.mark.parametrize(
    "tag",
    ["!!python/object:os.system x", "!!set {a}", "!!binary aGk=", "!x y", "!!int", "!!float x"],
)
def test_unsafe_or_exotic_tags_are_refused(tag: str) -> None:
    errors = bad(service(f"user: {tag}"))
    assert where(errors) == [(4, "yaml")]


def test_unacceptable_character_reports_its_line() -> None:
    errors = bad("services:\n  web:\n    image: a\x07b\n")
    assert where(errors) == [(3, "yaml")]


def test_sexagesimal_and_dates_stay_strings() -> None:
    spec = web('ports: [8080:80]\nuser: 1000:1000\nenvironment: {D: 2024-01-02, T: "x"}')
    assert spec.ports == (PortSpec(80, host_port=8080),)
    assert spec.user == "1000:1000"
    assert spec.environment == (("D", "2024-01-02"), ("T", "x"))


# --- image ---------------------------------------------------------------------------------


def test_image_is_required_at_the_service_line() -> None:
    errors = bad("services:\n  web:\n    replicas: 1\n")
    assert where(errors) == [(2, "services.web.image")]
    assert errors[0].reason == "is required"


@pytest.mark.parametrize(
    ("value", "text"),
    [('""', "must not be empty"), ('"a b"', "whitespace"), ("3", "a string"), ("[a]", "a string")],
)
def test_bad_images(value: str, text: str) -> None:
    errors = bad(f"services:\n  web:\n    image: {value}\n")
    assert where(errors) == [(3, "services.web.image")]
    assert text in errors[0].reason


def test_null_image_is_required() -> None:
    assert where(bad("services:\n  web:\n    image:\n")) == [(2, "services.web.image")]


# --- unknown keys --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [("replica", "replicas"), ("enviroment", "environment"), ("port", "ports"),
     ("workdir", "working_dir"), ("mem-limit", "mem_limit")],
)  # fmt: skip
def test_unknown_service_key_did_you_mean(key: str, suggestion: str) -> None:
    error = one_error(f"{key}: 1")
    assert (error.line, error.field) == (4, f"services.web.{key}")
    assert error.reason == f"unknown key {key!r} (did you mean {suggestion!r}?)"


def test_unknown_service_key_without_suggestion() -> None:
    error = one_error("frobnicate: always")
    assert error.reason == "unknown key 'frobnicate'"


# --- command / entrypoint ------------------------------------------------------------------


@pytest.mark.parametrize("key", ["command", "entrypoint"])
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('["sleep", "infinity"]', ("sleep", "infinity")),
        ("sleep infinity", ("sleep", "infinity")),
        ("""sh -c 'echo "a b"'""", ("sh", "-c", 'echo "a b"')),
        ("[]", ()),
        ('""', ()),
        ("", None),
    ],
)
def test_argv_forms(key: str, value: str, expected: tuple[str, ...] | None) -> None:
    assert getattr(web(f"{key}: {value}"), key) == expected


@pytest.mark.parametrize("key", ["command", "entrypoint"])
def test_argv_rejections(key: str) -> None:
    errors = bad(service(f"{key}:\n  - sleep\n  - 10\n  - true"))
    assert where(errors) == [(6, f"services.web.{key}[1]"), (7, f"services.web.{key}[2]")]
    assert "quote it" in errors[0].reason
    assert where(bad(service(f"{key}: {{a: b}}"))) == [(4, f"services.web.{key}")]
    error = one_error(f'{key}: "sh -c \'unclosed"')
    assert "cannot split" in error.reason


# --- environment / labels ------------------------------------------------------------------


def test_environment_map_values() -> None:
    spec = web(
        """
        environment:
          Z: last
          A: text
          INT: 8080
          OCTAL: 0755
          FLOAT: 1.50
          EMPTY: ""
          UNSET:
          QUOTED: "true"
        """
    )
    # UNSET, named without a value, takes the project's variable: none here, so it is
    # left out, as in Compose (test_compose_variables).
    assert spec.environment == (
        ("A", "text"), ("EMPTY", ""), ("FLOAT", "1.50"), ("INT", "8080"),
        ("OCTAL", "0755"), ("QUOTED", "true"), ("Z", "last"),
    )  # fmt: skip


def test_environment_list_values() -> None:
    spec = web('environment: ["B=2", "A=x=y", "EMPTY="]')
    assert spec.environment == (("A", "x=y"), ("B", "2"), ("EMPTY", ""))


def test_environment_rejections() -> None:
    # `"ON": yes` is fine: "yes", as Compose (YAML 1.2) reads it.
    errors = bad(service('environment:\n  "ON": yes\n  L: [1]\n  M: {a: b}\n  1: x\n  NO: x'))
    assert where(errors) == [
        (6, "services.web.environment.L"),
        (7, "services.web.environment.M"),
        (8, "services.web.environment.1"),
        (9, "services.web.environment.NO"),
    ]
    assert "quote it" in errors[3].reason


def test_environment_list_rejections() -> None:
    errors = bad(service('environment:\n  - BARE WORDS\n  - "=v"\n  - 3\n  - A=1\n  - A=2'))
    assert where(errors) == [
        (5, "services.web.environment[0]"),
        (6, "services.web.environment[1]"),
        (7, "services.web.environment[2]"),
        (9, "services.web.environment.A"),
    ]
    # An entry without '=' that is no variable's name is not shown: it may be a value
    # pasted on its own (a name alone takes the project's variable: test_compose_variables).
    assert "write KEY=value" in errors[0].reason and "BARE" not in str(errors[0])
    assert "more than once" in errors[3].reason


def test_an_entry_listed_twice_with_the_same_value_is_taken_as_compose_takes_it() -> None:
    """CoPilot-For-Consensus's auth service lists AUTH_JWT_ALGORITHM=... twice; Compose
    takes the last entry. The same value twice is harmless; another value stays an error."""
    env = web("environment: [A=1, B=2, A=1]").environment
    assert dict(env) == {"A": "1", "B": "2"}
    assert web('labels: ["a=1", "a=1"]').labels == (("a", "1"),)


@pytest.mark.parametrize("value", ["a string", "3", "true"])
def test_environment_wrong_type(value: str) -> None:
    error = one_error(f"environment: {value}")
    assert (error.line, error.field) == (4, "services.web.environment")


def test_labels_forms() -> None:
    assert web("labels: {b: 2, a: x}").labels == (("a", "x"), ("b", "2"))
    assert web('labels: ["b=2", "a=x"]').labels == (("a", "x"), ("b", "2"))
    assert web("labels: {com.example.team: pay}").labels == (("com.example.team", "pay"),)


def test_a_label_listed_by_its_name_alone_is_empty_as_in_compose() -> None:
    """nextcloud/docker's examples: `- "com.github.jrcs...nginx_proxy"` (docker-compose
    gives it ''); a word that does not read as a label's name is still an error."""
    labels = web('labels: ["com.github.jrcs.nginx_proxy", "b=2"]').labels
    assert labels == (("b", "2"), ("com.github.jrcs.nginx_proxy", ""))
    assert "has no value" in bad(service('labels: ["team:platform"]'))[0].reason
    assert "reserved" in bad(service('labels: ["io.healerd.service"]'))[0].reason


def test_reserved_label_prefix() -> None:
    errors = bad(
        service('labels:\n  io.healerd.service: x\n  ok: "1"\nenvironment: [io.healerd.x=1]')
    )
    assert where(errors) == [(5, "services.web.labels.io.healerd.service")]
    assert "reserved" in errors[0].reason
    errors = bad(service('labels: ["io.healerd.spec-hash=1"]'))
    assert where(errors) == [(4, "services.web.labels.io.healerd.spec-hash")]


# --- user / working_dir ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [('"1000:1000"', "1000:1000"), ("nobody", "nobody"), ("1000", "1000"), ("0", "0")],
)
def test_user_forms(value: str, expected: str) -> None:
    assert web(f"user: {value}").user == expected


@pytest.mark.parametrize("value", ['""', '"a b"', "[1000]", "-1", "true"])
def test_user_rejections(value: str) -> None:
    error = one_error(f"user: {value}")
    assert (error.line, error.field) == (4, "services.web.user")


def test_working_dir() -> None:
    assert web("working_dir: /app/").working_dir == "/app"
    assert web("working_dir: /").working_dir == "/"
    for value in ["app", "./app", "1", '""']:
        error = one_error(f"working_dir: {value}")
        assert (error.line, error.field) == (4, "services.web.working_dir")


# --- volumes ---------------------------------------------------------------------------


def test_relative_volume_sources_start_at_the_files_directory_as_in_compose() -> None:
    result = parse_service_text(
        service('volumes: ["./data:/d", "../shared:/s:ro", "~/x:/x"]'), "/etc/healerd/conf.d/t.yaml"
    )
    assert result.errors == () and result.services is not None
    assert result.services["web"].volumes == (
        VolumeSpec("/etc/healerd/conf.d/data", "/d"),
        VolumeSpec("/etc/healerd/shared", "/s", True),
        VolumeSpec(posixpath.expanduser("~/x"), "/x"),
    )


def test_volume_forms() -> None:
    spec = web('volumes: ["data:/var/lib/data", "/srv/cfg/:/etc/cfg:ro", "/anon", "v2:/x:rw"]')
    assert spec.volumes == (
        VolumeSpec("data", "/var/lib/data"),
        VolumeSpec("/srv/cfg", "/etc/cfg", read_only=True),
        VolumeSpec("", "/anon"),
        VolumeSpec("v2", "/x"),
    )


@pytest.mark.parametrize(
    ("item", "text"),
    [
        ('"data:rel"', "absolute"),
        ('"dd:/x:rx"', "must be ro, rw, z, Z"),
        ('"d:/x"', "2+ characters"),
        ('"a:b:c:d"', "SOURCE:TARGET"),
        ('"data:"', "SOURCE:TARGET"),
        ('""', "SOURCE:TARGET"),
        ('"relative"', "absolute"),
        ('"data:/"', "cannot mount over /"),
        ("[a]", "string or a mapping"),
        ("3", "string or a mapping"),
    ],
)
def test_volume_rejections(item: str, text: str) -> None:
    error = one_error(f"volumes:\n  - /ok\n  - {item}")
    assert (error.line, error.field) == (6, "services.web.volumes[1]")
    assert text in error.reason


def test_volume_mounted_twice() -> None:
    error = one_error('volumes: ["a1:/x", "/host:/x/"]')
    assert (error.line, error.field) == (4, "services.web.volumes[1]")


def test_volumes_must_be_a_list() -> None:
    assert where(bad(service("volumes: data:/x"))) == [(4, "services.web.volumes")]


# --- ports -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("80", PortSpec(80)),
        ('"80"', PortSpec(80)),
        ('"8080:80"', PortSpec(80, "tcp", "", 8080)),
        ('"127.0.0.1:8080:80"', PortSpec(80, "tcp", "127.0.0.1", 8080)),
        ('"127.0.0.1::80"', PortSpec(80, "tcp", "127.0.0.1", None)),
        ('"9000:9000/udp"', PortSpec(9000, "udp", "", 9000)),
        ('"53/UDP"', PortSpec(53, "udp")),
        ('"[::1]:8080:80"', PortSpec(80, "tcp", "::1", 8080)),
        ('"[0:0::1]:8080:80/udp"', PortSpec(80, "udp", "::1", 8080)),
        ("65535", PortSpec(65535)),
    ],
)
def test_port_forms(item: str, expected: PortSpec) -> None:
    assert web(f"ports: [{item}]").ports == (expected,)


@pytest.mark.parametrize(
    ("item", "text"),
    [
        ("0", "1 to 65535"),
        ("65536", "1 to 65535"),
        ("-1", "1 to 65535"),
        ('"8000-8010:80"', "ranges"),
        ('"80/sctp"', "tcp or udp"),
        ('"x:80"', "host port"),
        ('"999.1.1.1:80:80"', "not an IP address"),
        ('"::1:80:80"', "brackets"),
        ('"a:b:c:d"', "brackets"),
        ('""', "container port"),
        ("true", "must be a number"),
        ("[80]", "must be a number"),
        ('" 80"', "container port"),
    ],
)
def test_port_rejections(item: str, text: str) -> None:
    error = one_error(f"ports:\n  - 1\n  - {item}")
    assert (error.line, error.field) == (6, "services.web.ports[1]")
    assert text in error.reason


def test_ports_must_be_a_list() -> None:
    assert where(bad(service("ports: 80"))) == [(4, "services.web.ports")]


def test_same_host_port_twice() -> None:
    error = one_error('ports: ["8080:80", "8080:81"]')
    assert error.field == "services.web.ports[1]"
    assert "published twice" in error.reason
    assert web('ports: ["8080:80", "8080:80/udp"]').has_fixed_host_port


def test_fixed_host_port_allows_one_replica() -> None:
    error = one_error('replicas: 2\nports:\n  - "8080:80"')
    assert (error.line, error.field) == (5, "services.web.ports")
    assert error.reason == "a fixed host port allows only one replica"
    assert web('replicas: 1\nports: ["8080:80"]').replicas == 1
    assert web('replicas: 0\nports: ["8080:80"]').replicas == 0
    assert web('replicas: 5\nports: ["80", "127.0.0.1::81"]').replicas == 5


# --- networks --------------------------------------------------------------------------


def test_network_forms() -> None:
    assert web("networks: [front, backend]").networks == ("backend", "front")
    assert web("networks:\n  front:\n  backend: {}").networks == ("backend", "front")
    assert web("networks: []").networks == ("test_default",)


def test_network_rejections() -> None:
    errors = bad(service("networks:\n  - ok\n  - 3\n  - ok\n  - -x"))
    assert where(errors) == [
        (6, "services.web.networks[1]"),
        (7, "services.web.networks[2]"),
        (8, "services.web.networks[3]"),
    ]
    error = one_error("networks:\n  front: {ipv4_address: 10.0.0.300}")
    assert (error.line, error.field) == (5, "services.web.networks.front.ipv4_address")
    assert where(bad(service("networks: front"))) == [(4, "services.web.networks")]


# --- mem_limit / cpus / stop_grace_period / replicas ----------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("8388608", 8388608),
        ("256m", 256 * 1024**2),
        ("256M", 256 * 1024**2),
        ("256mb", 256 * 1024**2),
        ("1g", 1024**3),
        ("1GB", 1024**3),
        ("1.5g", 3 * 1024**3 // 2),
        ("8192k", 8192 * 1024),
        ("8192Kb", 8192 * 1024),
        ("6291456b", 6 * 1024**2),
        ('"8388608"', 8388608),
    ],
)
def test_mem_limit_forms(value: str, expected: int) -> None:
    assert web(f"mem_limit: {value}").mem_limit == expected


@pytest.mark.parametrize(
    "value",
    ["0", "-1", "1.5", "lots", "10t", "1 g", "true", "[1]", "0m", "5m", "100b", '"6291455"'],
)
def test_mem_limit_rejections(value: str) -> None:
    error = one_error(f"mem_limit: {value}")
    assert (error.line, error.field) == (4, "services.web.mem_limit")


@pytest.mark.parametrize(("value", "expected"), [("0.5", 0.5), ("2", 2.0), ('"0.25"', 0.25)])
def test_cpus_forms(value: str, expected: float) -> None:
    cpus = web(f"cpus: {value}").cpus
    assert cpus == expected and isinstance(cpus, float)


@pytest.mark.parametrize("value", ["0", "-1", "true", "lots", ".inf", ".nan", "[1]", '"-1"'])
def test_cpus_rejections(value: str) -> None:
    error = one_error(f"cpus: {value}")
    assert (error.line, error.field) == (4, "services.web.cpus")


@pytest.mark.parametrize(
    ("value", "expected"),
    [("10", 10.0), ("1.5", 1.5), ("0", 0.0), ("10s", 10.0), ("1m30s", 90.0),
     ("500ms", 0.5), ("1h", 3600.0), ('"20"', 20.0), ("1m", 60.0), ("1.5s", 1.5)],
)  # fmt: skip
def test_stop_grace_period_forms(value: str, expected: float) -> None:
    assert web(f"stop_grace_period: {value}").stop_grace_period == pytest.approx(expected)


@pytest.mark.parametrize("value", ["-1", "2h", "3601", "1h1s", "10x", "s", "true", "[1]", ".inf"])
def test_stop_grace_period_rejections(value: str) -> None:
    error = one_error(f"stop_grace_period: {value}")
    assert (error.line, error.field) == (4, "services.web.stop_grace_period")


def test_parse_duration_and_size_directly() -> None:
    assert parse_duration("2h") == 7200.0
    assert parse_duration("1h2m3s4ms") == pytest.approx(3723.004)
    assert parse_duration("250us") == pytest.approx(0.00025)
    for value in ["", "1 s", "-1s", "1d", True, None, 10**400]:
        with pytest.raises(ValueError):
            parse_duration(value)
    assert parse_size(1) == 1
    with pytest.raises(ValueError):
        parse_size("9" * 30 + "g")
    good = {"100": 100, "100b": 100, "1k": 1024, "1.5m": 3 * 2**19, "100Mi": 100 * 2**20}
    good |= {"2MiB": 2 * 2**20, "1G": 2**30, "1gb": 2**30}
    for text, size in good.items():
        assert parse_size(text) == size, text
    # "i" belongs to a unit: 100i and 100ib are typos, not bytes.
    for text in ["100i", "100ib", "100bi", "1mm", "k", "1 m", "1t"]:
        with pytest.raises(ValueError):
            parse_size(text)


@pytest.mark.parametrize(("value", "expected"), [("", 1), ("0", 0), ("1", 1), ("3", 3)])
def test_replicas_forms(value: str, expected: int) -> None:
    assert web(f"replicas: {value}" if value else "").replicas == expected


@pytest.mark.parametrize(
    ("value", "text"),
    [("-1", "negative"), ("true", "whole number"), ("false", "whole number"),
     ('"2"', "whole number"), ("1.5", "whole number"), ("[1]", "whole number")],
)  # fmt: skip
def test_replicas_rejections(value: str, text: str) -> None:
    error = one_error(f"replicas: {value}")
    assert (error.line, error.field) == (4, "services.web.replicas")
    assert text in error.reason


# --- spec hash -------------------------------------------------------------------------


def test_spec_hash_ignores_how_things_are_written() -> None:
    a = web("environment: {B: '2', A: 1}\nlabels: {x: y}\nnetworks: [n2, n1]\ncommand: a b")
    b = web('environment: ["A=1", "B=2"]\nlabels: ["x=y"]\nnetworks: {n1: , n2: }\ncommand: [a, b]')
    assert a == b
    assert a.spec_hash == b.spec_hash


def test_spec_hash_changes_with_image_but_not_replicas_or_file() -> None:
    base = web("replicas: 1")
    assert web("replicas: 7").spec_hash == base.spec_hash
    other_image = ok(service(image="busybox:2"))["web"]
    assert other_image.spec_hash != base.spec_hash
    # Another file is another Compose project: another default network, so it rolls...
    moved = parse_service_text(service(), "elsewhere.yaml").services
    assert moved is not None
    assert moved["web"].spec_hash != base.spec_hash
    # ... unless both name the same project.
    named = parse_service_text("name: test\n" + service(), "elsewhere.yaml").services
    assert named is not None
    assert named["web"] == base and named["web"].spec_hash == base.spec_hash
    assert web("stop_grace_period: 10").spec_hash == web("stop_grace_period: 10s").spec_hash


# --- files -----------------------------------------------------------------------------


def test_load_service_file_uses_display_name(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(service())
    assert load_service_file(path).file == str(path)
    result = load_service_file(path, "conf.d/a.yaml")
    assert result.file == "conf.d/a.yaml"
    assert result.services is not None
    assert result.services["web"].source_file == "conf.d/a.yaml"
    assert result.lines == {"web": 2}


def test_unreadable_files_are_errors(tmp_path: Path) -> None:
    missing = load_service_file(tmp_path / "gone.yaml")
    assert missing.services is None and missing.errors[0].field == "file"
    (tmp_path / "dir.yaml").mkdir()
    assert load_service_file(tmp_path / "dir.yaml").services is None
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"services:\n  web:\n    image: caf\xe9\n")
    error = load_service_file(latin1).errors[0]
    assert (error.line, error.field) == (3, "file")


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + service().encode())
    assert load_service_file(path).errors == ()


def test_shipped_example_is_valid() -> None:
    result = load_service_file(REPO / "config" / "conf.d" / "example.yaml", "example.yaml")
    assert result.errors == ()
    assert result.services is not None
    assert list(result.services) == ["hello"]
    hello = result.services["hello"]
    assert hello.image == "healerd-example/busybox:1"
    assert hello.replicas == 2
    assert hello.stop_grace_period == 2.0


def test_config_error_str() -> None:
    assert str(ConfigError("f.yaml", 3, "services.web", "bad")) == "f.yaml:3: services.web: bad"
    assert str(ConfigError("f.yaml", None, "services.web", "bad")) == "f.yaml: services.web: bad"
    assert str(ConfigError("f.yaml", 1, "", "bad")) == "f.yaml:1: bad"


# --- robustness ------------------------------------------------------------------------

FRAGMENTS = [
    "services", "image", "web", "replicas", "ports", "environment", "x-a", "<<", "!!int",
    "!!str", "&a", "*a", "-", ":", " ", "  ", "\n", "\t", "[", "]", "{", "}", ",", "'", '"',
    "#", "?", "|", ">", "---", "...", "0x1F", "1:2:3", "2024-13-45", ".inf", "~", "yes",
    "=", "%YAML 1.1", "!!binary", "\x00", "é", "8080:80/udp", "1e400", "9" * 40,
]  # fmt: skip


def _check_result(text: str) -> None:
    result = parse_service_text(text, F)
    assert isinstance(result, FileResult)
    assert (result.services is None) == bool(result.errors)
    for error in result.errors:
        assert isinstance(error, ConfigError) and str(error)


@settings(max_examples=300, deadline=None, database=None)
@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    _check_result(text)


@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))
def test_yamlish_text_never_raises(text: str) -> None:
    _check_result(text)


_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_KEYS = ["image", "bogus", "x-y", "replicas", "stop_grace_period", "mem_limit", "cpus", "user"]
_KEYS += ["ports", "environment", "volumes", "labels", "networks", "command", "working_dir"]
_fields = st.dictionaries(st.sampled_from(_KEYS), _values)


@settings(max_examples=300, deadline=None, database=None)
@given(st.dictionaries(st.text(max_size=8), _fields | _values, max_size=3))
def test_structured_yaml_never_raises(services: dict[str, object]) -> None:
    _check_result(yaml.safe_dump({"services": services}))


# Structured documents that look like real service files: every known key (nested keys
# too), typos, x- keys, and values drawn from what each kind of field accepts or nearly
# accepts, so that the checks themselves (not only the type guards) run on odd input.
_PLAUSIBLE = st.sampled_from(
    [
        "10s", "1m30s", "0s", "-1s", "500ms", "1h1s", "256m", "0m", "1.5g", "10t", "0.5",
        "8080", "8080:80", "127.0.0.1:80:80", "[::1]:80:80/udp", "80/sctp", "1-2:3",
        "70000:80", ":80", "data:/data", "/a:/b:ro", "/a:/", "a:b:c:d", "/x",
        "busybox:1.36", "BusyBox", "a@sha256:00", "localhost:5000/x", "CMD", "CMD-SHELL",
        "NONE", "start-first", "stop-first", "always", "build", "if_not_present",
        "KEY=value", "=x", "io.healerd.x=1", "1000:1000", "app", "/app", "echo 'x",
        "missing.env", "", " ", "x-y", "<<", "true", "null",
    ]
)  # fmt: skip
_leaf = _PLAUSIBLE | _scalars
_any = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_PLAUSIBLE | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)
_NESTED = {
    "healthcheck": ["test", "interval", "timeout", "retries", "start_period", "disable"],
    "update_config": ["parallelism", "delay", "order", "min_ready_seconds", "progress_deadline"],
    "restart_policy": ["delay", "max_delay", "window", "condition", "max_attempts"],
}


def _nested(keys: list[str]) -> st.SearchStrategy[dict[str, object]]:
    return st.dictionaries(st.sampled_from([*keys, "bogus", "x-note"]), _any, max_size=5)


_ALL_KEYS = sorted(
    {"image", "replicas", "command", "entrypoint", "environment", "env_file", "labels"}
    | {"user", "working_dir", "volumes", "ports", "networks", "mem_limit", "cpus"}
    | {"stop_grace_period", "pull_policy", "unhealthy_grace", "restart", "deploy", "replica"}
    | {"x-meta", "env_digest", "container_name"}
)
_service_body = st.fixed_dictionaries(
    {},
    optional={
        **{key: _any for key in _ALL_KEYS},
        **{key: _nested(sub) | _any for key, sub in _NESTED.items()},
    },
)
_service_names = st.sampled_from(["web", "db", "x-y", "-bad", "a" * 51]) | st.text(max_size=6)


@settings(max_examples=400, deadline=None, database=None)
@given(
    st.dictionaries(_service_names, _service_body | _any, max_size=3),
    st.dictionaries(st.sampled_from(["x-a", "service", "version"]), _any, max_size=2),
)
def test_service_like_yaml_never_raises(
    services: dict[str, object], extra: dict[str, object]
) -> None:
    text = yaml.safe_dump({"services": services, **extra}, allow_unicode=True)
    _check_result(text)
    result = parse_service_text(text, F)
    # Every problem in well-formed YAML points at a line and a column.
    assert all(e.line is not None and e.column is not None for e in result.errors)
    if result.services is not None:
        assert all(isinstance(s, ServiceSpec) for s in result.services.values())
