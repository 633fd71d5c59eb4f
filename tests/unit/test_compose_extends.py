"""`extends` (issue 34): in the same file and from another file, chains, cycles, errors
located in the file at fault; a single conf.d file with extends runs; relative paths
of a file read from another directory (healerd.config.extends, healerd.config.relpaths)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

from healerd.config import load_service_file, parse_service_text
from healerd.config.errors import ConfigError
from healerd.config.extends import resolve_extends
from healerd.config.keys import At, Context
from healerd.config.relpaths import absolutize
from healerd.config.yamlload import LineDict, load_yaml


def _load(text: str, file: str) -> LineDict:
    data, errors = load_yaml(textwrap.dedent(text), file)
    assert not errors and isinstance(data, LineDict), errors
    return data


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _resolved(
    text: str, others: dict[str, str] | None = None, base: Path = Path("/p")
) -> tuple[dict[str, Any], list[str], list[Path]]:
    """The services of `text` (the file /p/compose.yaml) with extends resolved; `others`
    maps a path to the text `load` returns for it."""
    errors: list[ConfigError] = []
    data = _load(text, "/p/compose.yaml")
    loaded: list[Path] = []

    def load(path: Path) -> LineDict | None:
        loaded.append(path)
        if others is None or str(path) not in others:
            errors.append(ConfigError(str(path), None, "file", "cannot read"))
            return None
        return _load(others[str(path)], str(path))

    at = At(errors, "/p/compose.yaml", "", None, None, Context(base))
    resolve_extends(data, Path("/p/compose.yaml"), at, load)
    return _plain(data["services"]), [str(e) for e in errors], loaded


def test_a_service_extends_one_of_the_same_file_by_the_merge_rules() -> None:
    services, errors, _ = _resolved("""
        services:
          common:
            image: busybox
            environment: {TZ: utc, PORT: 80}
            volumes: ["common-volume:/var/lib/backup/data:rw"]
            security_opt: ["label:role:ROLE"]
            command: [a]
          cli:
            extends: {service: common}
            environment: {PORT: 8080}
            volumes: ["cli-volume:/var/lib/backup/data:ro"]
            security_opt: ["label:user:USER"]
            command: b
        """)
    assert not errors
    assert services["cli"] == {
        "image": "busybox",
        "environment": {"TZ": "utc", "PORT": 8080},
        "volumes": ["cli-volume:/var/lib/backup/data:ro"],
        "security_opt": ["label:role:ROLE", "label:user:USER"],
        "command": "b",
    }
    assert "extends" not in services["cli"] and services["common"]["command"] == ["a"]


def test_a_chain_is_followed_and_the_string_form_taken() -> None:
    """The specification's example: cli gets user from base through common."""
    services, errors, _ = _resolved("""
        services:
          base: {image: busybox, user: root}
          common: {image: busybox, extends: {service: base}}
          cli: {extends: common}
        """)
    assert not errors
    assert services["cli"] == {"image": "busybox", "user": "root"}
    assert services["common"] == {"image": "busybox", "user": "root"}


def test_reset_in_the_extending_service_removes_the_base_field() -> None:
    services, errors, _ = _resolved("""
        services:
          base: {image: busybox, ports: ["80"], user: root, environment: {A: 1, B: 2}}
          web:
            extends: base
            ports: !reset []
            user: !override "1000"
            environment:
              A: !reset
        """)
    assert not errors
    assert services["web"] == {"image": "busybox", "user": "1000", "environment": {"B": 2}}


def test_fields_1_29_2_refuses_to_inherit_are_merged_as_the_specification_says() -> None:
    services, errors, _ = _resolved("""
        services:
          db: {image: busybox}
          base: {image: busybox, depends_on: [db], links: [db], network_mode: "service:db"}
          web: {extends: base}
        """)
    assert not errors
    assert services["web"]["depends_on"] == ["db"] and services["web"]["links"] == ["db"]


def test_a_cycle_is_refused_where_it_closes() -> None:
    services, errors, _ = _resolved("""
        services:
          a: {image: busybox, extends: b}
          b: {extends: {service: c}}
          c: {extends: a}
          self: {image: busybox, extends: self}
        """)
    assert errors == [
        "/p/compose.yaml:5:7: services.c.extends: is a cycle: a -> b -> c -> a",
        "/p/compose.yaml:6:26: services.self.extends: is a cycle: self -> self",
    ]
    assert all("extends" not in body for body in services.values())


def test_what_cannot_be_extended_is_reported_at_its_line() -> None:
    _, errors, _ = _resolved("""
        services:
          a: {image: busybox, extends: nope}
          b: {image: busybox, extends: {file: x.yaml}}
          c: {image: busybox, extends: {service: a, flie: x.yaml}}
          d: {image: busybox, extends: [a]}
          e: {image: busybox, extends: {service: a, file: 3}}
        """)
    assert errors == [
        "/p/compose.yaml:3:23: services.a.extends.service: no service 'nope' in this file to "
        "extend",
        "/p/compose.yaml:4:23: services.b.extends.service: is required: the name of the "
        "service to extend",
        "/p/compose.yaml:5:45: services.c.extends.flie: unknown key: extends takes service "
        "and file",
        "/p/compose.yaml:6:23: services.d.extends: must be a mapping with service (and file), "
        "not a list",
        "/p/compose.yaml:7:45: services.e.extends.file: must be a path, not a number",
    ]


COMMON = """
    services:
      common:
        image: busybox
        env_file: common.env
        volumes: [./state:/state, "../shared:/shared:ro", "named:/named",
                  {type: bind, source: conf, target: /conf}]
        build: ./ctx
        environment: {MODE: lab}
      worker:
        extends: common
        command: [sleep, "2"]
      chained:
        extends: {file: ../other/more.yaml, service: more}
"""
MORE = """
    services:
      more: {image: more, volumes: [./m:/m]}
"""


def test_a_service_of_another_file_with_its_paths_from_that_files_directory() -> None:
    others = {"/p/lib/common.yaml": COMMON, "/p/other/more.yaml": MORE}
    services, errors, loaded = _resolved(
        """
        services:
          web:
            extends: {file: lib/common.yaml, service: common}
            environment: {MODE: edge}
          worker:
            extends: {file: ./lib/common.yaml, service: worker}
          more:
            extends: {file: /p/lib/common.yaml, service: chained}
        """,
        others,
    )
    assert not errors
    assert services["web"] == {
        "image": "busybox",
        "env_file": "/p/lib/common.env",
        "volumes": [
            "/p/lib/state:/state",
            "/p/shared:/shared:ro",
            "named:/named",
            {"type": "bind", "source": "/p/lib/conf", "target": "/conf"},
        ],
        "build": "/p/lib/ctx",
        "environment": {"MODE": "edge"},
    }
    assert services["worker"]["command"] == ["sleep", "2"]
    assert services["worker"]["volumes"][0] == "/p/lib/state:/state"
    assert services["more"] == {"image": "more", "volumes": ["/p/other/m:/m"]}
    assert loaded == [Path("/p/lib/common.yaml"), Path("/p/other/more.yaml")]  # each once


def test_a_cycle_across_files_is_refused() -> None:
    others = {"/p/b.yaml": "services:\n  b: {extends: {file: compose.yaml, service: a}}\n"}
    _, errors, _ = _resolved(
        "services:\n  a: {image: x, extends: {file: b.yaml, service: b}}\n", others
    )
    assert errors == [
        "/p/b.yaml:2:7: services.b.extends: is a cycle: a -> /p/b.yaml:b -> a",
    ]


def test_a_file_that_cannot_be_read_or_has_no_such_service() -> None:
    others = {"/p/empty.yaml": "name: x\n", "/p/one.yaml": "services:\n  one: {image: x}\n"}
    _, errors, _ = _resolved(
        """
        services:
          a: {image: x, extends: {file: missing.yaml, service: a}}
          b: {image: x, extends: {file: empty.yaml, service: a}}
          c: {image: x, extends: {file: one.yaml, service: two}}
        """,
        others,
    )
    assert errors == [
        "/p/missing.yaml: file: cannot read",
        "/p/compose.yaml:4:17: services.b.extends.file: /p/empty.yaml declares no services "
        "to extend",
        "/p/compose.yaml:5:17: services.c.extends.service: no service 'two' in /p/one.yaml to "
        "extend",
    ]


def test_an_error_in_an_extended_service_names_its_own_file(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "base.yaml").write_text(
        "services:\n  base:\n    image: busybox\n    mem_limit: 1k\n"
    )
    (tmp_path / "web.yaml").write_text(
        "services:\n  web:\n    extends: {file: lib/base.yaml, service: base}\n    cpus: 0.5\n"
    )
    result = load_service_file(tmp_path / "web.yaml", "web.yaml")
    assert [str(e) for e in result.errors] == [
        f"{tmp_path}/lib/base.yaml:4:5: services.web.mem_limit: must be at least 6m: Docker "
        "refuses a smaller memory limit, not '1k'"
    ]


def test_a_single_service_file_with_extends_runs(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "common.yaml").write_text(
        "services:\n  common:\n    image: busybox\n    environment: {LEVEL: '${LEVEL:-info}'}\n"
        "    volumes: [./data:/data]\n"
    )
    (tmp_path / "app.env").write_text("LEVEL=debug\n")
    (tmp_path / "app.yaml").write_text(
        textwrap.dedent("""
        services:
          base:
            image: busybox
            command: [sleep, "1"]
            ports: ["8080:80"]
          web:
            extends: base
            ports: !reset []
            user: "1000"
          lib:
            extends: {file: lib/common.yaml, service: common}
        """)
    )
    result = load_service_file(tmp_path / "app.yaml", "app.yaml")
    assert not result.errors and result.services is not None
    web, lib = result.services["web"], result.services["lib"]
    assert (web.command, web.ports, web.user) == (("sleep", "1"), (), "1000")
    assert lib.environment == (("LEVEL", "debug"),)
    assert lib.volumes[0].source == f"{tmp_path}/lib/data"


def test_extends_from_text_and_an_unreadable_other_file(tmp_path: Path) -> None:
    result = parse_service_text(
        "services:\n  web:\n    extends: {file: nowhere.yaml, service: x}\n",
        str(tmp_path / "t.yaml"),
    )
    assert [str(e) for e in result.errors] == [  # the missing file said where it is named
        f"{tmp_path}/t.yaml:2:3: services.web.image: is required",
        f"{tmp_path}/t.yaml:3:15: services.web.extends.file: {tmp_path}/nowhere.yaml: "
        "the file does not exist",
    ]


def test_another_file_is_read_through_the_trust_checks(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        return  # the check judges owners: only root can make a file someone else's
    (tmp_path / "lib.yaml").write_text("services:\n  x: {image: busybox}\n")
    os.chown(tmp_path / "lib.yaml", 1234, 1234)
    os.chmod(tmp_path, 0o755)
    (tmp_path / "web.yaml").write_text(
        "services:\n  web:\n    extends: {file: lib.yaml, service: x}\n"
    )
    result = load_service_file(tmp_path / "web.yaml", "web.yaml", strict_modes=True)
    assert result.services is None
    assert any(e.file == f"{tmp_path}/lib.yaml" for e in result.errors), result.errors


# --- relative paths of a file read from another directory ----------------------------------


def test_absolutize_rewrites_every_relative_path_and_nothing_else() -> None:
    data = _load(
        """
        include:
          - other/compose.yaml
          - {path: [a.yaml, /abs/b.yaml], project_directory: .., env_file: [x.env]}
        services:
          web:
            env_file: [a.env, {path: b.env, required: false}, /abs.env]
            volumes: [./a:/a, ../b:/b, .c:/c, name:/n, /abs:/abs, ~/h:/h, /anon,
                      {type: bind, source: rel, target: /r}, {type: volume, source: v, target: /v}]
            build: {context: ctx, dockerfile: Dockerfile}
            extends: {file: base.yaml, service: x}
          remote:
            build: https://github.com/x/y.git
        secrets:
          s: {file: ./s.txt}
        configs:
          c: {file: c.txt}
          e: {external: true}
        volumes:
          dev: {driver: local, driver_opts: {type: none, o: bind, device: ./dev}}
          nfs: {driver_opts: {o: "addr=1", device: ":/export"}}
        """,
        "f.yaml",
    )
    absolutize(data, Path("/d/lib"))
    assert _plain(data) == {
        "include": [
            "/d/lib/other/compose.yaml",
            {"path": ["/d/lib/a.yaml", "/abs/b.yaml"], "project_directory": "/d",
             "env_file": ["/d/lib/x.env"]},
        ],
        "services": {
            "web": {
                "env_file": ["/d/lib/a.env", {"path": "/d/lib/b.env", "required": False},
                             "/abs.env"],
                "volumes": ["/d/lib/a:/a", "/d/b:/b", "/d/lib/.c:/c", "name:/n", "/abs:/abs",
                            "~/h:/h", "/anon", {"type": "bind", "source": "/d/lib/rel",
                            "target": "/r"}, {"type": "volume", "source": "v", "target": "/v"}],
                "build": {"context": "/d/lib/ctx", "dockerfile": "Dockerfile"},
                "extends": {"file": "/d/lib/base.yaml", "service": "x"},
            },
            "remote": {"build": "https://github.com/x/y.git"},
        },
        "secrets": {"s": {"file": "/d/lib/s.txt"}},
        "configs": {"c": {"file": "/d/lib/c.txt"}, "e": {"external": True}},
        "volumes": {
            "dev": {"driver": "local", "driver_opts": {"type": "none", "o": "bind",
                                                       "device": "/d/lib/dev"}},
            "nfs": {"driver_opts": {"o": "addr=1", "device": ":/export"}},
        },
    }  # fmt: skip
    assert data["secrets"]["s"].raw["file"] == "/d/lib/s.txt"  # as checks show it
