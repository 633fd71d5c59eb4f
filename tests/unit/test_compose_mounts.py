"""Compose's mount and port syntax (issue 16): the short-syntax modes, the long syntax of
`volumes` (bind, volume, tmpfs) and of `ports`, each refused with file, line and field
when wrong, and the engine request each becomes (binds or Mounts, as docker-compose
1.29.2 sends them; tests/integration/test_compose_diff.py compares with it)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from healerd.config import parse_service_text
from healerd.engine.docker.request import api_needs, mounts
from healerd.model import PortSpec, ServiceSpec, VolumeSpec
from healerd.vocabulary import VolumeKind

FILE = "/etc/healerd/conf.d/stack.yaml"

SHORT = """\
services:
  a:
    image: busybox:1.36
    volumes:
      - ./conf:/etc/app:ro,z
      - /srv/code:/code:cached
      - data:/data:nocopy
      - /srv/shared:/shared:rw,rslave,Z,delegated
      - other:/other:ro
      - /anon
volumes:
  data: {}
"""

LONG = """\
services:
  a:
    image: busybox:1.36
    volumes:
      - type: bind
        source: ./conf
        target: /etc/app
        read_only: true
        bind: {propagation: rslave, selinux: z}
      - type: bind
        source: conf2
        target: /conf2
      - type: bind
        source: /srv/must-exist
        target: /strict
        bind: {create_host_path: false, propagation: rprivate}
        consistency: cached
      - type: volume
        source: data
        target: /data
        volume: {nocopy: true}
      - type: volume
        source: undeclared
        target: /undeclared
        read_only: true
      - type: volume
        target: /anon
      - type: tmpfs
        target: /cache
        tmpfs: {size: 64m, mode: "1777"}
      - {type: tmpfs, target: /scratch, tmpfs: {size: 0, mode: 0o700}, x-note: mine}
volumes:
  data: {}
"""


def load(text: str) -> ServiceSpec:
    result = parse_service_text(textwrap.dedent(text), FILE)
    assert result.errors == (), [str(e) for e in result.errors]
    assert result.services is not None
    (spec,) = result.services.values()
    return spec


def errors(text: str) -> list[str]:
    return [str(e) for e in parse_service_text(textwrap.dedent(text), FILE).errors]


def test_short_syntax_modes_are_read_and_sent_as_written() -> None:
    s = load(SHORT)
    by_target = {v.target: v for v in s.volumes}
    assert by_target["/etc/app"] == VolumeSpec(
        "/etc/healerd/conf.d/conf", "/etc/app", read_only=True, mode="ro,z"
    )
    assert by_target["/data"] == VolumeSpec("stack_data", "/data", mode="nocopy")
    assert by_target["/other"] == VolumeSpec("other", "/other", read_only=True)  # undeclared
    binds, found, anonymous = mounts(s, ())
    assert binds == [
        "/etc/healerd/conf.d/conf:/etc/app:ro,z",
        "/srv/code:/code:cached",
        "stack_data:/data:nocopy",
        "/srv/shared:/shared:rw,rslave,Z,delegated",
        "other:/other:ro",
    ]
    assert found == [] and anonymous == ["/anon"]


def test_plain_short_syntax_keeps_its_hash() -> None:
    """A mount as healerd read it before the new fields hashes as it did."""
    v = VolumeSpec("/srv", "/srv", read_only=True)
    assert v.hashed() == {"source": "/srv", "target": "/srv", "read_only": True}
    assert VolumeSpec("/srv", "/srv", mode="ro,z").hashed()["mode"] == "ro,z"
    assert (
        ServiceSpec(name="a", image="b", volumes=(v,)).spec_hash == "9851218eee6e896f"
    )  # as before the new fields


def test_long_syntax_is_read_with_the_project_volumes() -> None:
    s = load(LONG)
    by_target = {v.target: v for v in s.volumes}
    assert by_target["/etc/app"] == VolumeSpec(
        "/etc/healerd/conf.d/conf",
        "/etc/app",
        read_only=True,
        kind=VolumeKind.BIND,
        propagation="rslave",
        selinux="z",
    )
    # Compose takes any relative source of a long-syntax bind from the project directory.
    assert by_target["/conf2"].source == "/etc/healerd/conf.d/conf2"
    assert by_target["/strict"].create_host_path is False
    assert by_target["/data"].source == "stack_data" and by_target["/data"].nocopy
    assert by_target["/undeclared"].source == "undeclared"
    assert by_target["/anon"] == VolumeSpec("", "/anon", kind=VolumeKind.VOLUME)
    assert by_target["/cache"].tmpfs_size == 64 * 2**20
    assert by_target["/cache"].tmpfs_mode == 0o1777
    assert (by_target["/scratch"].tmpfs_size, by_target["/scratch"].tmpfs_mode) == (None, 0o700)
    assert [d.name for d in s.volumes_to_create] == ["stack_data"]


def test_long_syntax_becomes_the_request_compose_sends() -> None:
    binds, found, anonymous = mounts(load(LONG), ())
    # Binds that may create their host path go as bind strings (the Mount API cannot).
    assert binds == [
        "/etc/healerd/conf.d/conf:/etc/app:ro,z,rslave",
        "/etc/healerd/conf.d/conf2:/conf2:rw",
    ]
    assert found == [
        {
            "Target": "/strict",
            "Source": "/srv/must-exist",
            "Type": "bind",
            "ReadOnly": False,
            "Consistency": "cached",
            "BindOptions": {"Propagation": "rprivate"},
        },
        {
            "Target": "/data",
            "Source": "stack_data",
            "Type": "volume",
            "ReadOnly": False,
            "VolumeOptions": {"NoCopy": True},
        },
        {"Target": "/undeclared", "Source": "undeclared", "Type": "volume", "ReadOnly": True},
        {"Target": "/anon", "Source": "", "Type": "volume", "ReadOnly": False},
        {
            "Target": "/cache",
            "Source": "",
            "Type": "tmpfs",
            "ReadOnly": False,
            "TmpfsOptions": {"SizeBytes": 64 * 2**20, "Mode": 0o1777},
        },
        {
            "Target": "/scratch",
            "Source": "",
            "Type": "tmpfs",
            "ReadOnly": False,
            "TmpfsOptions": {"Mode": 0o700},
        },
    ]
    assert anonymous == []


def test_anonymous_volumes_are_carried_over_in_both_syntaxes() -> None:
    """Issue 14: a replacement takes over the anonymous volumes of the container it
    replaces; a long-syntax one keeps its options, a short-syntax one is a bind."""
    s = load(
        """\
        services:
          a:
            image: busybox:1.36
            volumes:
              - /short
              - {type: volume, target: /long, volume: {nocopy: true}}
              - {type: volume, target: /fresh}
        """
    )
    taken = [("a" * 64, "/short"), ("b" * 64, "/long"), ("c" * 64, "/image-volume")]
    binds, found, anonymous = mounts(s, taken)
    assert binds == [f"{'a' * 64}:/short:rw", f"{'c' * 64}:/image-volume:rw"]
    assert found == [
        {
            "Target": "/long",
            "Source": "b" * 64,
            "Type": "volume",
            "ReadOnly": False,
            "VolumeOptions": {"NoCopy": True},
        },
        {"Target": "/fresh", "Source": "", "Type": "volume", "ReadOnly": False},
    ]
    assert anonymous == []


def test_ports_long_syntax() -> None:
    s = load(
        """\
        services:
          a:
            image: busybox:1.36
            ports:
              - {target: 80, published: 8080, host_ip: 127.0.0.1, protocol: tcp, mode: host}
              - {target: "53", published: "5353", protocol: UDP, mode: ingress, name: dns}
              - {target: 9000, app_protocol: http, x-note: mine}
              - "8443:443"
        """
    )
    assert s.ports == (
        PortSpec(80, "tcp", "127.0.0.1", 8080),
        PortSpec(53, "udp", "", 5353),
        PortSpec(9000, "tcp", "", None),
        PortSpec(443, "tcp", "", 8443),
    )


MOUNT_ERRORS = [
    ("/srv:/srv:rx", "volumes[0]: mode 'rx' must be ro, rw, z, Z, a propagation"),
    ("/srv:/srv:ro,rw", "volumes[0]: mode 'ro,rw' has two ro|rw words (ro, rw)"),
    ("/srv:/srv:z,Z", "volumes[0]: mode 'z,Z' has two z|Z words"),
    ("/srv:/srv:nocopy", "volumes[0]: mode 'nocopy' applies to a named volume only"),
    ("data:/srv:rshared", "volumes[0]: mode 'rshared': a propagation applies to a host path"),
    ("{type: blob, target: /x}", "volumes[0].type: must be bind, volume or tmpfs, not 'blob'"),
    ("{type: npipe, target: /x}", "volumes[0].type: 'npipe' is not supported: npipe mounts are"),
    ("{type: cluster, target: /x}", "volumes[0].type: 'cluster' is not supported: cluster"),
    ("{type: image, source: a, target: /x}", "volumes[0].type: 'image' is not supported: image"),
    ("{target: /x}", "volumes[0].type: is required: bind, volume or tmpfs"),
    ("{type: bind, source: /a}", "volumes[0].target: is required"),
    ("{type: bind, target: /x}", "volumes[0].source: is required for type: bind"),
    ("{type: bind, source: /a, target: x}", "volumes[0].target: target 'x' must be an absolute"),
    ("{type: volume, source: vv, target: /}", "volumes[0].target: cannot mount over /"),
    ("{type: volume, source: /a, target: /x}", "volumes[0].source: '/a': a volume's source is"),
    ("{type: volume, source: '" + "a" * 64 + "', target: /x}", "is an anonymous volume's name"),
    ("{type: volume, source: vv, target: /x, bind: {}}", "volumes[0].bind: applies to type: bind"),
    ("{type: tmpfs, source: a, target: /x}", "volumes[0].source: a tmpfs mount has no source"),
    ("{type: tmpfs, target: /x, tmpfs: {size: lots}}", "volumes[0].tmpfs.size: 'lots' is not a"),
    ("{type: tmpfs, target: /x, tmpfs: {mode: '999'}}", "volumes[0].tmpfs.mode: must be perm"),
    ("{type: tmpfs, target: /x, tmpfs: {mode: 0o17777}}", "volumes[0].tmpfs.mode: must be perm"),
    ("{type: tmpfs, target: /x, tmpfs: 64m}", "volumes[0].tmpfs: must be a mapping, not a str"),
    ("{type: bind, source: /a, target: /x, read_only: maybe}", "volumes[0].read_only: must be t"),
    ("{type: bind, source: /a, target: /x, bind: {propagation: up}}", "bind.propagation: must"),
    ("{type: bind, source: /a, target: /x, bind: {selinux: y}}", "bind.selinux: must be one of"),
    ("{type: bind, source: /a, target: /x, bind: {recursive: no}}", "bind.recursive: must be"),
    (
        "{type: bind, source: /a, target: /x, bind: {recursive: readonly}}",
        "volumes[0].bind: recursive: readonly needs read_only: true",
    ),
    (
        "{type: bind, source: /a, target: /x, bind: {recursive: disabled, selinux: z}}",
        "volumes[0].bind: recursive: disabled cannot go with selinux",
    ),
    ("{type: bind, source: /a, target: /x, bind: {create_host_path: 1}}", "must be true or"),
    (
        "{type: bind, source: /a, target: /x, bind: {selinux: z, create_host_path: false}}",
        "volumes[0].bind: selinux needs the engine's bind syntax",
    ),
    ("{type: volume, source: vv, target: /x, volume: {subpath: a}}", "volume.subpath: is not sup"),
    ("{type: volume, source: vv, target: /x, volume: {labels: {}}}", "volume.labels: is not sup"),
    (
        "{type: volume, source: vv, target: /x, volume: {nocopy: maybe}}",
        "volume.nocopy: must be true",
    ),
    ("{type: volume, target: /x, consistency: loose}", "volumes[0].consistency: must be one of"),
    ("{type: volume, target: /x, sauce: v}", "volumes[0].sauce: unknown key 'sauce'"),
    ("{type: volume, source: 7, target: /x}", "volumes[0].source: must be a non-empty string"),
    ("42", "volumes[0]: must be a 'SOURCE:TARGET[:MODE]' string or a mapping, not a number"),
]


@pytest.mark.parametrize(("entry", "message"), MOUNT_ERRORS)
def test_a_wrong_mount_is_refused_with_line_and_field(entry: str, message: str) -> None:
    found = errors(f"services:\n  x:\n    image: busybox:1.36\n    volumes:\n      - {entry}\n")
    assert any(e.startswith(f"{FILE}:5:") and message in e for e in found), found


def test_a_target_is_mounted_once_across_both_syntaxes() -> None:
    found = errors(
        "services:\n  x:\n    image: busybox:1.36\n    volumes:\n      - /srv:/data\n"
        "      - {type: tmpfs, target: /data/}\n"
    )
    assert found == [f"{FILE}:6:9: services.x.volumes[1]: target '/data' is mounted twice"]


PORT_ERRORS = [
    ("{published: 80}", "ports[0].target: is required"),
    ("{target: 80, published: 8000-8010}", "ports[0].published: port ranges (8000-8010) are not"),
    ("{target: 70000}", "ports[0].target: container port '70000' must be a number from 1"),
    ("{target: true}", "ports[0].target: must be a port number, not true/false"),
    ("{target: 80, protocol: sctp}", "ports[0].protocol: must be tcp or udp, not 'sctp'"),
    ("{target: 80, mode: global}", "ports[0].mode: must be host or ingress, not 'global'"),
    ("{target: 80, host_ip: localhost}", "ports[0].host_ip: 'localhost' is not an IP address"),
    ("{target: 80, name: [a]}", "ports[0].name: must be a non-empty string"),
    ("{target: 80, publish: 80}", "ports[0].publish: unknown key 'publish'"),
]


@pytest.mark.parametrize(("entry", "message"), PORT_ERRORS)
def test_a_wrong_port_is_refused_with_line_and_field(entry: str, message: str) -> None:
    found = errors(f"services:\n  x:\n    image: busybox:1.36\n    ports:\n      - {entry}\n")
    assert any(e.startswith(f"{FILE}:5:") and message in e for e in found), found


def test_a_host_port_is_published_once_across_both_syntaxes() -> None:
    found = errors(
        "services:\n  x:\n    image: busybox:1.36\n    ports:\n      - 8080:80\n"
        "      - {target: 81, published: 8080}\n"
    )
    assert found == [f"{FILE}:6:9: services.x.ports[1]: host port 8080/tcp is published twice"]


def test_the_schema_takes_what_the_loader_takes() -> None:
    """The JSON Schema accepts the long syntax the loader accepts, and refuses a type or a
    section the loader refuses."""
    jsonschema = pytest.importorskip("jsonschema")
    schema_file = Path(__file__).parents[2] / "config" / "healerd-services.schema.json"
    schema = json.loads(schema_file.read_text())
    service: dict[str, Any] = {"image": "busybox:1.36"}
    good = {"services": {"a": service}}
    service["volumes"] = [
        "./conf:/etc/app:ro,z",
        {"type": "bind", "source": "/a", "target": "/a", "bind": {"create_host_path": False}},
        {"type": "tmpfs", "target": "/t", "tmpfs": {"size": "64m", "mode": "1777"}},
        {"type": "volume", "target": "/v", "volume": {"nocopy": True}},
    ]
    service["ports"] = [{"target": 80, "published": "8080", "mode": "host"}]
    jsonschema.validate(good, schema)
    for bad in (
        {"type": "blob", "target": "/x"},
        {"type": "bind", "target": "/x"},
        {"type": "tmpfs", "source": "a", "target": "/x"},
        {"type": "volume", "target": "/x", "bind": {}},
        {"type": "volume", "target": "/x", "volume": {"subpath": "a"}},
    ):
        service["volumes"] = [bad]
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(good, schema)


def test_exports_keep_the_mounts_or_report_them_lost() -> None:
    import yaml

    from healerd.cli.export import compose as export_compose
    from healerd.cli.export import kubernetes as export_kubernetes
    from healerd.cli.export import swarm as export_swarm
    from healerd.cli.export.common import Options

    s = load(LONG)
    compose = yaml.safe_load(export_compose.render([s], Options()).text)
    vols = compose["services"]["a"]["volumes"]
    assert vols[2] == {
        "type": "bind",
        "source": "/srv/must-exist",
        "target": "/strict",
        "consistency": "cached",
        "bind": {"propagation": "rprivate", "create_host_path": False},
    }
    assert vols[6] == {
        "type": "tmpfs",
        "target": "/cache",
        "tmpfs": {"size": "64M", "mode": "1777"},
    }
    assert export_compose.render([load(SHORT)], Options()).text.count(":ro,z") == 1

    swarm = export_swarm.render([s], Options())
    vols = yaml.safe_load(swarm.text)["services"]["a"]["volumes"]
    assert vols[0]["bind"] == {"propagation": "rslave"}  # selinux: lost
    assert vols[2]["bind"] == {"propagation": "rprivate"}  # Swarm never makes a host path
    assert vols[6]["tmpfs"] == {"size": "64M"}
    lost = [str(loss) for loss in swarm.losses if loss.field == "volumes"]
    assert lost == [
        "a: volumes: /etc/app: z: Swarm does not relabel",
        "a: volumes: /cache: tmpfs mode 1777: stack files take a size only",
        "a: volumes: /scratch: tmpfs mode 700: stack files take a size only",
    ]

    k8s = export_kubernetes.render([s], Options())
    pod = next(d for d in yaml.safe_load_all(k8s.text) if d and d["kind"] == "Deployment")
    spec = pod["spec"]["template"]["spec"]
    assert spec["volumes"][6] == {
        "name": "vol-6",
        "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"},
    }
    assert spec["containers"][0]["volumeMounts"][0]["mountPropagation"] == "HostToContainer"
    lost = [str(loss) for loss in k8s.losses if loss.field == "volumes"]
    assert "a: volumes: /strict: create_host_path: false: give the hostPath a type" in lost[1]
    assert len(lost) == 4  # z, create_host_path, two tmpfs modes


RECURSIVE = """\
services:
  a:
    image: busybox:1.36
    volumes:
      - {type: bind, source: /srv/a, target: /a, bind: {recursive: enabled}}
      - {type: bind, source: /srv/b, target: /b, bind: {recursive: disabled}}
      - {type: bind, source: /srv/c, target: /c, read_only: true, bind: {recursive: writable}}
      - type: bind
        source: /srv/d
        target: /d
        read_only: true
        bind: {recursive: readonly, create_host_path: false, propagation: rslave}
"""


def test_bind_recursive_is_sent_as_compose_sends_it_and_needs_api_1_44() -> None:
    """Issue 31: bind.recursive was refused everywhere (API 1.41); now a Mount with
    Compose's BindOptions, and what needs API 1.44 is checked at create time."""
    spec = load(RECURSIVE)
    assert [v.recursive for v in spec.volumes] == ["", "disabled", "writable", "readonly"]
    binds, found, _ = mounts(spec, ())
    assert binds == ["/srv/a:/a:rw"]  # enabled is the default: the bind syntax still
    by_target = {m["Target"]: m.get("BindOptions") for m in found}
    assert by_target == {
        "/b": {"NonRecursive": True, "CreateMountpoint": True},
        "/c": {"ReadOnlyNonRecursive": True, "CreateMountpoint": True},
        "/d": {"Propagation": "rslave", "ReadOnlyForceRecursive": True},
    }
    assert api_needs(spec) == [
        ("volume /c: bind.recursive: writable", "1.44"),
        ("volume /d: bind.recursive: readonly", "1.44"),
    ]
    assert "recursive" not in spec.volumes[0].hashed()  # enabled: the hash of before


def test_exports_carry_bind_recursive_or_report_it_lost() -> None:
    import yaml

    from healerd.cli.export import compose as export_compose
    from healerd.cli.export import kubernetes as export_kubernetes
    from healerd.cli.export import swarm as export_swarm
    from healerd.cli.export.common import Options

    s = load(RECURSIVE)
    compose = yaml.safe_load(export_compose.render([s], Options()).text)
    assert compose["services"]["a"]["volumes"][3]["bind"] == {
        "propagation": "rslave",
        "create_host_path": False,
        "recursive": "readonly",
    }
    swarm = export_swarm.render([s], Options())
    vols = yaml.safe_load(swarm.text)["services"]["a"]["volumes"]
    assert vols[3]["bind"] == {"propagation": "rslave"}
    lost = [str(loss) for loss in swarm.losses if loss.field == "volumes"]
    assert "a: volumes: /d: recursive: readonly: stack files (3.8) have no such key" in lost
    k8s = export_kubernetes.render([s], Options())
    lost = [str(loss) for loss in k8s.losses if loss.field == "volumes"]
    assert any("/c: recursive: writable" in loss for loss in lost), lost
