"""How the key tables read in the docs: defaults and sizes as healerd.yaml writes them,
and the prose the reference page (healerd.config.schema) and the man pages
(healerd.config.manpages) share, in Markdown (the man pages convert it).
"""

from __future__ import annotations

from healerd.config.envfile import MAX_ENV_FILE_SIZE, MAX_ENV_FILES
from healerd.config.keys import MAX_ENTRIES, Key
from healerd.config.servicefile import MAX_ERRORS_PER_FILE, MAX_SERVICES_PER_FILE
from healerd.config.units import MAX_DURATION, format_duration
from healerd.config.yamlload import MAX_FILE_SIZE, MAX_MERGED, MAX_MERGED_TOTAL, MAX_VALUES
from healerd.model import Threshold


def format_size(size: int) -> str:
    """33554432 -> 32Mi: how the docs and healerd.yaml write sizes (binary units)."""
    for unit, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if size and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def default_text(key: Key) -> str:
    """A service key's default as the reference writes it."""
    if key.required:
        return "required"
    if key.children:
        return "see below"
    default = key.default
    if default is None or default in ((), ""):
        return "none"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, float) and "duration" in key.type:
        return format_duration(default)
    return str(default)


def setting_default_doc(key: Key) -> str:
    """A setting's default as the docs write it: the value healerd.yaml would hold, in
    code, or the key's `default_doc` in words."""
    return key.default_doc or f"`{setting_default(key)}`"


def child_example(parent: Key, child: Key) -> str:
    """A nested key's example in its parent: an item of a list (`notifications: [{url:
    ...}]`), or a key of a mapping (`image_gc: {keep_last: 2}`)."""
    item = f"{{{child.name}: {child.example}}}"
    return f"{parent.name}: " + (f"[{item}]" if parent.type.startswith("list") else item)


def setting_default(key: Key) -> str:
    """A setting's default as healerd.yaml would write it."""
    value = key.default
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return f"[{', '.join(value)}]"
    if isinstance(value, Threshold):
        return f"{value.amount:g}%" if value.percent else format_size(int(value.amount))
    if key.type == "size" and isinstance(value, int):
        return format_size(value)
    if isinstance(value, float) and key.type.startswith("duration"):
        return format_duration(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


VALUE_FORMS = """\
- **duration**: a number of seconds, or a string of numbers with units `h`, `m`, `s`,
  `ms`, `us` such as `500ms`, `10s`, `1m30s`, `2h`.
- **size**: a whole number of bytes, or a number with `k`, `m` or `g` (binary units:
  `256m` is 256 MiB) and an optional `b`, in either case.
- **null** counts as absent, for every key but `image`: a key whose list is all commented
  out keeps its default.
- Keys starting with `x-` are ignored at the top level and inside a service and its
  mappings (handy for YAML anchors); any other unknown key is an error, with a
  suggestion when it looks like a typo.
"""

_MIB = 2**20
LIMITS = f"""\
Limits, so that no file can make healerd hang or fill its memory (each with an error
naming the file and the field):

- file sizes: a service file and `healerd.yaml` at most {MAX_FILE_SIZE // _MIB} MiB, an env file at
  most {MAX_ENV_FILE_SIZE // _MIB} MiB; a larger file is refused;
- at most {MAX_SERVICES_PER_FILE} services in a file; at most {MAX_ENTRIES} entries in a list or
  mapping of a service (`command`, `environment`, `labels`, `volumes`, `ports`,
  `networks`, ...), and at most {MAX_ENV_FILES} files in `env_file`;
- every duration at most `{format_duration(MAX_DURATION)}` (a week); the Type column gives each
  key's range;
- YAML merge keys (`<<`): at most {MAX_MERGED} entries in one mapping and {MAX_MERGED_TOTAL}
  in a file; aliases: at most {MAX_VALUES} values in all;
- at most {MAX_ERRORS_PER_FILE} errors of a file are listed, then how many more there are.
"""

TRUST = """\
Who may write the files: under `strict_modes` (the default), a service file, an env
file, a secret's or config's file and `healerd.yaml`, and every directory on the way to
each from `/`, must be owned by root or healerd's own user and not writable by group or
others (a sticky world-writable directory such as `/tmp` does not pass). healerd walks
each path from `/` one component at a time through checked directory descriptors with
`O_NOFOLLOW`: a symbolic link in a directory component is followed only when the
directory holding it passed, and its target is checked the same way. It reads what it
checked, at load and again when it reads an env file or a secret for a new container,
and then the contents must still be those checked at load (else the create waits for a
reload). A service file in `conf.d` may be a symbolic link; an env file, a secret or
`healerd.yaml` may not be one. The same rule holds for the project directory (and every
directory above it) and for every directory on the way to a bind source; the bind
source itself may be anyone's (it is the container's data). A FIFO, a device or a
socket is refused even with `strict_modes: false`, which skips only the owner and mode
checks (development only). `healerd.yaml` is always checked strictly: it is the file
that sets `strict_modes`.
"""

# The Compose fields refused, and why (healerd.config.unsupported has the errors).
COMPOSE_REFUSED = """\
Windows-only ones (`cpu_count`, `cpu_percent`,
`credential_spec`, `isolation`), Compose CLI features (`develop`, `provider`, `models`,
`attach`, `use_api_socket`), `external_links` and `volumes_from` (a service's containers
change with every heal), and, not yet, `annotations`, `blkio_config`, `cgroup`,
`label_file` and `pull_refresh_after`. In `build`, what only BuildKit can do
(`ssh`, `secrets`, ...) is refused with the reason.
"""

SETTINGS_TEXT = """\
Every key is optional and a missing file means all defaults. Unlike a service file, an
invalid `healerd.yaml` stops healerd at startup, with every error listed. It is read with
the strict owner and mode checks whatever it says about `strict_modes` (see above). The
config directory itself is chosen on the command line (`--config-dir`), not here;
`docker_host`, `socket_path`, `resync_interval`, `workers` and `log_level` can be
overridden there too.
"""
