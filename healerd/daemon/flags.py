"""healerd's command line: the flags, and the settings they resolve to with healerd.yaml
(flags on top, through the same checks as the file)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from healerd import __version__
from healerd.config import Settings, SettingsError, check_settings, load_settings
from healerd.core.backoff import Backoff
from healerd.core.loopsettings import LoopSettings
from healerd.core.timings import Timings
from healerd.daemon.api.server import ApiOptions, parse_listen
from healerd.daemon.engineaddr import engine_url


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="healerd", description="Keep the containers declared in CONFIG_DIR/conf.d running."
    )
    p.add_argument("--version", action="version", version=f"healerd {__version__}")
    p.add_argument("--config-dir", type=Path, help="default /etc/healerd")
    p.add_argument(
        "--docker-host", help="engine address (default $DOCKER_HOST or the local socket)"
    )
    p.add_argument(
        "--socket", type=Path, help="local API socket (default /run/healerd/healerd.sock)"
    )
    p.add_argument(
        "--state-dir", type=Path, help="where the host key lives (default /var/lib/healerd)"
    )
    p.add_argument("--resync-interval", type=float, help="seconds between full resyncs")
    p.add_argument("--workers", type=int, help="services reconciled at once")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--admin-group",
        default=ApiOptions.admin_group,
        help="group whose members may change things over the local API (root always may; "
        "default healerd-admin; empty: root only)",
    )
    p.add_argument(
        "--metrics-listen",
        type=_listen_address,
        help="also serve /metrics over TCP on HOST:PORT (e.g. 127.0.0.1:9464); default off",
    )
    return p


def _listen_address(value: str) -> str:
    try:
        parse_listen(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def resolve_settings(args: argparse.Namespace) -> Settings:
    """healerd.yaml under the config dir, then command-line flags on top."""
    config_dir: Path = args.config_dir or Settings().config_dir
    settings = load_settings(config_dir / "healerd.yaml")
    overrides: dict[str, object] = {"config_dir": config_dir}
    for flag, name in (
        ("docker_host", "docker_host"),
        ("socket", "socket_path"),
        ("state_dir", "state_dir"),
        ("resync_interval", "resync_interval"),
        ("workers", "workers"),
        ("log_level", "log_level"),
    ):
        value = getattr(args, flag)
        if value is not None:
            overrides[name] = value
    settings = dataclasses.replace(settings, **overrides)  # type: ignore[arg-type]
    # Flags go through the same checks as the file.
    errors = check_settings(settings, "command line")
    if errors:
        raise SettingsError(errors)
    return settings


def docker_host(settings: Settings) -> str:
    return engine_url(settings, os.environ)


def loop_settings(settings: Settings) -> LoopSettings:
    return LoopSettings(
        workers=settings.workers,
        parallel_actions=max(4, settings.workers * 2),
        timings=Timings(backoff=Backoff(settings.backoff_base, settings.backoff_max)),
        engine_down_log_interval=settings.engine_down_log_interval,
        history_limit=settings.history_limit,
    )


def self_pipe() -> tuple[int, int]:
    """Signal handlers and other threads only set a flag and write a byte; the main loop
    sleeps in select() on it. (A handler that touched a threading.Event could deadlock
    against the main thread's own wait on it.)"""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


__all__ = ["build_parser", "docker_host", "loop_settings", "resolve_settings", "self_pipe"]
