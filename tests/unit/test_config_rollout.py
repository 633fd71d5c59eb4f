"""Service fields for health, pulls, rollouts and crash loops; image references; columns."""

from __future__ import annotations

import textwrap

import pytest

from healerd.config import ConfigError, parse_service_text
from healerd.model import HealthcheckSpec, RestartPolicy, ServiceSpec, UpdateConfig, UpdateOrder

F = "conf.d/test.yaml"


def service(fields: str = "", image: str = "busybox:1") -> str:
    """A one-service file; the first of `fields` lands on line 4."""
    body = textwrap.indent(textwrap.dedent(fields).strip("\n"), "    ")
    return f"services:\n  web:\n    image: {image}\n{body}\n"


def web(fields: str = "") -> ServiceSpec:
    result = parse_service_text(service(fields), F)
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None
    return result.services["web"]


def errors(fields: str, image: str = "busybox:1") -> list[ConfigError]:
    result = parse_service_text(service(fields, image), F)
    assert result.services is None
    return list(result.errors)


def one_error(fields: str, image: str = "busybox:1") -> ConfigError:
    found = errors(fields, image)
    assert len(found) == 1, [str(e) for e in found]
    return found[0]


# --- healthcheck ---------------------------------------------------------------------------


def test_healthcheck_full() -> None:
    spec = web(
        """
        healthcheck:
          test: ["CMD", "wget", "-q", "-O-", "http://127.0.0.1:8080/"]
          interval: 5s
          timeout: 2s
          start_period: 1m
          retries: 3
        """
    )
    assert spec.healthcheck == HealthcheckSpec(
        test=("CMD", "wget", "-q", "-O-", "http://127.0.0.1:8080/"),
        interval=5.0,
        timeout=2.0,
        start_period=60.0,
        retries=3,
    )


def test_healthcheck_string_is_cmd_shell() -> None:
    spec = web("healthcheck: {test: 'curl -f http://localhost/ || exit 1'}")
    assert spec.healthcheck is not None
    assert spec.healthcheck.test == ("CMD-SHELL", "curl -f http://localhost/ || exit 1")


def test_healthcheck_cmd_shell_list() -> None:
    spec = web("healthcheck: {test: [CMD-SHELL, 'true']}")
    assert spec.healthcheck == HealthcheckSpec(test=("CMD-SHELL", "true"))


@pytest.mark.parametrize("fields", ["healthcheck: {disable: true}", "healthcheck: {test: [NONE]}"])
def test_healthcheck_disabled_either_way(fields: str) -> None:
    assert web(fields).healthcheck == HealthcheckSpec(disable=True, test=("NONE",))


def test_healthcheck_timing_only_keeps_the_image_test() -> None:
    assert web("healthcheck: {interval: 10s}").healthcheck == HealthcheckSpec(interval=10.0)


def test_empty_healthcheck_is_no_healthcheck() -> None:
    assert web("healthcheck: {}").healthcheck is None
    assert web("healthcheck: {disable: false}").healthcheck is None


def test_healthcheck_is_in_the_spec_hash() -> None:
    assert web().spec_hash != web("healthcheck: {interval: 10s}").spec_hash


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ("healthcheck: {test: [wget, x]}", "test", "must start with CMD, CMD-SHELL or NONE"),
        ("healthcheck: {test: []}", "test", "must start with CMD"),
        ("healthcheck: {test: [CMD]}", "test", "CMD needs the program"),
        ("healthcheck: {test: [CMD-SHELL, a, b]}", "test", "exactly one string"),
        ("healthcheck: {test: [NONE, x]}", "test", "NONE takes nothing"),
        ("healthcheck: {test: ''}", "test", "must not be empty"),
        ("healthcheck: {test: 3}", "test", "not a number"),
        ("healthcheck: {interval: 0s}", "interval", "greater than 0"),
        ("healthcheck: {timeout: soon}", "timeout", "not a duration"),
        ("healthcheck: {start_period: -1}", "start_period", "must not be negative"),
        ("healthcheck: {retries: 0}", "retries", "at least 1"),
        ("healthcheck: {retries: '3'}", "retries", "whole number"),
        ("healthcheck: {disable: 1}", "disable", "true or false"),
        ("healthcheck: {disable: true, test: [CMD, x]}", "disable", "contradicts the test"),
        ("healthcheck: {intervall: 5s}", "intervall", "did you mean 'interval'"),
        ("healthcheck: [CMD, x]", "", "must be a mapping"),
    ],
)
def test_bad_healthchecks(fields: str, field: str, text: str) -> None:
    error = one_error(fields)
    assert error.field == "services.web.healthcheck" + (f".{field}" if field else "")
    assert error.line == 4
    assert text in error.reason


def test_healthcheck_test_item_must_be_a_string() -> None:
    error = one_error("healthcheck:\n  test:\n    - CMD\n    - 3\n")
    assert (error.line, error.column, error.field) == (7, 11, "services.web.healthcheck.test[1]")


# --- pull_policy, unhealthy_grace ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("always", "always"),
        ("missing", "missing"),
        ("never", "never"),
        ("if_not_present", "missing"),
    ],
)
def test_pull_policy(value: str, expected: str) -> None:
    assert web(f"pull_policy: {value}").pull_policy == expected


def test_pull_policy_default_and_not_in_hash() -> None:
    assert web().pull_policy == "missing"
    assert web().spec_hash == web("pull_policy: always").spec_hash


def test_pull_policy_build_without_a_build_section_is_refused() -> None:
    error = one_error("pull_policy: build")
    assert "needs a build section" in error.reason


def test_pull_policy_unknown() -> None:
    error = one_error("pull_policy: daily")
    assert error.reason == "must be one of always, missing, never, build, not 'daily'"


def test_unhealthy_grace() -> None:
    assert web().unhealthy_grace == 0.0
    assert web("unhealthy_grace: 30s").unhealthy_grace == 30.0
    assert web("unhealthy_grace: 0").unhealthy_grace == 0.0
    assert "must not be negative" in one_error("unhealthy_grace: -1").reason


# --- update_config -------------------------------------------------------------------------


def test_update_config_full() -> None:
    spec = web(
        """
        update_config:
          parallelism: 2
          delay: 1s
          order: stop-first
          min_ready_seconds: 5
          progress_deadline: 10m
        """
    )
    assert spec.update_config == UpdateConfig(
        parallelism=2,
        delay=1.0,
        order=UpdateOrder.STOP_FIRST,
        min_ready_seconds=5.0,
        progress_deadline=600.0,
    )


def test_update_config_defaults_and_partial() -> None:
    assert web().update_config == UpdateConfig()
    assert web("update_config: {parallelism: 3}").update_config == UpdateConfig(parallelism=3)


def test_update_config_not_in_hash() -> None:
    assert web().spec_hash == web("update_config: {order: stop-first}").spec_hash


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ("update_config: {parallelism: 0}", "parallelism", "at least 1"),
        ("update_config: {parallelism: 1.5}", "parallelism", "whole number"),
        ("update_config: {delay: -1s}", "delay", "not a duration"),
        ("update_config: {order: rolling}", "order", "start-first, stop-first"),
        ("update_config: {min_ready_seconds: -2}", "min_ready_seconds", "must not be negative"),
        ("update_config: {progress_deadline: 0}", "progress_deadline", "greater than 0"),
        ("update_config: {failure_action: rollback}", "failure_action", "unknown key"),
        ("update_config: 1", "", "must be a mapping"),
    ],
)
def test_bad_update_config(fields: str, field: str, text: str) -> None:
    error = one_error(fields)
    assert error.field == "services.web.update_config" + (f".{field}" if field else "")
    assert text in error.reason


def test_fixed_host_port_with_explicit_start_first_is_an_error() -> None:
    error = one_error('ports: ["8080:80"]\nupdate_config:\n  order: start-first\n')
    assert (error.line, error.field) == (6, "services.web.update_config.order")
    assert "two containers cannot hold one fixed host port: use stop-first" in error.reason


def test_fixed_host_port_without_written_order_goes_stop_first() -> None:
    spec = web('ports: ["8080:80"]\nupdate_config: {parallelism: 1}\n')
    assert spec.update_config.order == "start-first"
    assert spec.update_order == "stop-first"
    assert web('ports: ["80"]\nupdate_config: {order: start-first}').update_order == "start-first"


# --- restart_policy ------------------------------------------------------------------------


def test_restart_policy() -> None:
    assert web().restart_policy == RestartPolicy()
    spec = web("restart_policy: {delay: 1s, max_delay: 1m, window: 5m}")
    assert spec.restart_policy == RestartPolicy(delay=1.0, max_delay=60.0, window=300.0)
    assert spec.spec_hash == web().spec_hash


@pytest.mark.parametrize("key", ["condition: on-failure", "max_attempts: 3"])
def test_restart_policy_never_gives_up(key: str) -> None:
    error = one_error(f"restart_policy: {{{key}}}")
    assert error.field == f"services.web.restart_policy.{key.split(':')[0]}"
    assert "healerd always restarts" in error.reason and "never gives up" in error.reason


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ("restart_policy: {delay: 0}", "delay", "greater than 0"),
        ("restart_policy: {window: 0s}", "window", "greater than 0"),
        ("restart_policy: {max_delay: 0}", "max_delay", "greater than 0"),
        ("restart_policy: {delay: 1m, max_delay: 10s}", "max_delay", "must not be less than"),
        ("restart_policy: {delay: 10m}", "delay", "must not be less than delay"),
        ("restart_policy: {dealy: 1s}", "dealy", "did you mean 'delay'"),
    ],
)
def test_bad_restart_policy(fields: str, field: str, text: str) -> None:
    error = one_error(fields)
    assert error.field == f"services.web.restart_policy.{field}"
    assert text in error.reason


# --- image references ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "image",
    [
        "busybox",
        "busybox:1.36",
        "library/busybox:latest",
        "registry.local/payment-api:1.4.2",
        "localhost:5000/team/app",
        "[::1]:5000/app:v1",
        "Registry.Example.com/app",
        "a.b_c__d-e---f",
        "app:" + "t" * 128,
        "app@sha256:" + "a" * 64,
        "app:1@sha256:" + "0" * 64,
    ],
)
def test_good_image_references(image: str) -> None:
    assert web_image(image) == image


def web_image(image: str) -> str:
    result = parse_service_text(f"services:\n  web:\n    image: '{image}'\n", F)
    assert result.services is not None, [str(e) for e in result.errors]
    return result.services["web"].image


@pytest.mark.parametrize(
    ("image", "text"),
    [
        ("Busybox", "must be lowercase"),
        ("ghcr.io/Org/app", "repository name 'Org/app' must be lowercase"),
        ("a//b", "empty path component"),
        ("app/", "empty path component"),
        ("app:", "empty tag"),
        ("app:-x", "tag '-x'"),
        ("app:" + "t" * 129, "129 characters long (at most 128)"),
        ("app@sha256:abc", "64 lowercase hex digits"),
        ("app@md5:" + "a" * 32, "must be sha256:"),
        ("a___b", "path component 'a___b'"),
        ("-app", "path component '-app'"),
        ("bad_host!/app", "path component"),
        ("reg.local:port/app", "registry 'reg.local:port'"),
    ],
)
def test_bad_image_references(image: str, text: str) -> None:
    result = parse_service_text(f"services:\n  web:\n    image: '{image}'\n", F)
    assert result.services is None
    assert [(e.line, e.column, e.field) for e in result.errors] == [(3, 5, "services.web.image")]
    assert "is not an image reference such as busybox:1.36" in result.errors[0].reason
    assert text in result.errors[0].reason


# --- host ports across the services of one file --------------------------------------------


def test_one_fixed_host_port_in_two_services_of_a_file() -> None:
    text = (
        "services:\n"
        "  a: {image: x, ports: ['8080:80']}\n"
        "  b:\n"
        "    image: x\n"
        "    ports: ['0.0.0.0:8080:90']\n"
    )
    result = parse_service_text(text, F)
    assert result.services is None
    [error] = result.errors
    assert (error.line, error.column, error.field) == (5, 5, "services.b.ports")
    assert "host port 0.0.0.0:8080/tcp is also published by service 'a'" in error.reason


@pytest.mark.parametrize(
    ("a", "b"), [("'8080:80'", "'8080:80/udp'"), ("'127.0.0.1:8080:80'", "'127.0.0.2:8080:80'")]
)
def test_different_protocols_or_addresses_do_not_clash(a: str, b: str) -> None:
    text = f"services:\n  a: {{image: x, ports: [{a}]}}\n  b: {{image: x, ports: [{b}]}}\n"
    assert parse_service_text(text, F).services is not None


# --- columns -------------------------------------------------------------------------------


def test_errors_carry_columns_and_print_them() -> None:
    found = errors("replicas: -1\nenvironment:\n  - FOO BAR\n")
    assert [(e.line, e.column, e.field) for e in found] == [
        (4, 5, "services.web.replicas"),
        (6, 9, "services.web.environment[0]"),  # an entry without "=" is not shown
    ]
    assert str(found[0]) == f"{F}:4:5: services.web.replicas: must not be negative"


def test_syntax_errors_carry_columns() -> None:
    result = parse_service_text("services:\n  web: {image: x\n\n", F)
    assert result.errors[0].column is not None
    assert str(result.errors[0]).startswith(f"{F}:{result.errors[0].line}:")


def test_duplicate_keys_carry_columns() -> None:
    result = parse_service_text("services:\n  web:\n    image: x\n    image: y\n", F)
    assert [(e.line, e.column) for e in result.errors] == [(4, 5)]


def test_error_without_column_prints_as_before() -> None:
    assert str(ConfigError("f.yaml", 3, "x", "bad")) == "f.yaml:3: x: bad"
    assert str(ConfigError("f.yaml", None, "", "bad")) == "f.yaml: bad"
    assert str(ConfigError("f.yaml", 3, "x", "bad", 7)) == "f.yaml:3:7: x: bad"


def test_every_error_of_a_file_is_reported() -> None:
    found = errors(
        """
        replicas: -1
        healthcheck: {retries: 0}
        update_config: {order: sideways}
        restart_policy: {condition: any}
        pull_policy: build
        """,
        image="Bad Image",
    )
    assert [e.field.removeprefix("services.web.") for e in found] == [
        "image",
        "replicas",
        "healthcheck.retries",
        "update_config.order",
        "restart_policy.condition",
        "pull_policy",
    ]
