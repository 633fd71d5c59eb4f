"""The JSON Schema and docs/reference/config.md are generated from the checker's tables
and kept current.

The schema must accept every example in config/ and reject each file of the invalid
corpus at the place the corpus index names (files whose error is beyond JSON Schema are
marked there, with why).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import jsonschema
import pytest

from healerd.config.extension import EXTENSION_FIELDS
from healerd.config.fields import SERVICE_FIELDS, SERVICE_KEYS
from healerd.config.healthcheck import HEALTHCHECK_FIELDS
from healerd.config.hooks import hook_fields
from healerd.config.rollout import RESTART_POLICY_FIELDS, UPDATE_CONFIG_FIELDS
from healerd.config.schema import (
    REFERENCE_FILE,
    SCHEMA_FILE,
    model_fields,
    reference_text,
    schema_text,
    service_schema,
)
from healerd.config.servicefile import parse_service_text

# One table (settings.SETTINGS_FIELDS) holds each setting's check and its doc.
from healerd.config.settings import SETTING_KEYS as SETTINGS_DOCS
from healerd.config.settings import SETTING_KEYS as _CHECKS
from healerd.config.units import format_duration
from healerd.model import Hook, RestartPolicy, ServiceSpec, UpdateConfig
from tests.unit.harness.documents import CASES, CORPUS, REPO, load, validator

REGENERATE = "regenerate with: python -m healerd.config.schema"


# --- one table drives the checker, the schema and the reference ------------------------------


def test_shipped_schema_is_current() -> None:
    assert (REPO / SCHEMA_FILE).read_text(encoding="utf-8") == schema_text(), REGENERATE


def test_shipped_reference_is_current() -> None:
    assert (REPO / REFERENCE_FILE).read_text(encoding="utf-8") == reference_text(), REGENERATE


def test_the_table_covers_the_model() -> None:
    attrs = {key.attr or key.name for key in SERVICE_FIELDS}
    # Set by healerd, never written (the project's from the file's top level).
    derived = {"name", "source_file", "env_digest", "project", "network_aliases"}
    derived |= {"networks_to_create", "volumes_to_create", "secrets_digest", "network_endpoints"}
    derived |= {"substitutions"}  # what interpolation put in (healerd.config.masking)
    derived |= {"notify", "pre_update"}  # x-healerd's (healerd.config.extension)
    derived |= {"snapshot", "snapshot_keep"}  # x-healerd's (healerd.config.extension.snapshot)
    derived |= {"update_policy"}  # x-healerd's update_* (healerd.config.updatekeys)
    # Compose's spellings of other fields (healerd.config.deploy.merge folds them in).
    spellings = {"deploy", "scale"}
    assert attrs - spellings == {f.name for f in dataclasses.fields(ServiceSpec)} - derived
    assert all(key.check is not None for key in SERVICE_FIELDS)
    nested = {key.name: key.children for key in SERVICE_FIELDS if key.children}
    assert nested == {
        "healthcheck": HEALTHCHECK_FIELDS,
        "update_config": UPDATE_CONFIG_FIELDS,
        "restart_policy": RESTART_POLICY_FIELDS,
        "x-healerd": EXTENSION_FIELDS,
        "post_start": hook_fields("post_start"),
        "pre_stop": hook_fields("pre_stop"),
    }
    # auto_update, notify and pre_update: fields of the spec, not a class of their own.
    hook = {f.name for f in dataclasses.fields(Hook)}
    models = {
        **model_fields(),
        "x-healerd": {
            "auto_update",
            "notify",
            "pre_update",
            *("update_window", "update_delay", "update_lock"),  # its UpdatePolicy
            *("snapshot", "snapshot_keep"),  # healerd.config.snapshotkeys
        },
        "post_start": hook,
        "pre_stop": hook,
    }
    for name, children in nested.items():
        assert {key.name for key in children} == models[name], name


def test_table_defaults_are_the_models() -> None:
    spec = ServiceSpec(name="web", image="busybox")
    for key in SERVICE_FIELDS:
        if not key.required and key.name not in ("deploy", "scale"):
            assert key.default == getattr(spec, key.attr or key.name), key.name
    for key in UPDATE_CONFIG_FIELDS:
        assert key.default == getattr(UpdateConfig(), key.name)
    for key in RESTART_POLICY_FIELDS:
        assert key.default == getattr(RestartPolicy(), key.name)


def test_every_table_example_is_accepted_by_checker_and_schema() -> None:
    check = validator()
    for key in SERVICE_FIELDS:
        text = f"services:\n  web:\n    image: busybox\n    {key.name}: {key.example}\n"
        if key.name == "image":
            text = f"services:\n  web:\n    image: {key.example}\n"
        if key.name in ("env_file", "build"):
            continue  # names files that must exist: test_config_envfile, test_build_config
        if key.name in ("secrets", "configs", "links"):
            continue  # name what the top level or another service declares: test_compose_secrets
        result = parse_service_text(text, "t.yaml")
        assert result.errors == (), [str(e) for e in result.errors]
        assert list(check.iter_errors(load(text, "t.yaml"))) == [], key.name
        for child in key.children:
            text = (
                f"services:\n  web:\n    image: busybox\n    {key.name}:\n"
                f"      {child.name}: {child.example}\n"
            )
            if key.name == "healthcheck" and child.name not in ("test", "disable"):
                text += "      test: [CMD, /bin/check]\n"
            if child.name == "snapshot":  # names a volume of the file the service mounts
                text += "    volumes: [pgdata:/data]\nvolumes:\n  pgdata:\n"
            if key.name in ("post_start", "pre_stop"):  # a list of hooks, each a mapping
                text = text.replace(f"      {child.name}:", f"      - {child.name}:")
                if child.name != "command":
                    text += "        command: [/bin/true]\n"
            result = parse_service_text(text, "t.yaml")
            assert result.errors == (), [str(e) for e in result.errors]
            assert list(check.iter_errors(load(text, "t.yaml"))) == [], child.name


def test_unknown_keys_follow_the_table() -> None:
    assert frozenset(service_schema()["definitions"]["service"]["properties"]) == SERVICE_KEYS
    result = parse_service_text("services:\n  web:\n    image: a\n    env_digest: x\n", "t.yaml")
    assert [e.field for e in result.errors] == ["services.web.env_digest"]


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 0.005, 0.25, 10, 90, 600, 7200)] == [
        "0s",
        "5ms",
        "250ms",
        "10s",
        "90s",
        "10m",
        "2h",
    ]


# --- the schema against real files ------------------------------------------------------


EXAMPLES = sorted(p for p in (REPO / "config" / "conf.d").glob("*.y*ml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_schema_accepts_every_example_in_config(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# yaml-language-server: $schema=../healerd-services.schema.json\n")
    errors = list(validator().iter_errors(load(text, path.name)))
    assert errors == [], [e.message for e in errors]


def test_schema_accepts_the_commented_out_fields_of_the_example() -> None:
    """example.yaml shows optional fields as comments: uncommented, they must pass too."""
    text = (REPO / "config" / "conf.d" / "example.yaml").read_text(encoding="utf-8")
    body = text[text.index("services:") :]
    uncommented = re.sub(r"^(\s*)# (?=[a-z_]+:|  [a-z_]+:|  - )", r"\1", body, flags=re.M)
    uncommented = re.sub(r"^\s*#   # disable: true.*\n", "", uncommented, flags=re.M)
    uncommented = text[: text.index("services:")] + uncommented
    data = load(uncommented, "example.yaml")
    hello = data["services"]["hello"]
    assert {"volumes", "ports", "healthcheck", "update_config", "restart_policy"} <= set(hello)
    errors = list(validator().iter_errors(data))
    assert errors == [], [e.message for e in errors]
    # What remains for the checker is what the schema cannot see.
    result = parse_service_text(uncommented, str(REPO / "config" / "conf.d" / "example.yaml"))
    assert {e.field for e in result.errors} == {
        "services.hello.env_file[0]",  # hello.env does not exist
        "services.hello.ports",  # a fixed host port with replicas: 2
        "services.hello.update_config.order",  # start-first with a fixed host port
    }


SCHEMA_CASES = sorted(name for name, case in CASES.items() if case["schema"] is not False)


def test_how_many_corpus_files_the_schema_can_check() -> None:
    unchecked = {name: case["why"] for name, case in CASES.items() if case["schema"] is False}
    assert all(unchecked.values())
    assert len(SCHEMA_CASES) >= 45 and len(unchecked) <= 20, unchecked


@pytest.mark.parametrize("name", SCHEMA_CASES)
def test_schema_rejects_the_invalid_corpus_where_it_should(name: str) -> None:
    data = load((CORPUS / name).read_text(encoding="utf-8"), name)
    errors = list(validator().iter_errors(data))
    assert errors, f"{name}: the schema accepts it"
    assert CASES[name]["schema"] in places(errors)


def places(errors: list[jsonschema.ValidationError]) -> set[str]:
    """Where errors sit, counting those inside anyOf branches (their `context`)."""
    found: set[str] = set()
    stack = list(errors)
    while stack:
        error = stack.pop()
        found.add("/".join(str(p) for p in error.absolute_path))
        stack.extend(error.context or ())
    return found


def test_settings_docs_cover_every_setting() -> None:
    assert set(SETTINGS_DOCS) == set(_CHECKS)
    reference = reference_text()
    for name in _CHECKS:
        assert f"| `{name}` |" in reference
    for key in SERVICE_FIELDS:
        assert f"| `{key.name}` |" in reference
        for child in key.children:
            assert f"| `{key.name}.{child.name}` |" in reference


def test_a_list_setting_s_keys_read_as_items_and_their_defaults_as_they_are(
    tmp_path: Path,
) -> None:
    """notifications (a list) is shown as healerd takes it, with the defaults it has."""
    import os

    from healerd.config import SettingsError, load_settings

    reference = reference_text()
    rows = {
        line.split(" | ")[0]: line.split(" | ")
        for line in reference.splitlines()
        if line.startswith("| `notifications.")
    }
    url, name, events, services = (
        rows[f"| `notifications.{k}`"] for k in ("url", "name", "events", "services")
    )
    assert (
        url[2] == "required"
        and url[3] == "`notifications: [{url: ntfy://ntfy.example.net/edge-7}]`"
    )
    assert name[2] == "its position and masked URL"
    assert events[2] == "all but `heal`" and services[2] == "every service"
    assert "docs/user-guide.md, Prometheus alerting rules" in reference
    assert "### Prometheus alerting rules" in (REPO / "docs" / "user-guide.md").read_text()
    # The example as written loads; the mapping form the reference showed before does not.
    path = tmp_path / "healerd.yaml"
    os.chmod(tmp_path, 0o755)
    path.write_text(url[3].strip("`") + "\n")
    os.chmod(path, 0o600)
    (target,) = load_settings(path).notifications
    assert target.services is None and "heal" not in target.events
    path.write_text("notifications: {url: ntfy://ntfy.example.net/edge-7}\n")
    with pytest.raises(SettingsError, match="must be a list of targets"):
        load_settings(path)
