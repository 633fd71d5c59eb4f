"""Daemon settings from the optional healerd.yaml.

Unlike service files, bad settings stop healerd at startup: there is no last-good value
to fall back on, and guessing at timeouts or the engine address would hide the mistake.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healerd.config.errors import ConfigError, SettingsError, sort_errors, unknown_key_reason
from healerd.config.services import describe, parse_duration, parse_size
from healerd.config.trust import trust_problem
from healerd.config.yamlload import LineDict, read_yaml_file
from healerd.model import NodeLimits, Threshold

LOG_LEVELS = ("debug", "info", "warning", "error")
MAX_WORKERS = 64


@dataclass(frozen=True)
class Settings:
    """Daemon tunables (durations in seconds).

    Derive variants with `dataclasses.replace(settings, workers=8)`; values that did not
    come through load_settings (command-line overrides, say) can be checked with
    check_settings. `config_dir` is not read from healerd.yaml, which lives inside it.
    """

    config_dir: Path = Path("/etc/healerd")
    docker_host: str | None = None  # None: DOCKER_HOST, else the local socket
    socket_path: Path = Path("/run/healerd/healerd.sock")
    resync_interval: float = 30.0
    workers: int = 4
    backoff_base: float = 0.005
    backoff_max: float = 60.0
    engine_timeout: float = 30.0
    engine_down_log_interval: float = 30.0
    log_level: str = "info"
    # Refuse config files and directories that others than root (or healerd's own user)
    # could write, like sshd's StrictModes. false is for development only.
    strict_modes: bool = True
    # Node awareness (see NodeLimits); these take effect on a reload, no restart needed.
    pressure_memory_available: Threshold = NodeLimits.memory_available
    pressure_disk_free: Threshold = NodeLimits.disk_free
    pressure_inodes_free: Threshold = NodeLimits.inodes_free
    container_memory_estimate: int = NodeLimits.container_memory
    pull_disk_margin: int = NodeLimits.pull_disk_margin
    engine_calls_per_second: float = NodeLimits.engine_calls_per_second
    engine_call_burst: int = NodeLimits.engine_call_burst

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


# Keys a reload applies at once; the others need a restart.
RELOADABLE = frozenset(
    {
        "pressure_memory_available",
        "pressure_disk_free",
        "pressure_inodes_free",
        "container_memory_estimate",
        "pull_disk_margin",
        "engine_calls_per_second",
        "engine_call_burst",
    }
)


def _docker_host(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError("must be an engine address such as unix:///var/run/docker.sock")
    return value


def _socket_path(value: object) -> Path:
    if not isinstance(value, str | Path) or not str(value).startswith("/"):
        raise ValueError(f"must be an absolute path, not {value!r}")
    return Path(value)


def _interval(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError("must be greater than 0")
    return seconds


def _workers(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise ValueError(f"must be a whole number from 1 to {MAX_WORKERS}, not {value!r}")
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
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 1e6:
        raise ValueError(f"must be a number of calls per second from 1, not {value!r}")
    return float(value)


def _burst(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise ValueError(f"must be a whole number of calls from 1, not {value!r}")
    return value


def _log_level(value: object) -> str:
    if not isinstance(value, str) or value.lower() not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, not {value!r}")
    return value.lower()


_INTERVALS = (
    "resync_interval",
    "backoff_base",
    "backoff_max",
    "engine_timeout",
    "engine_down_log_interval",
)
_CHECKS: dict[str, Callable[[object], Any]] = {
    "docker_host": _docker_host,
    "socket_path": _socket_path,
    "workers": _workers,
    "log_level": _log_level,
    "strict_modes": _bool,
    "pressure_memory_available": _threshold,
    "pressure_disk_free": _threshold,
    "pressure_inodes_free": _threshold,
    "container_memory_estimate": _size,
    "pull_disk_margin": _size,
    "engine_calls_per_second": _rate,
    "engine_call_burst": _burst,
}
_CHECKS.update(dict.fromkeys(_INTERVALS, _interval))


@dataclass(frozen=True)
class SettingDoc:
    """What CONFIG.md says about one key of healerd.yaml (its check is in _CHECKS)."""

    type: str
    doc: str
    example: str


# One entry per key of _CHECKS (a unit test holds them equal); defaults come from Settings.
SETTINGS_DOCS: dict[str, SettingDoc] = {
    "docker_host": SettingDoc(
        "engine address or null",
        "The Docker engine to manage; null means $DOCKER_HOST, else the local socket.",
        "unix:///var/run/docker.sock",
    ),
    "socket_path": SettingDoc(
        "absolute path", "Where healerd listens for healerctl.", "/run/healerd/healerd.sock"
    ),
    "resync_interval": SettingDoc(
        "duration > 0",
        "How often every service is checked in full, besides reacting to engine events and "
        "config changes.",
        "1m",
    ),
    "workers": SettingDoc(
        f"integer 1 to {MAX_WORKERS}", "How many reconcile workers run in parallel.", "8"
    ),
    "backoff_base": SettingDoc(
        "duration > 0, <= backoff_max", "First retry delay after a failed engine call.", "10ms"
    ),
    "backoff_max": SettingDoc("duration > 0", "The longest retry delay after failures.", "30s"),
    "engine_timeout": SettingDoc("duration > 0", "Limit for one engine API call.", "1m"),
    "engine_down_log_interval": SettingDoc(
        "duration > 0", "While the engine is unreachable, how often to say so in the log.", "1m"
    ),
    "log_level": SettingDoc(f"{' | '.join(LOG_LEVELS)}", "Log verbosity.", "debug"),
    "strict_modes": SettingDoc(
        "boolean",
        "Refuse config files, env files and directories that anyone but root (or healerd's "
        "own user) owns or could write, as sshd's StrictModes does. false is for development "
        "only.",
        "false",
    ),
    "pressure_memory_available": SettingDoc(
        "size or percentage",
        "Memory pressure below this much available memory (kubelet's memory.available). "
        "Under pressure healerd starts no extra container (no scale-up, no surge); see "
        "README, Node awareness.",
        "256Mi",
    ),
    "pressure_disk_free": SettingDoc(
        "size or percentage",
        "Disk pressure below this much free space on the engine's data root.",
        "15%",
    ),
    "pressure_inodes_free": SettingDoc(
        "count or percentage", "Disk pressure below this many free inodes on the data root.", "10%"
    ),
    "container_memory_estimate": SettingDoc(
        "size",
        "The memory a container without mem_limit is assumed to need when healerd counts "
        "how many more containers fit above pressure_memory_available.",
        "64Mi",
    ),
    "pull_disk_margin": SettingDoc(
        "size",
        "The size assumed for an image to pull when no earlier version of it is on disk; a "
        "pull that would leave less than pressure_disk_free is refused.",
        "1Gi",
    ),
    "engine_calls_per_second": SettingDoc(
        "number >= 1",
        "Cap on healerd's engine API calls (a token bucket, like client-go's QPS), so that "
        "an event storm cannot turn healerd into the load on the host.",
        "20",
    ),
    "engine_call_burst": SettingDoc(
        "integer >= 1", "Calls allowed at once above the rate (the bucket's size).", "50"
    ),
}

# Pairs whose order matters: a base above its maximum makes backoff nonsense.
_ORDERED = (("backoff_base", "backoff_max"),)


def _checked(
    values: dict[str, object], file: str, lines: dict[str, int]
) -> tuple[dict[str, Any], list[ConfigError]]:
    """Converts and checks settings values; the good ones come back normalised."""
    good: dict[str, Any] = {}
    errors: list[ConfigError] = []
    for key, value in values.items():
        try:
            good[key] = _CHECKS[key](value)
        except ValueError as exc:
            errors.append(ConfigError(file, lines.get(key), key, str(exc)))
    merged, failed = vars(Settings()) | good, values.keys() - good.keys()
    for low, high in _ORDERED:
        if low not in failed and high not in failed and merged[low] > merged[high]:
            reason = f"must not be greater than {high} ({merged[high]}s)"
            errors.append(ConfigError(file, lines.get(low, lines.get(high)), low, reason))
    return good, errors


def check_settings(settings: Settings, file: str = "<settings>") -> list[ConfigError]:
    """Every problem with already-built settings, e.g. after command-line overrides.

    config_dir is not checked: a missing directory is legal (it declares nothing).
    """
    return _checked({key: getattr(settings, key) for key in _CHECKS}, file, {})[1]


def load_settings(path: Path) -> Settings:
    """Settings from `path`; a missing file means all defaults. Raises SettingsError.

    Unless the file sets strict_modes: false, it is refused (SettingsError) when anyone
    but root or healerd's own user owns it or could write it.
    """
    file = str(path)
    data, errors = read_yaml_file(path, file, missing_ok=True)
    values: dict[str, object] = {}
    lines: dict[str, int] = {}
    if data is not None and not isinstance(data, LineDict):
        errors.append(ConfigError(file, 1, "", f"must be a mapping, not {describe(data)}"))
    elif data is not None:
        for key, value in data.items():
            line = data.line_of(key)
            if key in _CHECKS:
                values[key], lines[key] = value, line or 1
            elif key == "config_dir":
                reason = "is set on the command line, not in the file that lives inside it"
                errors.append(ConfigError(file, line, key, reason))
            elif not (isinstance(key, str) and key.startswith("x-")):
                errors.append(ConfigError(file, line, str(key), unknown_key_reason(key, _CHECKS)))
    good, more = _checked(values, file, lines)
    # Its own strict_modes: false is the documented way out, as for service files.
    strict = not errors and not more and good.get("strict_modes", True) and data is not None
    if strict and (problem := trust_problem(path)):
        errors.append(ConfigError(file, None, "file", problem))
    if errors or more:
        raise SettingsError(sort_errors([*errors, *more]))
    return Settings(**good)
