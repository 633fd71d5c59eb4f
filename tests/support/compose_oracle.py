"""The `docker-compose` the differential tests compare healerd with (issue 31): Debian
12's is Compose v1 (1.29.2), Debian 13's Compose v2 (2.26). healerd makes what v1 makes;
what v2 only spells differently is mapped here, so that both oracles check the same:

- a container's default name: `P_svc_1` (v1), `P-svc-1` (v2);
- v2 adds the container's own name to its network aliases (tests/integration/harness.py
  drops it from a container that v2's version label marks);
- v2 sends a short-syntax named volume as a Mount where v1 sends a bind string: both
  sides are compared as one neutral list of what is mounted where, how (`mounts`);
- v2 orders ulimits its own way and sends an exposed port without `/tcp`
  (`same_meaning`).

These mappings apply only when the oracle is v2: with v1 the comparison stays exact.

HEALERD_TEST_COMPOSE names another binary (a command line) to use as the oracle."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
from typing import Any


def command() -> list[str]:
    """The oracle's command line."""
    return shlex.split(os.environ.get("HEALERD_TEST_COMPOSE") or "docker-compose")


@functools.cache
def major() -> int:
    """1 for Compose v1, 2 for v2 (`version --short` prints 1.29.2 or 2.26.1)."""
    p = subprocess.run(
        [*command(), "version", "--short"], capture_output=True, text=True, timeout=60
    )
    found = re.search(r"(\d+)\.\d+", p.stdout)
    if p.returncode != 0 or not found:
        raise RuntimeError(f"{command()} version --short: {p.stdout!r} {p.stderr[-500:]!r}")
    return int(found.group(1))


def same_meaning(out: dict[str, Any]) -> dict[str, Any]:
    """`normalised` output with what v2 spells differently for the same container made
    alike: ulimits in any order, an exposed port without a protocol is tcp."""
    out = dict(out)
    if out.get("HostConfig.Ulimits"):
        out["HostConfig.Ulimits"] = sorted(out["HostConfig.Ulimits"], key=lambda u: u["Name"])
    if out.get("Config.ExposedPorts"):
        ports = out["Config.ExposedPorts"]
        out["Config.ExposedPorts"] = {(p if "/" in p else f"{p}/tcp"): v for p, v in ports.items()}
    return out


def default_name(project: str, service: str) -> str:
    """The name the oracle gives the first container of `service` (no container_name)."""
    return f"/{project}_{service}_1" if major() == 1 else f"/{project}-{service}-1"


_BIND_WORDS = {"rw", "ro", "nocopy", "z", "Z", "cached", "delegated", "consistent"}


def _from_bind(text: str) -> tuple[Any, ...]:
    source, target, *rest = text.split(":")
    words = set(rest[0].split(",")) if rest else set()
    propagation = sorted(words - _BIND_WORDS)
    kind = "bind" if source.startswith("/") else "volume"
    return (
        kind,
        source,
        target,
        "ro" in words,
        "nocopy" in words,
        ",".join(propagation),
        ",".join(sorted(words & {"z", "Z"})),
        "",
    )


def _from_mount(m: dict[str, Any]) -> tuple[Any, ...]:
    volume = m.get("VolumeOptions") or {}
    extra = {k: v for k, v in volume.items() if k != "NoCopy" and v}
    extra |= {"tmpfs": m["TmpfsOptions"]} if m.get("TmpfsOptions") else {}
    return (
        str(m["Type"]),
        str(m.get("Source") or ""),
        str(m["Target"]),
        bool(m.get("ReadOnly")),
        bool(volume.get("NoCopy")),
        str((m.get("BindOptions") or {}).get("Propagation") or ""),
        "",
        repr(sorted(extra.items())) if extra else "",
    )


def mounts(host: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What is mounted where and how, whether sent as a bind string or a Mount: (kind,
    source, target, read-only, nocopy, propagation, SELinux label, other options). Not
    the consistency, which has no effect on Linux: v2 drops it from a bind string."""
    found = [_from_bind(b) for b in host.get("Binds") or []]
    found += [_from_mount(m) for m in host.get("Mounts") or []]
    return sorted(found, key=repr)
