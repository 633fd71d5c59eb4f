"""The healerd process: flags and settings, signals, threads, and the main loop.

Signal handlers only set flags; the main loop decides what to do with them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from healerd import __version__
from healerd.config import (
    RELOADABLE,
    ConfigError,
    DesiredStore,
    Settings,
    SettingsError,
    check_settings,
    load_conf_dir,
    load_settings,
)
from healerd.config.registryauth import auth_file
from healerd.core.admission import Admission
from healerd.core.backoff import Backoff
from healerd.core.clock import Clock, SystemClock
from healerd.core.controller import Controller, LoopSettings
from healerd.core.executor import plain_tag
from healerd.core.ownership import HostKey, Signer, Unverified, sign
from healerd.core.ratelimit import TokenBucket
from healerd.core.readlanes import ReadBudget, ReadLanes
from healerd.core.state import ServiceState
from healerd.core.status import NodeReport
from healerd.core.timings import Timings
from healerd.daemon import instance
from healerd.daemon.api.server import ApiOptions, ApiServer, parse_listen
from healerd.daemon.confwatch import ConfigWatcher
from healerd.daemon.credentials import CredentialsFile
from healerd.daemon.engineaddr import connect, engine_url
from healerd.daemon.handoff import HandOff
from healerd.daemon.hostkey import HostKeyError, load_or_create
from healerd.daemon.imagework import ImageWork
from healerd.daemon.journal import make_handler
from healerd.daemon.memory import keep_large_blocks_in_mmap
from healerd.daemon.metrics import LoopMetrics, Metrics
from healerd.daemon.notify import Notifier
from healerd.daemon.runbook import FileRunBook
from healerd.daemon.watcher import EventWatcher
from healerd.engine import Engine, EngineError
from healerd.host import HostProbe
from healerd.host.psutil_probe import PsutilProbe
from healerd.vocabulary import EventKind

log = logging.getLogger("healerd")

EXIT_CONFIG = 2
EXIT_RUNNING = 3
SHUTDOWN_GRACE = 3.0
# A host key younger than this was made by this start (handoff.take_back_all).
NEW_KEY = 60.0


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


def _self_pipe() -> tuple[int, int]:
    """Signal handlers and other threads only set a flag and write a byte; the main loop
    sleeps in select() on it. (A handler that touched a threading.Event could deadlock
    against the main thread's own wait on it.)"""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


class Daemon:
    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        clock: Clock | None = None,
        probe: HostProbe | None = None,
        *,
        api_options: ApiOptions | None = None,
        id_lock_dir: Path | None = None,
        host_key: HostKey | None = None,
    ) -> None:
        """`api_options`: the API's options from the command line. `id_lock_dir`: where
        the engine-ID lock lives. `host_key` signs containers (ownership.py). None: tests."""
        self.settings = settings
        self.api_options = api_options or ApiOptions()
        self.clock = clock or SystemClock()
        self.signed = self._signed(engine, host_key)
        self.name_tag = name_tag = host_key.name_tag if host_key is not None else plain_tag
        limits = settings.node_limits
        # Every engine request of healerd's takes from one token bucket (but the API's
        # readers' and the hand-off's: core/readlanes.py, daemon/handoff.py).
        self.bucket = TokenBucket(
            limits.engine_calls_per_second, limits.engine_call_burst, self.clock
        )
        engine.meter.pacer = self.bucket
        self.engine = engine
        self.probe = probe or PsutilProbe()
        self.loop = loop_settings(settings)
        self.admission = Admission(
            self.probe, self.clock, limits, self._data_root, self.loop.timings
        )
        self.store = DesiredStore()
        loop_metrics = LoopMetrics()
        self.credentials = CredentialsFile()
        # Signed, and off the budget: only what healerd owns, at the pace a stop allows.
        self.handoff = HandOff(engine, settings.state_dir)
        self.runbook = FileRunBook(settings.state_dir)
        self.controller = self._controller(name_tag, loop_metrics)
        self.metrics = Metrics(loop_metrics, self.controller, node=self.node_report)
        self.images = ImageWork(
            self.controller, self.engine, self.clock, self.probe, self.metrics.image_gc,
            lambda: self.settings,
        )  # fmt: skip
        self.watcher = EventWatcher(self.engine, self.controller, self.clock, self.loop)
        self._stop = threading.Event()
        self._wake_r, self._wake_w = _self_pipe()
        self._stop_requested = False
        self._reload_requested = False
        self._last_errors: tuple[ConfigError, ...] = ()
        self._warned_missing_dir = False
        self._file_settings: Settings | None = None
        self._settings_errors: list[str] = []
        self.notifier = Notifier()
        self.id_lock_dir = id_lock_dir
        self._id_lock: int | None = None
        self.exit_code = 0

    def _controller(self, name_tag: Callable[[str], str], metrics: LoopMetrics) -> Controller:
        """The loop, on the heal budget; readers get budgets of their own."""
        return Controller(
            self.engine,
            self.clock,
            self.loop,
            admission=self.admission,
            hooks=[metrics],
            engine_guard=self._before_first_look,
            # When a list call finds the engine back, do not wait out the stream's backoff.
            on_engine_back=lambda: self.watcher.kick(),
            # The API's reads: budgets of their own per caller, never the heal budget.
            readers=ReadLanes(self.engine, self.clock, ReadBudget()),
            name_tag=name_tag,
            credentials=self.credentials.for_image,
            runbook=self.runbook,
        )

    @functools.cached_property
    def confwatch(self) -> ConfigWatcher:
        """The config watcher; run() starts it, until then no file counts as being written."""
        return ConfigWatcher(self.settings.config_dir, self.request_reload)

    def _signed(self, engine: Engine, key: HostKey | None) -> Signer | None:
        return sign(engine, key, self.clock.time, self._unverified) if key else None

    def _unverified(self, u: Unverified) -> None:
        """A container with healerd's labels it cannot prove it made: told once."""
        message = f"container {u.name} ({u.id[:12]}) has healerd's labels but {u.why}: left alone"
        log.warning("%s: %s", u.service, message)
        self.controller.events.record(EventKind.UNVERIFIED, u.service, message, u.name)

    def unverified(self) -> list[Unverified]:
        return self.signed.unverified() if self.signed is not None else []

    def guard_engine(self) -> None:
        """One healerd per engine, whatever the address it is reached by: lock the
        engine's ID. Raises EngineError while that cannot be checked (engine away) and
        when another healerd holds it (then this one stops, exit code 3)."""
        if self.id_lock_dir is None or self._id_lock is not None:
            return
        engine_id = self.engine.identity()
        if not engine_id:
            self._id_lock = -1  # an engine without an ID: the address lock is all we have
            return
        try:
            self._id_lock = instance.acquire_id(engine_id, self.id_lock_dir)
        except instance.AlreadyRunning as exc:
            log.error("%s", exc)
            self.exit_code = EXIT_RUNNING
            self.request_stop()
            raise EngineError(str(exc)) from None
        except OSError as exc:
            log.warning("cannot lock the engine's ID (%s); relying on the address lock", exc)
            self._id_lock = -1

    def _before_first_look(self) -> None:
        """The engine's ID locked, and a hand-off of the last stop taken back: raises
        EngineError until both are done (the loop looks again)."""
        self.guard_engine()
        taken = self.handoff.take_back()
        if taken is not None:
            log.info("took back the engine's restart policy from %d container(s)", taken)

    def _hand_off(self) -> None:
        """At a clean stop of a healerd that had the engine (see core/handoff.py)."""
        if not self.settings.handoff_on_stop or self.exit_code or not self.controller.engine_ok:
            return
        keep = {
            st.name
            for st in self.controller.statuses()
            if st.paused or st.state in (ServiceState.CRASH_LOOP_BACK_OFF, ServiceState.FAILED)
        }
        c = self.controller
        self.handoff.at_stop(c.desired.services, keep, self.clock.time(), c.known)

    def _data_root(self) -> str:
        return self.controller.engine_data_root or ""

    def node_report(self) -> NodeReport:
        a, calls = self.admission, self.engine.meter.stats
        return NodeReport(
            sample=a.sample(),
            pressure=a.pressure(),
            limits=a.limits,
            me=self.probe.self_sample(),
            waiting=a.waiting(),
            engine_calls=calls.calls,
            engine_calls_throttled=calls.throttled,
            engine_throttled_seconds=calls.throttled_seconds,
            settings_errors=tuple(self._settings_errors),
            credentials_error=self.credentials.error,
        )

    # -- signals: flags only ----------------------------------------------------

    def _wake(self) -> None:
        # A full pipe means the loop is awake anyway.
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"x")

    def request_stop(self) -> None:
        self._stop_requested = True
        self._wake()

    def request_reload(self) -> None:
        self._reload_requested = True
        self._wake()

    def install_signal_handlers(self) -> None:
        def on_signal(signum: int, _frame: FrameType | None) -> None:
            if signum == signal.SIGHUP:
                self._reload_requested = True
            else:
                self._stop_requested = True

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)
        # The C-level handler writes the signal number here, waking select().
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

    def _sleep(self, timeout: float) -> None:
        select.select([self._wake_r], [], [], max(0.0, timeout))
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    # -- config -----------------------------------------------------------------

    def reload_settings(self) -> None:
        """Apply healerd.yaml's node keys (thresholds, estimates, the engine call cap)
        at once; the others take effect at the next start. A bad file changes nothing,
        nor does one still being written (the watcher applies it once it is closed)."""
        path = self.settings.config_dir / "healerd.yaml"
        if path in self.confwatch.writing():
            log.info("%s is being written; settings unchanged until it is complete", path)
            return
        try:
            new = load_settings(path)
        except SettingsError as exc:
            # Said once per distinct error, not at every resync.
            messages = [str(e) for e in exc.errors]
            if messages != self._settings_errors:
                for msg in messages:
                    log.error("settings not reloaded: %s", msg)
                self._settings_errors = messages
            return
        if self._settings_errors:
            log.info("healerd.yaml is valid again")
            self._settings_errors = []
        old_file, self._file_settings = self._file_settings, new
        if old_file is None or new == old_file:
            return
        apply = {k: getattr(new, k) for k in RELOADABLE if getattr(new, k) != getattr(old_file, k)}
        later = sorted(
            k
            for k in vars(new)
            if k not in RELOADABLE and k != "config_dir" and getattr(new, k) != getattr(old_file, k)
        )
        if later:
            log.warning(
                "healerd.yaml: %s changed; takes effect at the next start", ", ".join(later)
            )
        if apply:
            self.settings = dataclasses.replace(self.settings, **apply)
            limits = self.settings.node_limits
            self.admission.update_limits(limits)
            self.bucket.update(limits.engine_calls_per_second, limits.engine_call_burst)
            log.info("healerd.yaml: applied %s", ", ".join(sorted(apply)))
            self.controller.enqueue_all(force=True)

    def _prefer_what_runs(self) -> None:
        """Before the first merge: a service declared in two files keeps the declaration
        its containers run, not the first file by name (which would replace them). One
        list call before READY=1, bounded by engine_timeout like the identity check."""
        if self._stop_requested:
            return
        try:
            observed = self.engine.list_managed()
        except EngineError as exc:
            # Then name order decides, as on a first start.
            log.info("engine not listed before the first config merge: %s", exc)
            return
        self.store.prefer_running((c.service, c.source_file, c.spec_hash) for c in observed)

    def reload(self) -> None:
        """Re-read every config file; broken files keep their last good services, and so
        do files still being written (their state of the previous reload stands)."""
        self.reload_settings()
        s = self.settings
        if self.credentials.reload(auth_file(s.config_dir, s.registry_auth), strict=s.strict_modes):
            self.controller.retry_pulls()
        conf_dir = self.settings.config_dir / "conf.d"
        writing = sorted(str(p) for p in self.confwatch.writing() if p.parent == conf_dir)
        for file in writing:
            log.info("%s is being written; its last version stands until it is complete", file)
        try:
            results = load_conf_dir(
                conf_dir,
                strict_modes=self.settings.strict_modes,
                keep=self.store.last_results(writing),
                environment=self.settings.interpolate_environment,
            )
        except OSError as exc:
            log.error("cannot read %s: %s; keeping the current desired state", conf_dir, exc)
            return
        state = self.store.update(results)
        if not conf_dir.is_dir():
            # A directory that vanished (a failed mount, a typo in --config-dir) must not
            # read as "remove everything": containers of undeclared services stay.
            if not self._warned_missing_dir:
                log.warning("%s does not exist: no services declared, none removed", conf_dir)
                self._warned_missing_dir = True
            state = dataclasses.replace(state, hold_orphans=True)
        else:
            self._warned_missing_dir = False
        if state.errors != self._last_errors:
            for err in state.errors:
                log.error(
                    "config error: %s (file skipped; its services keep running as they were)", err
                )
            if not state.errors and self._last_errors:
                log.info("config errors resolved")
            self._last_errors = state.errors
        self.controller.set_desired(state)

    # -- main loop ----------------------------------------------------------------

    def run(self) -> int:
        s = self.settings
        log.info(
            "healerd %s starting: config %s, engine %s, %d workers, resync every %gs",
            __version__,
            s.config_dir,
            docker_host(s),
            s.workers,
            s.resync_interval,
        )
        self._prefer_what_runs()
        # The watcher first, so that a file written from now on is held at the first read
        # too; a writer already busy before healerd started cannot be known
        # (docs/user-guide.md, Hot reload).
        self.confwatch.start()
        self.reload()
        log.info(
            "%d service(s) declared: %s",
            len(self.controller.desired.services),
            ", ".join(sorted(self.controller.desired.services)) or "-",
        )
        self.controller.enqueue_all(force=True)
        threads = self._start_threads()
        api = self._start_api()
        log.info("ready: %s", self.controller.summary())
        self.notifier.ready(self.controller.summary())
        self._loop()
        log.info("stopping; containers are left running")
        self.notifier.stopping()
        api.stop()
        self._stop.set()
        self.images.stop()
        self.confwatch.stop()
        self.watcher.stop()
        self.controller.shutdown()
        self.runbook.flush()
        self._hand_off()
        for t in threads:
            t.join(timeout=SHUTDOWN_GRACE / len(threads))
        return self.exit_code

    def _start_threads(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(
                target=self.controller.run, args=(self._stop,), name="healerd-dispatch", daemon=True
            ),
            threading.Thread(
                target=self.watcher.run, args=(self._stop,), name="healerd-events", daemon=True
            ),
            *self.images.threads(self._stop),
        ]
        for t in threads:
            t.start()
        return threads

    def _start_api(self) -> ApiServer:
        api = ApiServer(self, self.api_options)
        try:
            api.start()
        except OSError as exc:
            # Healing matters more than the API: keep going without it.
            log.error("local API not served on %s: %s", self.settings.socket_path, exc)
        return api

    def _loop(self) -> None:
        """Until asked to stop: watchdog ticks, reloads on request, and a periodic resync."""
        s = self.settings
        next_resync = self.clock.monotonic() + s.resync_interval
        while not self._stop_requested:
            self._sleep(min(next_resync - self.clock.monotonic(), self.notifier.tick_interval))
            if self._stop_requested:
                break
            self.notifier.tick(
                self.controller.summary, self.controller.last_progress, self.clock.monotonic()
            )
            if self._reload_requested:
                self._reload_requested = False
                log.info("reloading configuration (SIGHUP, file change or API request)")
                self.notifier.reloading()
                self.reload()
                self.notifier.ready(self.controller.summary())
            if self.clock.monotonic() >= next_resync:
                # Level-triggered repair: re-read files and look at every service again.
                self.reload()
                self.controller.enqueue_all()
                next_resync = self.clock.monotonic() + s.resync_interval


def setup_logging(level: str) -> None:
    # Structured journal entries under systemd, plain stderr lines elsewhere.
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[make_handler()])
    # Every engine request at debug level would drown what healerd itself says.
    logging.getLogger("urllib3").setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = resolve_settings(args)
    except SettingsError as exc:
        for err in exc.errors:
            print(f"healerd: {err}", file=sys.stderr)
        return EXIT_CONFIG
    setup_logging(settings.log_level)
    keep_large_blocks_in_mmap()  # before any thread: the lists' buffers go back at once
    try:
        lock_fd = instance.acquire(docker_host(settings))
    except (instance.AlreadyRunning, OSError) as exc:
        log.error("%s", exc)
        return EXIT_RUNNING
    try:
        engine = connect(settings, os.environ)
    except ValueError as exc:
        log.error("%s", exc)
        return EXIT_CONFIG
    api_options = ApiOptions(
        admin_group=args.admin_group or None, metrics_listen=args.metrics_listen
    )
    try:
        key = load_or_create(settings.state_dir, time.time(), strict=settings.strict_modes)
    except HostKeyError as exc:
        log.error("%s", exc)
        return EXIT_CONFIG
    daemon = Daemon(
        settings, engine, api_options=api_options, id_lock_dir=instance.LOCK_DIR, host_key=key
    )
    if time.time() - key.born < NEW_KEY:
        with contextlib.suppress(OSError):  # then nothing to take back: no state dir
            daemon.handoff.take_back_all()
    try:
        daemon.guard_engine()
    except EngineError:
        if daemon.exit_code:
            return daemon.exit_code
        # The engine is not there yet: the loop checks before its first look.
    daemon.install_signal_handlers()
    code = daemon.run()
    os.close(lock_fd)
    logging.shutdown()
    # Worker threads may sit in a slow engine call; the next start adopts whatever
    # they leave, so do not wait for them.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
