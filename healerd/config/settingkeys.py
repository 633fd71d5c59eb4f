"""The key table of healerd.yaml: one row per key with its type, doc, example, default
(the Settings field's), check and whether a reload applies it.

CONFIG.md and the man pages are generated from these rows (healerd.config.schema).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from healerd.config.dockertls import DOCKER_TLS_CHILDREN, check_docker_tls
from healerd.config.imagegc import IMAGE_GC_CHILDREN, check_image_gc
from healerd.config.keys import Key, parsed
from healerd.config.notifyconf import NOTIFY_CHILDREN, check_notifications
from healerd.config.settingchecks import (
    LOG_LEVELS,
    MAX_CALLS,
    MAX_HISTORY,
    MAX_WORKERS,
    absolute_path,
    backoff_seconds,
    boolean,
    burst,
    engine_address,
    group_name,
    history_limit,
    interval,
    log_level,
    optional_path,
    rate,
    size,
    threshold,
    variable_names,
    worker_count,
)
from healerd.config.settingsmodel import Settings
from healerd.config.sourcekeys import SOURCE_CHILDREN, check_sources
from healerd.config.updatekeys import UpdateDefaults, check_update_defaults

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
        engine_address,
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
        boolean,
    ),
    _setting(
        "socket_path",
        "absolute path",
        "Where healerd listens for healerctl.",
        "/run/healerd/healerd.sock",
        absolute_path,
    ),
    _setting(
        "state_dir",
        "absolute path",
        "Where healerd keeps its host key, which signs the containers it makes (made at "
        "first start, root-only; back it up with the config).",
        "/var/lib/healerd",
        absolute_path,
    ),
    _setting(
        "images_dir",
        "absolute path",
        "Image archives placed here (`*.tar`, `*.tar.gz`, `*.tar.zst`, as `docker save` "
        "writes them) are loaded into the engine once each, after their writer closed them, "
        "tracked by the file's sha256 (healerctl images lists them; a corrupt one is refused "
        "and left in place). A restart applies a change here. See docs/user-guide.md, "
        "Images from a directory.",
        "/var/lib/healerd/images",
        absolute_path,
    ),
    _setting(
        "resync_interval",
        "duration 1s to 168h",
        "How often every service is checked in full, besides reacting to engine events and "
        "config changes.",
        "1m",
        interval,
    ),
    _setting(
        "workers",
        f"integer 1 to {MAX_WORKERS}",
        "How many reconcile workers run in parallel.",
        "8",
        worker_count,
    ),
    _setting(
        "history_limit",
        f"integer 0 to {MAX_HISTORY}",
        "Failed containers kept per replica, stopped, after their replacement: for "
        "`healerctl logs --previous` and `describe` (like Swarm's "
        "task-history-retention-limit). 0 keeps none.",
        "2",
        history_limit,
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
        boolean,
        reloadable=True,
    ),
    _setting(
        "backoff_base",
        "duration 1ms to 168h, <= backoff_max",
        "First retry delay after a failed engine call.",
        "10ms",
        backoff_seconds,
    ),
    _setting(
        "backoff_max",
        "duration 1ms to 168h",
        "The longest retry delay after failures.",
        "30s",
        backoff_seconds,
    ),
    _setting(
        "engine_timeout", "duration 1s to 168h", "Limit for one engine API call.", "1m", interval
    ),
    _setting(
        "engine_down_log_interval",
        "duration 1s to 168h",
        "While the engine is unreachable, how often to say so in the log.",
        "1m",
        interval,
    ),
    _setting("log_level", f"{' | '.join(LOG_LEVELS)}", "Log verbosity.", "debug", log_level),
    _setting(
        "strict_modes",
        "boolean",
        "Refuse service files and env files that anyone but root (or healerd's own user) "
        "owns or could write, or that sit in such a directory, as sshd's StrictModes does; "
        "the same for secrets, configs and credential helpers, and for the directories on "
        "the way to a bind source and the project directory. false is for development "
        "only. healerd.yaml itself is always checked.",
        "false",
        boolean,
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
        variable_names,
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
        optional_path,
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
        group_name,
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
        interval,
        reloadable=True,
    ),
    _setting(
        "pressure_memory_available",
        "size or percentage",
        "Memory pressure below this much available memory (kubelet's memory.available). "
        "Under pressure healerd starts no extra container (no scale-up, no surge); see "
        "docs/user-guide.md, Node awareness.",
        "256Mi",
        threshold,
        reloadable=True,
    ),
    _setting(
        "pressure_disk_free",
        "size or percentage",
        "Disk pressure below this much free space on the engine's data root.",
        "15%",
        threshold,
        reloadable=True,
    ),
    _setting(
        "pressure_inodes_free",
        "count or percentage",
        "Disk pressure below this many free inodes on the data root.",
        "10%",
        threshold,
        reloadable=True,
    ),
    _setting(
        "container_memory_estimate",
        "size",
        "The memory a container without mem_limit is assumed to need when healerd counts "
        "how many more containers fit above pressure_memory_available.",
        "64Mi",
        size,
        reloadable=True,
    ),
    _setting(
        "pull_disk_margin",
        "size",
        "The size assumed for an image to pull when no earlier version of it is on disk; a "
        "pull that would leave less than pressure_disk_free is refused.",
        "1Gi",
        size,
        reloadable=True,
    ),
    _setting(
        "engine_calls_per_second",
        f"number 1 to {MAX_CALLS}",
        "Cap on healerd's engine API calls (a token bucket, like client-go's QPS), so that "
        "an event storm cannot turn healerd into the load on the host.",
        "20",
        rate,
        reloadable=True,
    ),
    _setting(
        "engine_call_burst",
        f"integer 1 to {MAX_CALLS}",
        "Calls allowed at once above the rate (the bucket's size).",
        "50",
        burst,
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
    Setting(
        "updates",
        "mapping",
        "The defaults of the services' image updates: `auto_update`, `update_window`, "
        "`update_delay` and `update_lock`, as in a service's `x-healerd:` (which wins "
        "where it says one). See docs/user-guide.md, Image updates with automatic "
        "rollback.",
        "{auto_update: notify, update_window: 'Sat,Sun 02:00-05:00', update_delay: 24h}",
        default=UpdateDefaults(),
        default_doc="none: no image updates, no window, delay or lock",
        check=check_update_defaults,
        reloadable=True,
    ),
    Setting(
        "notifications",
        "list of targets",
        "Where healerd tells what happened and why: a crash loop (exit code, OOM or "
        "signal, the last lines of output), a service Failed or Degraded and its recovery, "
        "image updates and rollbacks, a config file refused, the engine lost, host "
        "pressure, an unclean stop of healerd. Sent with Apprise (ntfy, Gotify, e-mail, "
        "Slack, Matrix, Telegram, MQTT, webhooks, ...): one message per service and kind "
        "while the condition lasts, then one when it is over; notices that come together "
        "go as one digest. Sending never holds a heal back: a target that does not answer "
        "is retried with backoff, and shown in `healerctl status`. The keys of each target "
        "are below. See docs/user-guide.md, Notifications; for the Prometheus alerting "
        "rules and the Grafana dashboard the package ships, docs/user-guide.md, "
        "Prometheus alerting rules.",
        "[{url: 'ntfy://ntfy.example.net/edge-7', events: [crash-loop, failed, recovered]}]",
        default=(),
        check=check_notifications,
        reloadable=True,
        children=NOTIFY_CHILDREN,
    ),
    Setting(
        "sources",
        "list of git sources",
        "Configuration from git repositories: each source's files become part of conf.d "
        "once the commit at the tip of its branch or tag is fetched and its signature "
        "checked; an unsigned or wrongly signed commit, or one whose files are refused, is "
        "not applied and the last good commit stays. Fetched in threads of their own (a "
        "slow or dead remote never holds a heal), kept in state_dir/sources. The keys of "
        "each source are below; a restart applies a change here. See docs/user-guide.md, "
        "Configuration from git.",
        "[{git: 'https://git.example.net/edge/fleet.git', path: 'hosts/%H/', verify: "
        "{allowed_signers: /etc/healerd/allowed_signers}}]",
        default=(),
        check=check_sources,
        children=SOURCE_CHILDREN,
    ),
)
SETTING_KEYS = frozenset(key.name for key in SETTINGS_FIELDS)
# Keys a reload applies at once; the others need a restart.
RELOADABLE = frozenset(key.name for key in SETTINGS_FIELDS if key.reloadable)
