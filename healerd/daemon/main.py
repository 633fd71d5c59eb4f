"""The healerd process: its parts, signals, threads, and the main loop (flags: daemon.flags,
a reload: daemon.reload, the loop's parts: core.wiring).

Signal handlers only set flags; the main loop decides what to do with them.
"""

from __future__ import annotations

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
from healerd.config import DesiredStore, Settings, SettingsError
from healerd.config.registryauth import auth_file
from healerd.config.updatedefaults import update_defaults
from healerd.core.admission import Admission
from healerd.core.clock import Clock, SystemClock
from healerd.core.controller import Controller
from healerd.core.executor import plain_tag
from healerd.core.lifecycle import ServiceState
from healerd.core.notices import unclean_notice
from healerd.core.ratelimit import TokenBucket
from healerd.core.readlanes import ReadBudget, ReadLanes
from healerd.core.signing import HostKey, Signer, Unverified, sign
from healerd.core.status import NodeReport
from healerd.core.wiring import build_loop
from healerd.daemon import instance, runmarker
from healerd.daemon.api.server import ApiOptions, ApiServer
from healerd.daemon.confwatch import ConfigWatcher
from healerd.daemon.credentials import CredentialsFile
from healerd.daemon.engineaddr import connect
from healerd.daemon.flags import (
    build_parser,
    docker_host,
    loop_settings,
    resolve_settings,
    self_pipe,
)
from healerd.daemon.handoff import HandOff
from healerd.daemon.hostkey import HostKeyError, load_or_create
from healerd.daemon.imagework import ImageWork
from healerd.daemon.journal import setup_logging
from healerd.daemon.memory import keep_large_blocks_in_mmap
from healerd.daemon.metrics import LoopMetrics, Metrics
from healerd.daemon.notifications import for_daemon
from healerd.daemon.notify import Notifier as SystemdNotifier
from healerd.daemon.reload import ReloadMemory, node_changes, prefer_what_runs, read_conf_d
from healerd.daemon.runbook import FileRunBook
from healerd.daemon.sources import Sources
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
        rate, burst = limits.engine_calls_per_second, limits.engine_call_burst
        self.bucket = TokenBucket(rate, burst, self.clock)
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
        self.notices = for_daemon(
            lambda: self.settings.notifications,
            lambda: self.controller,
            lambda target, result: self.metrics.notified(target, result),
        )
        self.controller = self._controller(name_tag, loop_metrics)
        self.controller.events.listeners.append(self.notices.offer)
        self.controller.state_listeners.append(self.notices.offer)
        self.metrics = Metrics(loop_metrics, self.controller, node=self.node_report)
        self.metrics.waiting_updates = self.controller.updates.waiting
        gc, now = self.metrics.image_gc, lambda: self.settings  # as reloaded last
        self.images = ImageWork(self.controller, self.engine, self.clock, self.probe, gc, now)
        self.images.reload = self.request_reload  # a bundle from the images directory
        self.watcher = EventWatcher(self.engine, self.controller, self.clock, self.loop)
        self.sources = Sources.of(settings, on_change=self.request_reload)  # git, own threads
        self._stop = threading.Event()
        self._wake_r, self._wake_w = self_pipe()
        self._stop_requested = self._reload_requested = False
        self.reloads = ReloadMemory()  # the API's reload answers read it too
        self.notifier = SystemdNotifier()
        self.id_lock_dir = id_lock_dir
        self._id_lock: int | None = None
        self.exit_code = 0

    def _controller(self, name_tag: Callable[[str], str], metrics: LoopMetrics) -> Controller:
        """The loop, on the heal budget; readers get budgets of their own."""
        return build_loop(
            self.engine,
            self.clock,
            self.loop,
            admission=self.admission,
            hooks=[metrics, self.notices],
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
        self.images.engine_ours.set()

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
            settings_errors=tuple(self.reloads.settings_errors),
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
        at once; the others take effect at the next start (healerd.daemon.reload)."""
        path = self.settings.config_dir / "healerd.yaml"
        apply = node_changes(path, self.confwatch.writing(), self.reloads)
        if apply:
            self.settings = dataclasses.replace(self.settings, **apply)
            limits = self.settings.node_limits
            self.admission.update_limits(limits)
            self.bucket.update(limits.engine_calls_per_second, limits.engine_call_burst)
            log.info("healerd.yaml: applied %s", ", ".join(sorted(apply)))
            self.controller.enqueue_all(force=True)

    def _prefer_what_runs(self) -> None:
        if not self._stop_requested:
            prefer_what_runs(self.engine, self.store)

    def reload(self) -> None:
        """Re-read every config file (healerd.daemon.reload)."""
        n = self.reloads.begin()
        self.reload_settings()
        s = self.settings
        if self.credentials.reload(auth_file(s.config_dir, s.registry_auth), strict=s.strict_modes):
            self.controller.retry_pulls()
        state = read_conf_d(s, self.confwatch.writing(), self.store, self.reloads, self.sources)
        self.confwatch.watch_also(self.store.sources(outside=s.state_dir))  # not git's
        if state is not None:
            self.controller.set_desired(update_defaults(state, s.updates))
        self.reloads.ended = (n, state is not None)

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
        if runmarker.began(s.state_dir, os.getpid()):
            self.notices.offer(unclean_notice(self.clock.time()))
        self._prefer_what_runs()
        # The watcher first, so that a file written from now on is held at the first read
        # too; a writer already busy before healerd started cannot be known
        # (docs/user-guide.md, Hot reload).
        self.confwatch.start()
        self.reload()
        declared = sorted(self.controller.desired.services)
        log.info("%d service(s) declared: %s", len(declared), ", ".join(declared) or "-")
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
        self.sources.stop()
        self.confwatch.stop()
        self.watcher.stop()
        self.controller.shutdown()
        self.runbook.flush()
        self._hand_off()
        runmarker.ended(s.state_dir)
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
            threading.Thread(
                target=self.notices.run, args=(self._stop,), name="healerd-notify", daemon=True
            ),
            *self.images.threads(self._stop),
            *self.sources.threads(self._stop),
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


__all__ = ["Daemon", "build_parser", "docker_host", "loop_settings", "main", "resolve_settings"]


if __name__ == "__main__":
    sys.exit(main())
