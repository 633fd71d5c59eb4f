"""Prometheus metrics: counters and histograms fed by the controller's hooks, plus a
collector that reads the controller's state at scrape time (so gauges are never stale).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from healerd import __version__
from healerd.core.lifecycle import ServiceState
from healerd.core.status import NodeReport, is_converged
from healerd.daemon.api.views import ControllerLike

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# From a replica's loss to its replacement running: sub-second is the goal.
HEAL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
PASS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A gauge per service for each of these ServiceStatus fields: (metric name, help).
PER_SERVICE = {
    "desired": ("healerd_service_desired_replicas", "Replicas declared."),
    "running": ("healerd_service_running_replicas", "Containers running."),
    "available": (
        "healerd_service_available_replicas",
        "Containers running and healthy (or without a healthcheck).",
    ),
    "up_to_date": (
        "healerd_service_up_to_date_replicas",
        "Running containers of the current spec.",
    ),
    "restarts": ("healerd_service_restarts", "Replacements of the service's replicas."),
}


class LoopMetrics:
    """Counters and histograms fed by the loop's hooks (healerd.core.report.LoopHooks):
    made first, handed to the Controller when it is built, then served by `Metrics`."""

    def __init__(self) -> None:
        self.actions = Counter(
            "healerd_actions",
            "Actions healerd executed, by kind (create, remove, ...) and result (ok, error).",
            ["kind", "result"],
            registry=None,
        )
        self.reconcile = Histogram(
            "healerd_reconcile_duration_seconds",
            "Duration of one reconcile pass of a service (observe, plan, act).",
            ["service"],
            buckets=PASS_BUCKETS,
            registry=None,
        )
        self.heal = Histogram(
            "healerd_heal_latency_seconds",
            "From a replica's loss (as healerd saw it) to it running again (in place or "
            "by a replacement).",
            ["service"],
            buckets=HEAL_BUCKETS,
            registry=None,
        )
        self.heals = Counter(
            "healerd_heals",
            "Replicas healed, by how: in-place (the same container started again) or "
            "replaced (a new container).",
            ["service", "how"],
            registry=None,
        )

    def on_action(self, kind: str, service: str, ok: bool) -> None:
        self.actions.labels(kind, "ok" if ok else "error").inc()

    def on_pass(self, service: str, seconds: float) -> None:
        if service:
            self.reconcile.labels(service).observe(max(0.0, seconds))

    def on_heal(self, service: str, latency_seconds: float, how: str) -> None:
        if service:
            self.heal.labels(service).observe(max(0.0, latency_seconds))
            self.heals.labels(service, how).inc()


class ImageGcMetrics:
    """What image garbage collection removed (healerd.core.imagegc), fed by its hook."""

    def __init__(self) -> None:
        self.images = Counter(
            "healerd_images_removed",
            "Images healerd's image garbage collection removed (thresholds or after an update).",
            registry=None,
        )
        self.bytes = Counter(
            "healerd_image_bytes_freed",
            "Bytes of the images image garbage collection removed, as the engine sized them "
            "(shared layers included).",
            registry=None,
        )

    @property
    def counters(self) -> tuple[Counter, Counter]:
        return self.images, self.bytes

    def on_removed(self, size: int) -> None:
        self.images.inc()
        self.bytes.inc(max(0, size))


class Metrics:
    """Everything /metrics serves: the loop's counters, the services' state read from the
    controller at scrape time, and the host."""

    def __init__(
        self,
        loop: LoopMetrics,
        controller: ControllerLike,
        node: Callable[[], NodeReport | None] = lambda: None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        # Fed by image garbage collection's hook (ImageCollector's on_removed).
        self.image_gc = ImageGcMetrics()
        for metric in (
            loop.actions,
            loop.reconcile,
            loop.heal,
            loop.heals,
            *self.image_gc.counters,
        ):
            self.registry.register(metric)
        self.notifications = Counter(
            "healerd_notifications",
            "Notifications by target (its name; '' for the intake, 'test-url' for "
            "`healerctl notify test --url`) and result: sent, failed (kept and tried again) "
            "or dropped (a full queue or outbox).",
            ["target", "result"],
            registry=None,
        )
        self.registry.register(self.notifications)
        self.state = StateCollector(controller)
        self.registry.register(self.state)
        self.registry.register(NodeCollector(node))
        # Fed by the daemon: (service -> (digest, why)) of the updates that wait.
        self.waiting_updates: Callable[[], dict[str, tuple[str, str]]] = dict
        self.registry.register(_UpdatesWaiting(lambda: self.waiting_updates()))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def notified(self, target: str, result: str) -> None:
        self.notifications.labels(target, result).inc()


class _UpdatesWaiting(Collector):
    def __init__(self, waiting: Callable[[], dict[str, tuple[str, str]]]) -> None:
        self._waiting = waiting

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        fam = GaugeMetricFamily(
            "healerd_image_update_waiting",
            "1 while a new digest of the service's tag waits: `why` is available "
            "(auto_update: notify), delay, window, lock or pre_update.",
            labels=["service", "why"],
        )
        for service, (_, why) in sorted(self._waiting().items()):
            fam.add_metric([service, why], 1.0)
        yield fam


class StateCollector(Collector):
    """Reads the controller at every scrape. Events are counted by kind from the ring
    buffer, continuing from the last scrape (more than the buffer's capacity between
    two scrapes would be undercounted)."""

    def __init__(self, controller: ControllerLike) -> None:
        self._controller = controller
        self._lock = threading.Lock()
        self._event_seq = 0
        self._event_counts: dict[str, int] = {}

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def _count_events(self) -> dict[str, int]:
        with self._lock:
            for e in self._controller.events.since(self._event_seq):
                self._event_counts[e.kind] = self._event_counts.get(e.kind, 0) + 1
                self._event_seq = max(self._event_seq, e.seq)
            return dict(self._event_counts)

    def collect(self) -> Iterator[Metric]:
        c = self._controller
        info = GaugeMetricFamily("healerd_build_info", "healerd's version.", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield from self._services(c)
        yield from self._engine(c)
        yield from self._config(c)
        yield from self._events()
        stats = c.stats
        yield CounterMetricFamily(
            "healerd_reconcile_passes", "Reconcile passes run.", value=stats.passes
        )
        yield CounterMetricFamily(
            "healerd_engine_list_calls", "Container list calls made.", value=stats.list_calls
        )
        yield CounterMetricFamily(
            "healerd_engine_list_reuses",
            "Batches of keys served by a list begun after they were queued.",
            value=stats.reused_looks,
        )

    def _services(self, c: ControllerLike) -> Iterator[Metric]:
        families = {
            field: GaugeMetricFamily(name, doc, labels=["service"])
            for field, (name, doc) in PER_SERVICE.items()
        }
        converged = GaugeMetricFamily(
            "healerd_service_converged", "1 when what runs is what is declared.", labels=["service"]
        )
        paused = GaugeMetricFamily(
            "healerd_service_paused", "1 while an operator paused the service.", labels=["service"]
        )
        backoff = GaugeMetricFamily(
            "healerd_service_in_backoff",
            "1 while healerd waits out a backoff before acting on the service again.",
            labels=["service"],
        )
        state = GaugeMetricFamily(
            "healerd_service_state", "The service's current state (1).", labels=["service", "state"]
        )
        for st in c.statuses():
            for field, fam in families.items():
                fam.add_metric([st.name], float(getattr(st, field)))
            converged.add_metric([st.name], 1.0 if is_converged(st) else 0.0)
            paused.add_metric([st.name], 1.0 if st.paused else 0.0)
            in_backoff = ServiceState(st.state).is_backoff or st.next_retry is not None
            backoff.add_metric([st.name], 1.0 if in_backoff else 0.0)
            state.add_metric([st.name, st.state], 1.0)
        yield from families.values()
        yield from (converged, paused, backoff, state)

    def _engine(self, c: ControllerLike) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "healerd_engine_up", "1 when the last engine call succeeded, 0 otherwise."
        )
        up.add_metric([], 1.0 if c.engine_ok else 0.0)
        yield up
        if c.engine_version:
            ev = GaugeMetricFamily(
                "healerd_engine_info", "The engine's version.", labels=["version"]
            )
            ev.add_metric([c.engine_version], 1.0)
            yield ev

    def _config(self, c: ControllerLike) -> Iterator[Metric]:
        desired = c.desired
        yield GaugeMetricFamily(
            "healerd_config_errors", "Errors in the service files.", value=len(desired.errors)
        )
        yield GaugeMetricFamily(
            "healerd_config_broken_files",
            "Service files skipped because of errors.",
            value=len(desired.broken_files),
        )
        yield GaugeMetricFamily(
            "healerd_services_declared", "Services declared.", value=len(desired.services)
        )

    def _events(self) -> Iterator[Metric]:
        events = CounterMetricFamily(
            "healerd_events",
            "Events healerd recorded, by kind (created, removed, backoff, config-error, ...).",
            labels=["kind"],
        )
        for kind, n in sorted(self._count_events().items()):
            events.add_metric([kind], n)
        yield events


class NodeCollector(Collector):
    """The host line of `healerctl status` and healerd's own footprint, at scrape time."""

    def __init__(self, node: Callable[[], NodeReport | None]) -> None:
        self._node = node

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        node = self._node()
        if node is None:
            return
        yield from _memory(node)
        yield from _disk(node)
        yield from _load_and_pressure(node)
        yield from _self_and_engine_calls(node)


def _gauge(name: str, doc: str, value: float | None) -> Iterator[Metric]:
    """A gauge only when the host could tell its value."""
    if value is not None:
        yield GaugeMetricFamily(name, doc, value=float(value))


def _memory(node: NodeReport) -> Iterator[Metric]:
    h, lim = node.sample, node.limits
    yield from _gauge("healerd_host_memory_total_bytes", "Host memory.", h.memory_total)
    yield from _gauge(
        "healerd_host_memory_available_bytes",
        "Host memory available (psutil), as kubelet's memory.available.",
        h.memory_available,
    )
    if h.memory_total is not None:
        yield from _gauge(
            "healerd_host_memory_available_threshold_bytes",
            "Memory pressure below this (pressure_memory_available).",
            lim.memory_available.floor(h.memory_total),
        )


def _disk(node: NodeReport) -> Iterator[Metric]:
    h, lim = node.sample, node.limits
    disk = [h.disk_path] if h.disk_path else [""]
    for name, doc, value in (
        (
            "healerd_host_disk_total_bytes",
            "Size of the engine's data root filesystem.",
            h.disk_total,
        ),
        ("healerd_host_disk_free_bytes", "Free space on the engine's data root.", h.disk_free),
        (
            "healerd_host_inodes_total",
            "Inodes of the engine's data root filesystem.",
            h.inodes_total,
        ),
        ("healerd_host_inodes_free", "Free inodes on the engine's data root.", h.inodes_free),
    ):
        if value is not None:
            fam = GaugeMetricFamily(name, doc, labels=["path"])
            fam.add_metric(disk, float(value))
            yield fam
    if h.disk_total is not None:
        yield from _gauge(
            "healerd_host_disk_free_threshold_bytes",
            "Disk pressure below this (pressure_disk_free).",
            lim.disk_free.floor(h.disk_total),
        )


def _load_and_pressure(node: NodeReport) -> Iterator[Metric]:
    h = node.sample
    if h.load is not None:
        load = GaugeMetricFamily("healerd_host_load", "Load average.", labels=["period"])
        for period, avg in zip(("1m", "5m", "15m"), h.load, strict=True):
            load.add_metric([period], avg)
        yield load
    pressure = GaugeMetricFamily(
        "healerd_host_pressure",
        "1 while a resource is below its threshold (no extra containers start).",
        labels=["resource"],
    )
    for resource, on in node.pressure.flags.items():
        pressure.add_metric([resource], 1.0 if on else 0.0)
    yield pressure
    waiting = GaugeMetricFamily(
        "healerd_service_waiting_for_resources",
        "1 while some of the service's containers wait for room on the host.",
        labels=["service"],
    )
    for service in sorted(node.waiting):
        waiting.add_metric([service], 1.0)
    yield waiting


def _self_and_engine_calls(node: NodeReport) -> Iterator[Metric]:
    me = node.me
    yield from _gauge("healerd_self_resident_memory_bytes", "healerd's own RSS.", me.rss)
    if me.cpu_seconds is not None:
        yield CounterMetricFamily(
            "healerd_self_cpu_seconds", "healerd's own CPU time.", value=me.cpu_seconds
        )
    yield from _gauge("healerd_self_open_fds", "healerd's open file descriptors.", me.open_fds)
    yield from _gauge("healerd_self_threads", "healerd's threads.", me.threads)
    yield CounterMetricFamily(
        "healerd_engine_calls", "Engine API calls healerd made.", value=node.engine_calls
    )
    yield CounterMetricFamily(
        "healerd_engine_calls_throttled",
        "Engine calls that waited for the engine_calls_per_second cap.",
        value=node.engine_calls_throttled,
    )
    yield CounterMetricFamily(
        "healerd_engine_throttled_seconds",
        "Time engine calls waited for the engine_calls_per_second cap.",
        value=node.engine_throttled_seconds,
    )
    yield from _gauge(
        "healerd_engine_calls_per_second_limit",
        "The engine call cap (engine_calls_per_second).",
        node.limits.engine_calls_per_second,
    )
