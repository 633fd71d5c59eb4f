"""The daemon's settings as one frozen value (`Settings`), each field with its default.

Built by healerd.config.settings from healerd.yaml; the key table that documents and
checks each field is healerd.config.settingkeys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from healerd import paths
from healerd.config.imagegc import ImageGcSettings
from healerd.config.notifyconf import NotifyTarget
from healerd.config.sourcekeys import GitSource
from healerd.config.updatekeys import UpdateDefaults
from healerd.model import DockerTLS, NodeLimits, Threshold


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
    # Image archives (docker save) placed here are loaded once (healerd.daemon.imagesdir).
    images_dir: Path = Path("/var/lib/healerd/images")
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
    # Where healerd tells what happened (the `notifications:` list; healerd.config.notifyconf).
    notifications: tuple[NotifyTarget, ...] = ()
    # The defaults of the services' image updates (the `updates:` section).
    updates: UpdateDefaults = field(default_factory=UpdateDefaults)
    # Configuration from git (the `sources:` list; healerd.config.sourcekeys).
    sources: tuple[GitSource, ...] = ()

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
