"""x-healerd's snapshot and snapshot_keep (issue 33): the listed volumes become the
engine's names of named volumes the service mounts; anything else is an error at its
file:line; neither changes the spec hash."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from healerd.config import parse_service_text
from healerd.model import ServiceSpec

HEAD = """\
name: app
services:
  db:
    image: postgres:16
    volumes: [pgdata:/pg, /srv/conf:/conf, {type: volume, source: wal, target: /wal}]
"""
TAIL = """\
volumes:
  pgdata:
  wal: {name: shared-wal}
  unused:
  nfs: {driver_opts: {type: nfs, o: "addr=10.0.0.1", device: ":/x"}}
  old: {external: true}
"""


def parse(ext: str, tail: str = TAIL) -> tuple[ServiceSpec | None, list[str]]:
    text = HEAD + textwrap.indent(ext, "    ") + tail
    result = parse_service_text(text, "conf.d/app.yaml", env={})
    services = result.services or {}
    return services.get("db"), [str(e) for e in result.errors]


def test_listed_volumes_get_the_engines_names() -> None:
    spec, errors = parse("x-healerd: {snapshot: [pgdata, wal], snapshot_keep: 3}\n")
    assert errors == []
    assert spec is not None
    assert (spec.snapshot, spec.snapshot_keep) == (("app_pgdata", "shared-wal"), 3)


def test_absent_means_no_snapshot_and_keep_two() -> None:
    spec, errors = parse("x-healerd: {auto_update: registry}\n")
    assert errors == [] and spec is not None
    assert (spec.snapshot, spec.snapshot_keep) == ((), 2)


def test_snapshot_settings_do_not_change_the_spec_hash() -> None:
    spec, _ = parse("x-healerd: {snapshot: [pgdata], snapshot_keep: 5}\n")
    assert spec is not None
    plain = dataclasses.replace(spec, snapshot=(), snapshot_keep=2)
    assert spec.spec_hash == plain.spec_hash


@pytest.mark.parametrize(
    ("ext", "error"),
    [
        (
            "x-healerd: {snapshot: [unused]}\n",
            "conf.d/app.yaml:6:28: services.db.x-healerd.snapshot[0]: the service does not "
            "mount volume 'unused' (add it to its volumes:)",
        ),
        (
            "x-healerd:\n  snapshot:\n    - pgdata\n    - nope\n",
            "conf.d/app.yaml:9:11: services.db.x-healerd.snapshot[1]: 'nope' is not a named "
            "volume of this file (top-level volumes: nfs, old, pgdata, unused, wal)",
        ),
        (
            "x-healerd: {snapshot: [conf]}\n",
            "is not a named volume of this file",
        ),
        (
            "x-healerd: {snapshot: [pgdata, pgdata]}\n",
            "services.db.x-healerd.snapshot[1]: names volume 'pgdata' twice",
        ),
        (
            "x-healerd: {snapshot: pgdata}\n",
            "conf.d/app.yaml:6:17: services.db.x-healerd.snapshot: must be a list of volume "
            "keys such as [pgdata], not",
        ),
        (
            "x-healerd: {snapshot: [pgdata], snapshot_keep: 0}\n",
            "services.db.x-healerd.snapshot_keep: must be a whole number from 1 to 100",
        ),
        ("x-healerd: {snapshot_keep: true}\n", "must be a whole number from 1 to 100"),
        ("x-healerd: {snapshot: [7]}\n", "must be the key of a volume"),
    ],
)
def test_errors_name_file_line_and_field(ext: str, error: str) -> None:
    _, errors = parse(ext)
    assert any(error in e for e in errors), errors


def test_a_volume_off_this_host_is_refused() -> None:
    text = HEAD.replace("/srv/conf:/conf", "nfs:/nfs")
    result = parse_service_text(
        text + "    x-healerd: {snapshot: [nfs]}\n" + TAIL, "conf.d/app.yaml", env={}
    )
    assert [str(e) for e in result.errors] == [
        "conf.d/app.yaml:6:28: services.db.x-healerd.snapshot[0]: volume 'nfs' has "
        "driver_opts: its files are not in a directory of this host, so healerd cannot "
        "copy them"
    ]


def test_an_external_volume_may_be_listed() -> None:
    text = HEAD.replace("/srv/conf:/conf", "old:/old")
    result = parse_service_text(
        text + "    x-healerd: {snapshot: [old]}\n" + TAIL, "conf.d/app.yaml", env={}
    )
    assert result.errors == ()
    assert result.services is not None
    assert result.services["db"].snapshot == ("old",)
