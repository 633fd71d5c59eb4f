"""Config layer: service files, daemon settings and the merged desired state.

Depends only on healerd.model, the standard library and PyYAML, so it can be tested and
reused (by healerctl's `check`, say) without a Docker engine.
"""

from healerd.config.desired import (
    DesiredState,
    DesiredStore,
    is_config_name,
    list_config_files,
    load_conf_dir,
)
from healerd.config.envfile import EnvFileError, effective_environment, env_digest, read_env_files
from healerd.config.errors import ConfigError, SettingsError
from healerd.config.secrets import MountRefused, mounts_for_create
from healerd.config.servicefile import FileResult, load_service_file, parse_service_text
from healerd.config.settings import RELOADABLE, Settings, check_settings, load_settings
from healerd.config.units import parse_duration, parse_size

__all__ = [
    "RELOADABLE",
    "ConfigError",
    "DesiredState",
    "DesiredStore",
    "EnvFileError",
    "FileResult",
    "MountRefused",
    "Settings",
    "SettingsError",
    "check_settings",
    "effective_environment",
    "env_digest",
    "is_config_name",
    "list_config_files",
    "load_conf_dir",
    "load_service_file",
    "load_settings",
    "mounts_for_create",
    "parse_duration",
    "parse_service_text",
    "parse_size",
    "read_env_files",
]
