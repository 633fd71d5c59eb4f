"""Daemon settings from the optional healerd.yaml.

Unlike service files, bad settings stop healerd at startup: there is no last-good value
to fall back on, and guessing at timeouts or the engine address would hide the mistake.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healerd import paths
from healerd.config.dockertls import DOCKER_TLS_CHILDREN, check_docker_tls, plain_tcp_problem
from healerd.config.errors import (
    ConfigError,
    SettingsError,
    describe,
    sort_errors,
    unknown_key_reason,
)
from healerd.config.imagegc import IMAGE_GC_CHILDREN, ImageGcSettings, check_image_gc
from healerd.config.keys import At, Key, check_keys, parsed
from healerd.config.units import format_duration, parse_duration, parse_size
from healerd.config.yamlload import LineDict, load_yaml_bytes, read_config_file
from healerd.model import DockerTLS, NodeLimits, Threshold

LOG_LEVELS = ("debug", "info", "warning", "error")
MAX_WORKERS = 64
MAX_HISTORY = 10
MAX_CALLS = 1_000_000  # engine_calls_per_second and engine_call_burst
# A group name as useradd/groupadd take it (Debian's default NAME_REGEX, and `$`).
GROUP_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,30}\$?")


@dataclass(frozen=True)
class Settings:
    """Daemon tunables (durations in seconds).

    Derive variants with `dataclasses.replace(settings, workers=8)`; values that did not
    come through load_settings (command-line overrides, say) can be checked with
    check_settings. `config_dir` is not read from healerd.yaml, which lives inside it.
    """

    config_dir: Path = paths.CONFIG_DIR
    docker_host: str | None = None  # None: DOCKER_HOST, else the local socket
    # TLS to a tcp:// engine (healerd.config.dockertls); None: none (or the environment's).
    docker_tls: DockerTLS | None = None
    # Allow plain HTTP (or unverified TLS) to a tcp:// engine on another machine.
    docker_insecure_tcp: bool = False
    socket_path: Path = paths.SOCKET
    # The host key that signs healerd's containers lives here (root-only, mode 0700).
    state_dir: Path = Path("/var/lib/healerd")
    resync_interval: float = 30.0
    workers: int = 4
    # Failed containers kept per replica after their replacement, stopped, for their logs
    # and exit codes (healerctl logs --previous, describe); like Swarm's
    # task-history-retention-limit. 0 keeps none.
    history_limit: int = 1
    # At a clean stop, hand the running replicas to the engine's own restart policy
    # (taken back at the next start): see healerd.core.handoff.
    handoff_on_stop: bool = True
    backoff_base: float = 0.005
    backoff_max: float = 60.0
    engine_timeout: float = 30.0
    engine_down_log_interval: float = 30.0
    log_level: str = "info"
    # Refuse config files and directories that others than root (or healerd's own user)
    # could write, like sshd's StrictModes. false is for development only.
    strict_modes: bool = True
    # The variables of healerd's own environment that `${VAR}` in service files may read
    # (besides the files' .env); no other (see healerd.config.interpolate).
    interpolate_environment: tuple[str, ...] = ()
    # Registry credentials (Docker's config.json format); None: CONFIG_DIR/auth.json.
    registry_auth: Path | None = None
    # A group whose members may read containers' output over the API, besides root and
    # the admin group (None: nobody else).
    logs_group: str | None = None
    # How often services with x-healerd.auto_update ask their registry for the tag's digest.
    auto_update_interval: float = 300.0
    # Node awareness (see NodeLimits); these take effect on a reload, no restart needed.
    pressure_memory_available: Threshold = NodeLimits.memory_available
    pressure_disk_free: Threshold = NodeLimits.disk_free
    pressure_inodes_free: Threshold = NodeLimits.inodes_free
    container_memory_estimate: int = NodeLimits.container_memory
    pull_disk_margin: int = NodeLimits.pull_disk_margin
    engine_calls_per_second: float = NodeLimits.engine_calls_per_second
    engine_call_burst: int = NodeLimits.engine_call_burst
    # Image garbage collection (the `image_gc:` section; see healerd.config.imagegc).
    image_gc: ImageGcSettings = field(default_factory=ImageGcSettings)

    @property
    def node_limits(self) -> NodeLimits:
        return NodeLimits(
            memory_available=self.pressure_memory_available,
            disk_free=self.pressure_disk_free,
            inodes_free=self.pressure_inodes_free,
            container_memory=self.container_memory_estimate,
            pull_disk_margin=self.pull_disk_margin,
            engine_calls_per_second=self.engine_calls_per_second,
            engine_call_burst=self.engine_call_burst,
        )


def _docker_host(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError("must be an engine address such as unix:///var/run/docker.sock")
    return value


def _absolute_path(value: object) -> Path:
    if not isinstance(value, str | Path) or not str(value).startswith("/"):
        raise ValueError(f"must be an absolute path, not {value!r}")
    return Path(value)


def _optional_path(value: object) -> Path | None:
    return None if value is None else _absolute_path(value)


def _at_least(minimum: float) -> Callable[[object], float]:
    """A duration check: above 0, at least `minimum`, at most units.MAX_DURATION. A
    resync or timeout of a microsecond would be a busy loop, not a setting."""

    def check(value: object) -> float:
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError("must be greater than 0")
        if seconds < minimum:
            raise ValueError(f"must be at least {format_duration(minimum)}")
        return seconds

    return check


_interval = _at_least(1.0)
_backoff = _at_least(0.001)


def _workers(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise ValueError(f"must be a whole number from 1 to {MAX_WORKERS}, not {value!r}")
    return value


def _group_name(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not GROUP_NAME_RE.fullmatch(value):
        raise ValueError(f"must be a group name such as healerd-logs, not {value!r}")
    return value


def _history_limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_HISTORY:
        raise ValueError(f"must be a whole number from 0 to {MAX_HISTORY}, not {value!r}")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {value!r}")
    return value


def _threshold(value: object) -> Threshold:
    """A percentage such as 10% of the total, or an amount such as 100Mi (or a count)."""
    if isinstance(value, Threshold):
        return value
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            pct = float(value.strip()[:-1])
        except ValueError:
            raise ValueError(f"{value!r} is not a percentage such as 10%") from None
        if not 0 <= pct < 100:
            raise ValueError("a percentage must be from 0% to below 100%")
        return Threshold(pct, percent=True)
    if value == 0:
        return Threshold(0.0)
    try:
        return Threshold(float(parse_size(value)))
    except ValueError as exc:
        raise ValueError(
            f"must be a percentage such as 10% or an amount such as 100Mi: {exc}"
        ) from None


def _size(value: object) -> int:
    return parse_size(value) if not isinstance(value, int) or value else 0


def _rate(value: object) -> float:
    # Below 1 call/s a single heal (list, create, start) would wait for seconds per call,
    # and a queue of waiting workers for minutes: the cap would hurt more than the storm.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= MAX_CALLS:
        raise ValueError(
            f"must be a number of calls per second from 1 to {MAX_CALLS}, not {value!r}"
        )
    return float(value)


def _burst(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CALLS:
        raise ValueError(f"must be a whole number of calls from 1 to {MAX_CALLS}, not {value!r}")
    return value


MAX_VARIABLES = 1000
_VARIABLE = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")


def _variables(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or len(value) > MAX_VARIABLES:
        raise ValueError(f"must be a list of at most {MAX_VARIABLES} variable names")
    for name in value:
        if not isinstance(name, str) or not _VARIABLE.fullmatch(name):
            shown = repr(name)[:60] if isinstance(name, str) else describe(name)
            raise ValueError(f"{shown} is not a variable name (letters, digits and _)")
    return tuple(dict.fromkeys(value))


def _log_level(value: object) -> str:
    if not isinstance(value, str) or value.lower() not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, not {value!r}")
    return value.lower()


_DEFAULTS = Settings()


@dataclass(frozen=True)
class Setting(Key):
    """A key of healerd.yaml. Its default is the Settings field's; a `reloadable` one takes
    effect on a reload, the others need a restart."""

    reloadable: bool = False


def _setting(
    name: str,
    type: str,
    doc: str,
    example: str,
    parse: Callable[[Any], Any],
    *,
    reloadable: bool = False,
) -> Setting:
    default = getattr(_DEFAULTS, name)
    return Setting(
        name, type, doc, example, default=default, check=parsed(parse), reloadable=reloadable
    )


# One row per key of healerd.yaml (and a field of Settings each, config_dir aside).
SETTINGS_FIELDS: tuple[Setting, ...] = (
    _setting(
        "docker_host",
        "engine address or null",
        "The Docker engine to manage; null means $DOCKER_HOST, else the local socket.",
        "unix:///var/run/docker.sock",
        _docker_host,
    ),
    Setting(
        "docker_tls",
        "mapping or null",
        "TLS to a `tcp://` docker_host, as dockerd's `--tlsverify` wants it; the keys are "
        "below. null: none, unless docker_host is null and $DOCKER_TLS_VERIFY or "
        "$DOCKER_CERT_PATH say so (as for the docker CLI).",
        "{ca: /etc/healerd/docker/ca.pem, cert: /etc/healerd/docker/cert.pem, key: "
        "/etc/healerd/docker/key.pem}",
        default=None,
        check=check_docker_tls,
        children=DOCKER_TLS_CHILDREN,
    ),
    _setting(
        "docker_insecure_tcp",
        "boolean",
        "Allow a `tcp://` docker_host on another machine without verified TLS. Without it "
        "healerd refuses to start: in plain HTTP every request, registry passwords and "
        "env-file values included, crosses the network in clear, and anyone on the path "
        "can answer as the engine. Loopback addresses need neither.",
        "true",
        _bool,
    ),
    _setting(
        "socket_path",
        "absolute path",
        "Where healerd listens for healerctl.",
        "/run/healerd/healerd.sock",
        _absolute_path,
    ),
    _setting(
        "state_dir",
        "absolute path",
        "Where healerd keeps its host key, which signs the containers it makes (made at "
        "first start, root-only; back it up with the config).",
        "/var/lib/healerd",
        _absolute_path,
    ),
    _setting(
        "resync_interval",
        "duration 1s to 168h",
        "How often every service is checked in full, besides reacting to engine events and "
        "config changes.",
        "1m",
        _interval,
    ),
    _setting(
        "workers",
        f"integer 1 to {MAX_WORKERS}",
        "How many reconcile workers run in parallel.",
        "8",
        _workers,
    ),
    _setting(
        "history_limit",
        f"integer 0 to {MAX_HISTORY}",
        "Failed containers kept per replica, stopped, after their replacement: for "
        "`healerctl logs --previous` and `describe` (like Swarm's "
        "task-history-retention-limit). 0 keeps none.",
        "2",
        _history_limit,
    ),
    _setting(
        "handoff_on_stop",
        "boolean",
        "At a clean stop, give the running replicas the engine's own `unless-stopped` "
        "restart policy, and take it back at the next start: a reboot, which stops "
        "healerd before the engine, brings them back inside the engine's own start, as "
        "fast as `--restart always` (healerd itself can start them only once the "
        "engine's API answers). Not run-once, paused or crash-looping services. See "
        "docs/user-guide.md, After an engine restart or a reboot.",
        "false",
        _bool,
        reloadable=True,
    ),
    _setting(
        "backoff_base",
        "duration 1ms to 168h, <= backoff_max",
        "First retry delay after a failed engine call.",
        "10ms",
        _backoff,
    ),
    _setting(
        "backoff_max",
        "duration 1ms to 168h",
        "The longest retry delay after failures.",
        "30s",
        _backoff,
    ),
    _setting(
        "engine_timeout", "duration 1s to 168h", "Limit for one engine API call.", "1m", _interval
    ),
    _setting(
        "engine_down_log_interval",
        "duration 1s to 168h",
        "While the engine is unreachable, how often to say so in the log.",
        "1m",
        _interval,
    ),
    _setting("log_level", f"{' | '.join(LOG_LEVELS)}", "Log verbosity.", "debug", _log_level),
    _setting(
        "strict_modes",
        "boolean",
        "Refuse service files and env files that anyone but root (or healerd's own user) "
        "owns or could write, or that sit in such a directory, as sshd's StrictModes does; "
        "the same for secrets, configs and credential helpers, and for the directories on "
        "the way to a bind source and the project directory. false is for development "
        "only. healerd.yaml itself is always checked.",
        "false",
        _bool,
    ),
    _setting(
        "interpolate_environment",
        "list of variable names",
        "The variables of healerd's own environment that `${VAR}` in a service file may "
        "read; the files' `.env` are read in any case, and a listed variable that is set "
        "wins over them. None by default, unlike `docker compose`, which reads the whole "
        "shell environment: healerd's holds what its unit gives it (credentials for a "
        "credential helper, say), which a service file must not move into a container. "
        "See docs/reference/compose.md, Variables.",
        "[HOSTNAME, TZ]",
        _variables,
        reloadable=True,
    ),
    _setting(
        "registry_auth",
        "absolute path or null",
        "The registry credentials file, in the format of Docker's config.json (`auths`, "
        "`credHelpers`, `credsStore`); null means auth.json in the config directory. "
        "Root-only: refused (like an untrusted config file) when group or others may read "
        "or write it. Read again at every reload, when the credential helpers it names are "
        "looked up on PATH and checked like config files; a broken file keeps the previous "
        "credentials. See docs/user-guide.md, Registries and credentials.",
        "/etc/healerd/auth.json",
        _optional_path,
        reloadable=True,
    ),
    _setting(
        "logs_group",
        "group name or null",
        "A group whose members may read containers' output (`healerctl logs`, "
        "`/v1/services/NAME/logs`) besides root and the admin group. null: only they "
        "may, since output often holds what its readers should not see (tokens, "
        "connection strings). `healerd` gives it back to every reader of the socket. See "
        "docs/operations.md, Who may do what.",
        "healerd-logs",
        _group_name,
        reloadable=True,
    ),
    _setting(
        "auto_update_interval",
        "duration 1s to 168h",
        "How often a service with `x-healerd: {auto_update: registry}` (or the label "
        "io.containers.autoupdate=registry) asks its registry for the digest of its tag: "
        "one manifest request per image, no pull unless the digest moved. See "
        "docs/user-guide.md, Image updates with automatic rollback.",
        "1h",
        _interval,
        reloadable=True,
    ),
    _setting(
        "pressure_memory_available",
        "size or percentage",
        "Memory pressure below this much available memory (kubelet's memory.available). "
        "Under pressure healerd starts no extra container (no scale-up, no surge); see "
        "docs/user-guide.md, Node awareness.",
        "256Mi",
        _threshold,
        reloadable=True,
    ),
    _setting(
        "pressure_disk_free",
        "size or percentage",
        "Disk pressure below this much free space on the engine's data root.",
        "15%",
        _threshold,
        reloadable=True,
    ),
    _setting(
        "pressure_inodes_free",
        "count or percentage",
        "Disk pressure below this many free inodes on the data root.",
        "10%",
        _threshold,
        reloadable=True,
    ),
    _setting(
        "container_memory_estimate",
        "size",
        "The memory a container without mem_limit is assumed to need when healerd counts "
        "how many more containers fit above pressure_memory_available.",
        "64Mi",
        _size,
        reloadable=True,
    ),
    _setting(
        "pull_disk_margin",
        "size",
        "The size assumed for an image to pull when no earlier version of it is on disk; a "
        "pull that would leave less than pressure_disk_free is refused.",
        "1Gi",
        _size,
        reloadable=True,
    ),
    _setting(
        "engine_calls_per_second",
        f"number 1 to {MAX_CALLS}",
        "Cap on healerd's engine API calls (a token bucket, like client-go's QPS), so that "
        "an event storm cannot turn healerd into the load on the host.",
        "20",
        _rate,
        reloadable=True,
    ),
    _setting(
        "engine_call_burst",
        f"integer 1 to {MAX_CALLS}",
        "Calls allowed at once above the rate (the bucket's size).",
        "50",
        _burst,
        reloadable=True,
    ),
    Setting(
        "image_gc",
        "mapping",
        "Image garbage collection, as kubelet's: unused images of a declared service's "
        "repository (or that healerd pulled) are removed, oldest first, when the engine's "
        "data root fills up; after an update, the repository's older images that healerd "
        "pulled itself; the keys are below. See docs/user-guide.md, Image garbage "
        "collection.",
        "{high_threshold_percent: 90, low_threshold_percent: 70}",
        default=_DEFAULTS.image_gc,
        check=check_image_gc,
        reloadable=True,
        children=IMAGE_GC_CHILDREN,
    ),
)
SETTING_KEYS = frozenset(key.name for key in SETTINGS_FIELDS)
# Keys a reload applies at once; the others need a restart.
RELOADABLE = frozenset(key.name for key in SETTINGS_FIELDS if key.reloadable)

# Pairs whose order matters: a base above its maximum makes backoff nonsense.
_ORDERED = (("backoff_base", "backoff_max"),)


def _checked(
    values: Mapping[str, object], file: str, lines: Mapping[str, int]
) -> tuple[dict[str, Any], list[ConfigError]]:
    """Every key's value, converted (an absent key's is its default), and every problem."""
    errors: list[ConfigError] = []

    def at_of(key: str) -> At:
        return At(errors, file, key, lines.get(key))

    # Unlike in a service file, null is a value for the check to judge: docker_host: null
    # means the default engine, workers: null is an error.
    good, failed = check_keys(values, SETTINGS_FIELDS, at_of, null_is_absent=False)
    for low, high in _ORDERED:
        if low not in failed and high not in failed and good[low] > good[high]:
            reason = f"must not be greater than {high} ({good[high]}s)"
            errors.append(ConfigError(file, lines.get(low, lines.get(high)), low, reason))
    if good["docker_host"] and not failed & {"docker_host", "docker_tls"}:
        tls, insecure = good["docker_tls"], good["docker_insecure_tcp"]
        problem = plain_tcp_problem(good["docker_host"], tls, insecure)
        if problem:
            errors.append(ConfigError(file, lines.get("docker_host"), "docker_host", problem))
    return good, errors


def check_settings(settings: Settings, file: str = "<settings>") -> list[ConfigError]:
    """Every problem with already-built settings, e.g. after command-line overrides.

    config_dir is not checked: a missing directory is legal (it declares nothing).
    """
    return _checked({key.name: getattr(settings, key.name) for key in SETTINGS_FIELDS}, file, {})[1]


# healerd.yaml is read strictly whatever it says: it is what sets strict_modes.
_SETTINGS_ESCAPE = (
    "; strict_modes: false cannot help, as healerd.yaml is what sets it and is always checked"
)


def _read(path: Path, file: str) -> tuple[Any, list[ConfigError]]:
    raw, errors = read_config_file(
        path, file, "settings file", strict=True, escape=_SETTINGS_ESCAPE
    )
    if raw is None:
        return None, errors
    return load_yaml_bytes(raw, file)


def load_settings(path: Path) -> Settings:
    """Settings from `path`; a missing file means all defaults. Raises SettingsError.

    The file is read through healerd.config.trust.read_trusted with strict rules before
    anything in it counts, whatever it says about strict_modes: it is refused when anyone
    but root or healerd's own user owns it or could write it or a directory above it,
    when it is a symbolic link, not a regular file or over 1 MiB.
    """
    file = str(path)
    data, errors = _read(path, file)
    values: dict[str, object] = {}
    lines: dict[str, int] = {}
    if data is not None and not isinstance(data, LineDict):
        errors.append(ConfigError(file, 1, "", f"must be a mapping, not {describe(data)}"))
    elif data is not None:
        for key, value in data.items():
            line = data.line_of(key)
            if key in SETTING_KEYS:
                values[key], lines[key] = value, line or 1
            elif key == "config_dir":
                reason = "is set on the command line, not in the file that lives inside it"
                errors.append(ConfigError(file, line, key, reason))
            elif not (isinstance(key, str) and key.startswith("x-")):
                errors.append(
                    ConfigError(file, line, str(key), unknown_key_reason(key, SETTING_KEYS))
                )
    good, more = _checked(values, file, lines)
    if errors or more:
        raise SettingsError(sort_errors([*errors, *more]))
    return Settings(**good)
