"""Lifecycle hooks in a service file (issue 33, point 5): Compose's post_start and
pre_stop, x-healerd's pre_update, each a list of {command, user, privileged,
working_dir, environment}; errors name file, line and field; what enters the hash."""

from __future__ import annotations

import dataclasses

from healerd.config import parse_service_text
from healerd.config.unsupported import UNSUPPORTED
from healerd.model import Hook, ServiceSpec

FULL = """\
services:
  web:
    image: busybox
    environment: {TZ: UTC}
    post_start:
      - command: echo "ready now" ${WHO}
        user: root
        privileged: true
        working_dir: /srv/
        environment: {MODE: warm}
      - command: [touch, /ready]
    pre_stop:
      - command: [/bin/drain, --fast]
        environment: [GRACE=5]
    x-healerd:
      auto_update: registry
      pre_update:
        - command: [/usr/local/bin/backup]
          user: 1000
"""


def _web(text: str) -> ServiceSpec:
    result = parse_service_text(text, "h.yaml", env={"WHO": "me"})
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None
    return result.services["web"]


def _errors(text: str) -> list[str]:
    return [str(e) for e in parse_service_text(text, "h.yaml", env={}).errors]


def test_every_key_of_a_hook_is_read_as_the_service_reads_its_own() -> None:
    web = _web(FULL)
    assert web.post_start == (
        Hook(
            ("echo", "ready now", "me"),
            user="root",
            privileged=True,
            working_dir="/srv",
            environment=(("MODE", "warm"),),
        ),
        Hook(("touch", "/ready")),
    )
    assert web.pre_stop == (Hook(("/bin/drain", "--fast"), environment=(("GRACE", "5"),)),)
    assert web.pre_update == (Hook(("/usr/local/bin/backup",), user="1000"),)
    assert not {"post_start", "pre_stop"} & set(UNSUPPORTED)


def test_post_start_enters_the_hash_and_pre_stop_and_pre_update_do_not() -> None:
    """As Compose hashes post_start (it runs once per container); pre_stop and
    pre_update are read when they run, so an edit replaces no container."""
    base = ServiceSpec(name="web", image="busybox")
    hooks = (Hook(("true",)),)
    assert dataclasses.replace(base, post_start=hooks).spec_hash != base.spec_hash
    assert dataclasses.replace(base, pre_stop=hooks).spec_hash == base.spec_hash
    assert dataclasses.replace(base, pre_update=hooks).spec_hash == base.spec_hash
    plain = _web("services:\n  web:\n    image: busybox\n    environment: {TZ: UTC}\n")
    assert dataclasses.replace(_web(FULL), post_start=()).spec_hash == plain.spec_hash


def test_errors_name_file_line_and_field() -> None:
    text = """\
services:
  web:
    image: busybox
    post_start:
      - command: []
      - user: root
      - echo hi
      - command: [true]
        working_dir: relative
        privileged: maybe
        timeout: 5s
    pre_stop: {command: x}
    x-healerd:
      pre_update:
        - command: "unclosed 'quote"
          environment: [NOT A PAIR]
"""
    assert _errors(text) == [
        "h.yaml:5:9: services.web.post_start[0].command: must not be empty",
        "h.yaml:6:9: services.web.post_start[1].command: is required",
        "h.yaml:7:9: services.web.post_start[2]: must be a mapping with at least a command, "
        "not a string",
        "h.yaml:8:19: services.web.post_start[3].command[0]: must be a string, not "
        "true/false (quote it)",
        "h.yaml:9:9: services.web.post_start[3].working_dir: 'relative' must be an absolute path",
        "h.yaml:10:9: services.web.post_start[3].privileged: must be true or false, not a string",
        "h.yaml:11:9: services.web.post_start[3].timeout: unknown key 'timeout'",
        "h.yaml:12:5: services.web.pre_stop: must be a list of hooks such as "
        "[{command: [...]}], not a mapping",
        "h.yaml:15:11: services.web.x-healerd.pre_update[0].command: cannot split into "
        "words: No closing quotation",
        "h.yaml:16:25: services.web.x-healerd.pre_update[0].environment[0]: is not "
        "KEY=value (write KEY=value, or KEY= for an empty value); the entry is not shown, "
        "as it may hold a secret",
    ]


def test_no_hooks_and_null_hooks_are_none() -> None:
    web = _web("services:\n  web:\n    image: busybox\n    post_start:\n    pre_stop: []\n")
    assert (web.post_start, web.pre_stop, web.pre_update) == ((), (), ())
