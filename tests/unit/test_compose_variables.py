"""What Compose takes from a project's variables besides `${VAR}` (differential review
against docker-compose): an environment variable or build arg named without a value,
COMPOSE_PROJECT_NAME set for interpolation, and `COMPOSE_PROFILES=*`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from healerd.cli.export.variables import written_back
from healerd.config import load_service_file, parse_service_text
from healerd.config.envfile import effective_environment
from healerd.config.masking import mask_environment
from healerd.config.projectdir import load_project_dir
from healerd.model import ServiceSpec
from tests.unit.harness.projects import good, write

SECRET = "s3cret-Zq7-from-dotenv"


def web(fields: str, env: dict[str, str], file: str = "web.yaml") -> ServiceSpec:
    text = "services:\n  web:\n    image: busybox\n" + textwrap.indent(fields, "    ")
    return good(parse_service_text(text, file, env=env))["web"]


# --- a variable named without a value -----------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    ["environment: {FOO: , UNSET: , A: x}\n", "environment: [FOO, UNSET, A=x]\n"],
    ids=["mapping", "list"],
)
def test_a_variable_named_without_a_value_takes_the_projects_value(fields: str) -> None:
    """Compose's Resolve: FOO from the variables, UNSET (not set) left out entirely."""
    spec = web(fields, {"FOO": SECRET})
    assert spec.environment == (("A", "x"), ("FOO", SECRET))


def test_a_resolved_value_is_recorded_as_a_substitution_so_it_is_never_written_back() -> None:
    spec = web("environment: [FOO]\ncommand: [echo, hi]\n", {"FOO": SECRET})
    [sub] = spec.substitutions
    assert (sub.name, sub.shown, sub.field) == ("FOO", False, "services.web.environment.FOO")
    exported = written_back(
        {"environment": dict(spec.environment)}, spec.substitutions, "services.web"
    )
    assert exported == {"environment": {"FOO": "${FOO}"}}
    # A container's output that echoes it is masked, as any environment value is.
    assert mask_environment(f"connecting with {SECRET}", spec) == "connecting with [FOO]"


def test_an_error_in_the_same_service_never_shows_a_resolved_value() -> None:
    text = "services:\n  web:\n    image: busybox\n    environment: {FOO: , BAD: [x]}\n"
    result = parse_service_text(text, "web.yaml", env={"FOO": SECRET})
    assert result.errors and all(SECRET not in str(e) for e in result.errors)


def test_a_list_an_alias_shares_is_recorded_for_every_service_that_names_it() -> None:
    """The value goes back as `${FOO}` in each service's export, not only the first."""
    text = (
        "x-env: &env [FOO]\nservices:\n  a: {image: busybox, environment: *env}\n"
        "  b: {image: busybox, environment: *env}\n"
    )
    services = good(parse_service_text(text, "p.yaml", env={"FOO": SECRET}))
    for name, spec in services.items():
        assert spec.environment == (("FOO", SECRET),)
        assert f"services.{name}.environment.FOO" in {s.field for s in spec.substitutions}


def test_entries_after_a_left_out_one_keep_their_index_in_errors() -> None:
    text = 'services:\n  web:\n    image: busybox\n    environment: [UNSET, "=v"]\n'
    [error] = parse_service_text(text, "web.yaml", env={}).errors
    assert (error.line, error.field) == (4, "services.web.environment[1]")


def test_healerds_own_environment_is_read_only_for_the_listed_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare name reads the project's variables, which hold healerd's environment only
    for interpolate_environment's names: a credential given to the daemon stays out."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("TZ", "Europe/Berlin")
    path = write(tmp_path / "app.yaml", "services:\n  w:\n    image: busybox\n")
    path.write_text(path.read_text() + "    environment: [AWS_SECRET_ACCESS_KEY, TZ]\n")
    spec = good(load_service_file(path, environment=["TZ"]))["w"]
    assert spec.environment == (("TZ", "Europe/Berlin"),)


def test_an_unset_bare_name_leaves_the_env_files_value(tmp_path: Path) -> None:
    """Compose drops an unresolved entry before env files are merged under it."""
    write(tmp_path / "app.env", "FOO=from-dotenv\n")
    write(tmp_path / "vars.env", "FOO=from-env-file\nBAR=from-env-file\n")
    path = write(
        tmp_path / "app.yaml",
        """\
        services:
          w:
            image: busybox
            env_file: vars.env
            environment: [FOO, BAR]
        """,
    )
    spec = good(load_service_file(path))["w"]
    assert dict(effective_environment(spec)) == {"FOO": "from-dotenv", "BAR": "from-env-file"}


def test_an_overrides_bare_name_replaces_the_base_value_then_is_resolved(tmp_path: Path) -> None:
    """As compose-go: the files are merged first (`FOO` over `FOO=base`), then resolved."""
    write(
        tmp_path / "compose.yaml",
        "services:\n  w:\n    image: busybox\n    environment: [FOO=base]\n",
    )
    write(tmp_path / "compose.override.yaml", "services:\n  w:\n    environment: {FOO: }\n")
    assert good(load_project_dir(tmp_path))["w"].environment == ()
    write(tmp_path / ".env", "FOO=from-dotenv\n")
    assert good(load_project_dir(tmp_path))["w"].environment == (("FOO", "from-dotenv"),)


def test_an_included_project_resolves_with_its_own_variables(tmp_path: Path) -> None:
    write(
        tmp_path / "lib" / "compose.yaml",
        "services:\n  lib:\n    image: busybox\n    environment: [OWN]\n",
    )
    write(tmp_path / "lib" / ".env", "OWN=included\n")
    write(tmp_path / "compose.yaml", "include: [lib/compose.yaml]\nservices: {}\n")
    assert good(load_project_dir(tmp_path))["lib"].environment == (("OWN", "included"),)


@pytest.mark.parametrize(
    "args", ["[FOO, NOPE, B=1]", "{FOO: , NOPE: , B: 1}"], ids=["list", "mapping"]
)
def test_a_build_arg_named_without_a_value_takes_the_projects_value(
    tmp_path: Path, args: str
) -> None:
    write(tmp_path / "Dockerfile", "FROM busybox\nARG FOO=dockerfile-default\n")
    write(tmp_path / "proj.env", "FOO=1.2\n")
    path = write(
        tmp_path / "proj.yaml", f"services:\n  a:\n    build: {{context: ., args: {args}}}\n"
    )
    spec = good(load_service_file(path))["a"]
    assert spec.build is not None and spec.build.args == (("B", "1"), ("FOO", "1.2"))
    [sub] = spec.substitutions
    assert (sub.name, sub.shown, sub.field) == ("FOO", True, "services.a.build.args.FOO")


def test_a_label_without_a_value_is_not_resolved() -> None:
    """Compose resolves environment and build args only: a bare label stays empty."""
    spec = web("labels: {FOO: }\n", {"FOO": "x"})
    assert spec.labels == (("FOO", ""),)


# --- COMPOSE_PROJECT_NAME ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "env", "expected"),
    [
        ("", {}, "shop-web"),  # a single file's project is named after the file
        ("name: store\n", {}, "store-web"),
        ("name: ${N:-store}\n", {"N": "mall"}, "mall-web"),  # name: resolved first
        ("name: ${COMPOSE_PROJECT_NAME:-store}\n", {}, "store-web"),
        ("name: store\n", {"COMPOSE_PROJECT_NAME": "mine"}, "mine-web"),  # the user's wins
    ],
)
def test_compose_project_name_is_set_for_interpolation(
    head: str, env: dict[str, str], expected: str
) -> None:
    text = (
        head
        + "services:\n  web:\n    image: busybox\n    container_name: ${COMPOSE_PROJECT_NAME}-web\n"
    )
    spec = good(parse_service_text(text, "/etc/healerd/conf.d/shop.yaml", env=env))["web"]
    assert spec.container_name == expected


def test_a_project_directory_sets_its_name_for_interpolation(tmp_path: Path) -> None:
    stack = tmp_path / "Stack"
    body = (
        "services:\n  web:\n    image: busybox\n    container_name: ${COMPOSE_PROJECT_NAME}-web\n"
    )
    write(stack / "compose.yaml", body)
    assert good(load_project_dir(stack))["web"].container_name == "stack-web"
    write(stack / "compose.override.yaml", "name: ${SITE}\n")
    write(stack / ".env", "SITE=cloud\n")
    services = good(load_project_dir(stack))
    assert (services["web"].container_name, services["web"].project) == ("cloud-web", "cloud")
    write(stack / ".env", "COMPOSE_PROJECT_NAME=other\n")
    assert good(load_project_dir(stack))["web"].container_name == "other-web"


# --- COMPOSE_PROFILES=* -------------------------------------------------------------------

PROFILED = """\
services:
  app: {image: busybox}
  debug: {image: busybox, profiles: [debug]}
  tools: {image: busybox, profiles: [ops, tools]}
"""


def test_compose_profiles_star_enables_every_profile(tmp_path: Path) -> None:
    every = parse_service_text(PROFILED, "p.yaml", env={"COMPOSE_PROFILES": "*"})
    assert set(good(every)) == {"app", "debug", "tools"}
    write(tmp_path / "compose.yaml", PROFILED)
    write(tmp_path / ".env", "COMPOSE_PROFILES=ops,*\n")
    assert set(good(load_project_dir(tmp_path))) == {"app", "debug", "tools"}
    some = parse_service_text(PROFILED, "p.yaml", env={"COMPOSE_PROFILES": "ops"})
    assert set(good(some)) == {"app", "tools"}


LIB = "services:\n  lib:\n    image: busybox\n    environment: [UNSET_X, A=1]\n"


def test_an_override_merges_with_an_included_left_out_entry(tmp_path: Path) -> None:
    """Review: the mark of an included entry left out reached the override's merge:
    the project was refused naming an internal type."""
    write(tmp_path / "lib" / "compose.yaml", LIB)
    write(tmp_path / "compose.yaml", "include: [lib/compose.yaml]\nservices: {}\n")
    write(tmp_path / "compose.override.yaml", "services:\n  lib:\n    environment: {B: '2'}\n")
    assert good(load_project_dir(tmp_path))["lib"].environment == (("A", "1"), ("B", "2"))


def test_extends_of_an_included_service_with_a_left_out_entry(tmp_path: Path) -> None:
    write(tmp_path / "lib" / "compose.yaml", LIB)
    main = "include: [lib/compose.yaml]\nservices:\n  web:\n    extends: lib\n"
    write(tmp_path / "compose.yaml", main + "    environment: {B: '2'}\n")
    assert good(load_project_dir(tmp_path))["web"].environment == (("A", "1"), ("B", "2"))
