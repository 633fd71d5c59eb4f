"""x-healerd's `snapshot` and `snapshot_keep` (issue 33): named volumes of the file that
roll back with the image. Checked once the file's project is known (project.resolve):
each listed volume must be one the file declares under its top-level `volumes:`, that
the service mounts, and that lives in a directory of this host (the local driver,
without driver_opts; an external one is checked by the engine when it is copied)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from healerd.config.errors import describe
from healerd.config.keys import At, Key
from healerd.config.yamlload import LineDict, LineList
from healerd.model import ServiceSpec
from healerd.vocabulary import VolumeKind

if TYPE_CHECKING:
    from healerd.config.project import Declared

MAX_SNAPSHOT_KEEP = 100
DEFAULT_KEEP = 2

SNAPSHOT_FIELDS = (
    Key(
        "snapshot",
        "list of volume keys",
        "Named volumes of this file (keys of the top-level volumes:) that the service "
        "mounts, copied on the host before a new image digest starts (the service is "
        "stopped for the copy; an update whose copy does not fit on the disk of state_dir "
        "is refused) and copied back when that update is rolled back (by itself or with "
        "healerctl rollback): the data rolls back with the image. The copies are kept in "
        "state_dir/snapshots (healerctl snapshots lists them). A volume with a driver "
        "other than local, or with driver_opts, cannot be copied.",
        "[pgdata]",
        default=(),
        schema={"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    ),
    Key(
        "snapshot_keep",
        f"integer 1-{MAX_SNAPSHOT_KEEP}",
        "How many snapshots of the service are kept: the newest; older ones are removed "
        "when a new one is taken.",
        "2",
        default=DEFAULT_KEEP,
        schema={"type": "integer", "minimum": 1, "maximum": MAX_SNAPSHOT_KEEP},
    ),
)


def snapshot(
    spec: ServiceSpec, body: LineDict, volumes: Mapping[str, Declared], at: At
) -> ServiceSpec:
    """`spec` with the engine's names of the volumes x-healerd's `snapshot` lists and its
    `snapshot_keep` (`volumes`: the file's top-level volumes by key; `spec.volumes`
    still name them by key)."""
    ext = body.get("x-healerd")
    if not isinstance(ext, LineDict) or not ("snapshot" in ext or "snapshot_keep" in ext):
        return spec
    ext_at = at.key(body, "x-healerd")
    keep = ext.get("snapshot_keep", DEFAULT_KEEP)
    if isinstance(keep, bool) or not isinstance(keep, int) or not 1 <= keep <= MAX_SNAPSHOT_KEEP:
        ext_at.key(ext, "snapshot_keep").error(
            f"must be a whole number from 1 to {MAX_SNAPSHOT_KEEP}, not {describe(keep)}"
        )
        keep = DEFAULT_KEEP
    listed = ext.get("snapshot")
    if not isinstance(listed, LineList):
        if listed is not None:
            ext_at.key(ext, "snapshot").error(
                f"must be a list of volume keys such as [pgdata], not {describe(listed)}"
            )
        return dataclasses.replace(spec, snapshot_keep=keep)
    mounted = {v.source for v in spec.volumes if v.kind in (VolumeKind.SHORT, VolumeKind.VOLUME)}
    names: list[str] = []
    for i, key in enumerate(listed):
        item_at = ext_at.key(ext, "snapshot").item(listed, i)
        name = _volume(key, volumes, mounted, item_at)
        if name is not None and name in names:
            item_at.error(f"names volume {key!r} twice")
        elif name is not None:
            names.append(name)
    return dataclasses.replace(spec, snapshot=tuple(names), snapshot_keep=keep)


def _volume(key: object, volumes: Mapping[str, Declared], mounted: set[str], at: At) -> str | None:
    """The engine's name of one listed volume, or None (reported)."""
    if not isinstance(key, str) or not key:
        at.error(f"must be the key of a volume under the top-level volumes:, not {describe(key)}")
        return None
    declared = volumes.get(key)
    if declared is None:
        known = ", ".join(sorted(volumes)) or "none"
        at.error(f"{key!r} is not a named volume of this file (top-level volumes: {known})")
        return None
    if key not in mounted:
        at.error(f"the service does not mount volume {key!r} (add it to its volumes:)")
        return None
    decl = declared.volume
    if decl is not None and (decl.driver != "local" or decl.options):
        how = f"driver {decl.driver}" if decl.driver != "local" else "driver_opts"
        at.error(
            f"volume {key!r} has {how}: its files are not in a directory of this host, "
            "so healerd cannot copy them"
        )
        return None
    return declared.name


__all__ = ["MAX_SNAPSHOT_KEEP", "SNAPSHOT_FIELDS", "snapshot"]
