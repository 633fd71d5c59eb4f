"""A project directory in conf.d (issue 34 point 1): Compose's file names and override,
`.env` with COMPOSE_FILE, COMPOSE_PATH_SEPARATOR, COMPOSE_PROFILES and
COMPOSE_PROJECT_NAME, the project's name, one verdict for all its files (errors naming
the file at fault), and conf.d listing projects beside files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from healerd.config import DesiredStore, list_config_files, load_conf_dir
from healerd.config.projectdir import compose_files, is_project_dir, load_project_dir
from tests.unit.harness.projects import good, write

BASE = """\
services:
  web:
    image: busybox:${TAG:-1}
    command: [httpd, -f]
    environment: {MODE: base}
  db:
    image: busybox
    profiles: [db]
"""


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["compose.yaml", "docker-compose.yml"], ["compose.yaml"]),
        (["compose.yml", "compose.override.yml"], ["compose.yml", "compose.override.yml"]),
        (["compose.yaml", "compose.override.yml"], ["compose.yaml", "compose.override.yml"]),
        (
            ["docker-compose.yml", "docker-compose.override.yml", "compose.override.yaml"],
            ["docker-compose.yml", "docker-compose.override.yml"],
        ),
        (["docker-compose.yaml"], ["docker-compose.yaml"]),
        (["compose.override.yaml"], []),
    ],
)
def test_compose_files_are_found_by_compose_s_names_and_paired_with_their_override(
    tmp_path: Path, names: list[str], expected: list[str]
) -> None:
    for name in names:
        write(tmp_path / name, "services: {}\n")
    assert [p.name for p in compose_files(tmp_path, {})] == expected


def test_compose_file_lists_the_files_with_its_separator(tmp_path: Path) -> None:
    env = {"COMPOSE_FILE": "base.yml;ops/edge.yml", "COMPOSE_PATH_SEPARATOR": ";"}
    assert compose_files(tmp_path, env) == [tmp_path / "base.yml", tmp_path / "ops/edge.yml"]
    assert compose_files(tmp_path, {"COMPOSE_FILE": "a.yml:b.yml"})[1] == tmp_path / "b.yml"


def test_the_override_is_merged_over_the_file_and_the_env_interpolates_both(
    tmp_path: Path,
) -> None:
    project = tmp_path / "My.Stack"
    write(project / "compose.yaml", BASE)
    write(project / "compose.override.yaml", 'services:\n  web:\n    environment: {HOST: "${H}"}\n')
    write(project / ".env", "TAG=2\nH=edge-7\n")
    result = load_project_dir(project, "conf.d/mystack")
    web = good(result)["web"]
    assert web.image == "busybox:2" and web.project == "mystack"
    assert dict(web.environment) == {"MODE": "base", "HOST": "edge-7"}
    assert web.source_file == "conf.d/mystack"
    assert set(good(result)) == {"web"}  # db's profile is not active
    assert {Path(s).name for s in result.sources} == {
        "compose.yaml",
        "compose.override.yaml",
        ".env",
    }


def test_env_names_the_files_the_profiles_and_the_project(tmp_path: Path) -> None:
    write(tmp_path / "base.yml", BASE)
    write(tmp_path / "edge.yml", "services:\n  web:\n    environment: {MODE: edge}\n")
    write(
        tmp_path / ".env",
        "COMPOSE_FILE=base.yml:edge.yml\nCOMPOSE_PROFILES=db\nCOMPOSE_PROJECT_NAME=Site7\n",
    )
    services = good(load_project_dir(tmp_path))
    assert set(services) == {"web", "db"}
    assert dict(services["web"].environment) == {"MODE": "edge"}
    assert services["db"].project == "site7"


def test_name_in_the_files_names_the_project_unless_the_variable_does(tmp_path: Path) -> None:
    write(tmp_path / "stack" / "compose.yaml", "name: cloud\n" + BASE)
    assert good(load_project_dir(tmp_path / "stack"))["web"].project == "cloud"
    write(tmp_path / "stack" / ".env", "COMPOSE_PROJECT_NAME=other\n")
    assert good(load_project_dir(tmp_path / "stack"))["web"].project == "other"


def test_a_link_names_the_project_after_the_directory_it_leads_to(tmp_path: Path) -> None:
    write(tmp_path / "opt" / "nextcloud" / "docker-compose.yml", BASE)
    (tmp_path / "conf.d").mkdir()
    os.symlink(tmp_path / "opt" / "nextcloud", tmp_path / "conf.d" / "cloud")
    (result,) = load_conf_dir(tmp_path / "conf.d", strict_modes=False)
    assert result.file == str(tmp_path / "conf.d" / "cloud")
    assert good(result)["web"].project == "nextcloud"


def test_an_error_in_the_override_names_the_override_and_refuses_the_project(
    tmp_path: Path,
) -> None:
    write(tmp_path / "compose.yaml", BASE)
    override = write(
        tmp_path / "compose.override.yaml", "services:\n  web:\n    restart: sometimes\n"
    )
    result = load_project_dir(tmp_path, "conf.d/p")
    assert result.services is None and result.file == "conf.d/p"
    (error,) = result.errors
    assert (error.file, error.line, error.field) == (str(override), 3, "services.web.restart")


def test_a_missing_listed_file_or_an_empty_one_refuses_the_project(tmp_path: Path) -> None:
    write(tmp_path / "compose.yaml", BASE)
    write(tmp_path / ".env", "COMPOSE_FILE=compose.yaml:gone.yaml\n")
    (error,) = load_project_dir(tmp_path).errors
    assert error.file.endswith("gone.yaml") and "does not exist" in error.reason
    write(tmp_path / ".env", "")
    write(tmp_path / "compose.override.yaml", "")
    (error,) = load_project_dir(tmp_path).errors
    assert error.file.endswith("compose.override.yaml") and "empty" in error.reason


def test_a_directory_without_compose_files_but_with_env_is_refused(tmp_path: Path) -> None:
    write(tmp_path / ".env", "A=1\n")
    (error,) = load_project_dir(tmp_path, "conf.d/x").errors
    assert error.file == "conf.d/x" and "no Compose file" in error.reason


def test_conf_d_lists_projects_beside_files_and_skips_other_directories(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "services: {}\n")
    write(tmp_path / "b" / "compose.yaml", "services: {}\n")
    write(tmp_path / "c" / "notes.txt", "not a project\n")
    write(tmp_path / ".git" / "compose.yaml", "services: {}\n")
    write(tmp_path / "d.bak" / "compose.yaml", "services: {}\n")
    assert [p.name for p in list_config_files(tmp_path)] == ["a.yaml", "b"]
    assert is_project_dir(tmp_path / "b") and not is_project_dir(tmp_path / "c")


def test_a_project_and_a_file_declaring_one_service_conflict_like_two_files(
    tmp_path: Path,
) -> None:
    write(tmp_path / "a.yaml", "services:\n  web:\n    image: busybox\n")
    write(tmp_path / "b" / "compose.yaml", BASE)
    state = DesiredStore().update(load_conf_dir(tmp_path, strict_modes=False))
    assert state.services["web"].source_file == str(tmp_path / "a.yaml")
    assert any("declared in both" in e.reason for e in state.errors)


def test_a_project_being_written_is_kept_whole(tmp_path: Path) -> None:
    write(tmp_path / "p" / "compose.yaml", BASE)
    override = write(tmp_path / "p" / "compose.override.yaml", "services: {}\n")
    store = DesiredStore()
    store.update(load_conf_dir(tmp_path, strict_modes=False))
    assert store.held_by([override]) == [str(tmp_path / "p")]
    assert str(override) in store.sources()
    assert store.held_by([tmp_path / "elsewhere.yaml"]) == []


def test_under_strict_modes_an_untrusted_project_directory_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "p"
    write(project / "compose.yaml", BASE)
    project.chmod(0o777)
    (error,) = load_project_dir(project, "conf.d/p", strict_modes=True).errors
    assert error.field == "directory" and error.file == "conf.d/p"


def test_files_extending_each_other_are_a_cycle_named_as_one(tmp_path: Path) -> None:
    write(
        tmp_path / "compose.yaml",
        "services:\n  a:\n    image: busybox\n    extends: {file: other.yml, service: b}\n",
    )
    write(
        tmp_path / "other.yml",
        "services:\n  b:\n    image: busybox\n    extends: {file: compose.yaml, service: a}\n",
    )
    errors = load_project_dir(tmp_path).errors
    assert errors and all("cycle" in e.reason for e in errors), [str(e) for e in errors]


def test_an_included_project_in_a_project_directory_keeps_its_own_paths(tmp_path: Path) -> None:
    write(tmp_path / "compose.yaml", "include:\n  - path: db/compose.yaml\n" + BASE)
    write(
        tmp_path / "db" / "compose.yaml",
        "services:\n  pg:\n    image: busybox:${PG}\n    volumes: [./data:/var/lib/pg]\n",
    )
    write(tmp_path / "db" / ".env", "PG=15\n")
    services = good(load_project_dir(tmp_path))
    assert services["pg"].image == "busybox:15"
    assert [v.source for v in services["pg"].volumes] == [str(tmp_path / "db" / "data")]


def test_compose_file_in_a_subdirectory_starts_paths_and_the_name_there(tmp_path: Path) -> None:
    """As docker-compose (v1 and v2) does: the working directory is the first file's."""
    write(
        tmp_path / "stack" / "test" / "docker-compose.yml",
        "services:\n  app:\n    image: busybox\n    volumes: [../data:/data]\n",
    )
    write(tmp_path / "stack" / ".env", "COMPOSE_FILE=test/docker-compose.yml\n")
    app = good(load_project_dir(tmp_path / "stack"))["app"]
    assert app.project == "test"
    assert [v.source for v in app.volumes] == [str(tmp_path / "stack" / "data")]


def test_a_project_that_cannot_be_read_for_a_while_keeps_its_services(tmp_path: Path) -> None:
    """A link to a directory not mounted yet, or a compose file briefly missing (rm, then
    cp): errors that keep the last good state; only removing the entry removes it."""
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    write(tmp_path / "opt" / "cloud" / "compose.yaml", BASE)
    os.symlink(tmp_path / "opt" / "cloud", conf_d / "cloud")
    write(conf_d / "local" / "compose.yaml", BASE.replace("web:", "api:"))
    store = DesiredStore()

    def update() -> tuple[set[str], bool]:
        state = store.update(load_conf_dir(conf_d, strict_modes=False, known=store.known()))
        return set(state.services), bool(state.errors)

    assert update() == ({"web", "api"}, False)
    (tmp_path / "opt" / "cloud").rename(tmp_path / "opt" / "moved")
    (conf_d / "local" / "compose.yaml").unlink()
    assert update() == ({"web", "api"}, True)
    (tmp_path / "opt" / "moved").rename(tmp_path / "opt" / "cloud")
    write(conf_d / "local" / "compose.yaml", BASE.replace("web:", "api:"))
    assert update() == ({"web", "api"}, False)
    (conf_d / "cloud").unlink()
    assert update() == ({"api"}, False)


def test_strict_modes_refuse_a_dockerfile_others_may_change(tmp_path: Path) -> None:
    """The Dockerfile is what the image is built from: inside the context or outside it,
    it and its directory must be trusted like the project's files."""
    project = tmp_path / "app"
    write(project / "ctx" / "x", "")
    evil = tmp_path / "evil"
    write(evil / "Dockerfile", "FROM busybox\n")
    evil.chmod(0o777)
    write(
        project / "compose.yaml",
        f"services:\n  web:\n    build: {{context: ./ctx, dockerfile: {evil}/Dockerfile}}\n",
    )
    errors = load_project_dir(project, strict_modes=True).errors
    assert errors and "evil" in errors[0].reason
    write(project / "compose.yaml", "services:\n  web:\n    build: .\n")
    write(project / "Dockerfile", "FROM busybox\n").chmod(0o666)
    errors = load_project_dir(project, strict_modes=True).errors
    assert errors and "Dockerfile" in errors[0].reason
    (project / "Dockerfile").chmod(0o644)
    assert load_project_dir(project, strict_modes=True).errors == ()


def test_a_missing_include_or_extends_file_is_said_at_the_line_that_names_it(
    tmp_path: Path,
) -> None:
    write(
        tmp_path / "compose.yaml",
        "include:\n  - path: gone.yaml\nservices:\n  web:\n    image: busybox\n"
        "    extends:\n      file: nothere.yaml\n      service: base\n",
    )
    result = load_project_dir(tmp_path)
    assert result.services is None
    assert [str(e) for e in result.errors] == [
        f"{tmp_path}/compose.yaml:2:5: include[0].path: {tmp_path}/gone.yaml: "
        "the file does not exist",
        f"{tmp_path}/compose.yaml:7:7: services.web.extends.file: {tmp_path}/nothere.yaml: "
        "the file does not exist",
    ]
