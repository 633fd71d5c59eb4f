"""The local API's routes: what each endpoint reads or changes, apart from HTTP. Kept free
of sockets so the routes can be tested with a fake daemon. Handlers run in the server's
threads and touch the reconcile loop only through the controller's thread-safe methods."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from healerd import __version__
from healerd.core.events import Event
from healerd.core.readlanes import PRIVILEGED, Reader, ReadThrottled
from healerd.daemon.api.access import AdminPolicy, Decision, Peer, peer_label
from healerd.daemon.api.buildverb import build_verb
from healerd.daemon.api.changes import ApiError, images_response, notify_test, prune_volumes
from healerd.daemon.api.describe import EngineAway, NoSuchService, describe_payload
from healerd.daemon.api.limits import InFlight
from healerd.daemon.api.logs import InspectLimits, Streamed, logs_response, parse_tail
from healerd.daemon.api.syncverb import sync_verb
from healerd.daemon.api.updateverbs import PARAMS, VERBS, update_verb
from healerd.daemon.api.views import (
    DaemonLike,
    action_view,
    config_error_view,
    container_view,
    event_view,
    masks_of,
    snapshots_payload,
    status_payload,
)
from healerd.daemon.metrics import Metrics
from healerd.daemon.ratelog import RateLimitedLog
from healerd.engine import EngineError

log = logging.getLogger("healerd.api")

SERVICE_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,49}")
# Longest an events long-poll may hold a connection.
MAX_EVENT_WAIT = 30.0
# How often a long poll looks whether its client is still there.
GONE_CHECK_INTERVAL = 0.5
# How long POST /v1/reload waits for the main loop to apply the new config.
RELOAD_APPLY_WAIT = 5.0


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: dict[str, Any]
    peer: Peer | None
    # Called once the request is fully read: long waits must not count against its deadline.
    release_deadline: Callable[[], None] = field(default=lambda: None)
    # True once the client has closed its end of the connection: a long poll stops.
    client_gone: Callable[[], bool] = field(default=lambda: False)

    def one(self, name: str) -> str | None:
        values = self.query.get(name)
        if not values:
            return None
        if len(values) > 1:
            raise ApiError(400, f"parameter {name!r} given more than once")
        return values[0]

    def number(self, name: str, default: float, lo: float, hi: float) -> float:
        raw = self.one(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ApiError(400, f"parameter {name!r}: not a number: {raw!r}") from None
        if not lo <= value <= hi:
            raise ApiError(400, f"parameter {name!r}: must be between {lo:g} and {hi:g}")
        return value


def _then(first: Callable[[], None], then: Callable[[], None]) -> Callable[[], None]:
    def both() -> None:
        try:
            first()
        finally:
            then()

    return both


def check_service_name(name: str) -> str:
    if not SERVICE_NAME_RE.fullmatch(name):
        raise ApiError(400, f"not a service name: {name[:60]!r}")
    return name


Handler = Callable[[Request], tuple[int, Any]]


class Api:
    """The routes, independent of the transport, so they can be tested with a fake daemon."""

    def __init__(
        self,
        daemon: DaemonLike,
        policy: AdminPolicy,
        metrics: Metrics | None = None,
        ratelog: RateLimitedLog | None = None,
        limits: InspectLimits | None = None,
    ) -> None:
        self.daemon = daemon
        self.policy = policy
        self.metrics = metrics
        # Warnings a client can repeat at will (refusals): once per kind per 10 s.
        self.ratelog = ratelog or RateLimitedLog(log)
        self.started = time.time()
        self.limits = limits or InspectLimits()
        self.inflight = InFlight(self.limits.per_user)  # logs and describe at once, per uid

    # -- dispatch ---------------------------------------------------------------------

    def handle(self, req: Request) -> tuple[int, Any]:
        """(status, payload); payload bytes are sent as they are, a Streamed as it is
        made, anything else as JSON."""
        try:
            return self._route(req)
        except ReadThrottled as exc:
            raise ApiError(429, str(exc)) from None

    def _route(self, req: Request) -> tuple[int, Any]:
        path = req.path
        if path in ("/metrics", "/v1/metrics"):
            self._only(req, "GET", set())
            if self.metrics is None:
                raise ApiError(404, "metrics are not enabled")
            return 200, self.metrics.render()
        if path == "/v1/version":
            self._only(req, "GET", set())
            return 200, {"version": __version__, "api": "v1", "started": self.started}
        if path == "/v1/status":
            self._only(req, "GET", {"service"})
            names = [check_service_name(n) for n in req.query.get("service", [])]
            return 200, status_payload(
                self.daemon.controller,
                names,
                node=self.daemon.node_report(),
                unverified=self.daemon.unverified(),
                notifications=self.daemon.notices.targets_view(),
                updates=self.daemon.images.update_view,
                sources=self.daemon.sources.views(),
            )
        by_service = {
            "/v1/containers": self._containers,
            "/v1/diff": self._diff,
            "/v1/snapshots": self._snapshots,
            "/v1/images": self._images,
        }.get(path)
        if by_service is not None:
            self._only(req, "GET", {"service"})
            return by_service(req)
        if path == "/v1/events":
            self._only(req, "GET", {"after", "since_time", "wait", "service"})
            return self._events(req)
        if path in (
            "/v1/reload",
            "/v1/reconcile",
            "/v1/prune/volumes",
            "/v1/notify/test",
            "/v1/sync",
        ):
            return self._change(req, path)
        if path == "/v1/build":
            self._only(req, "POST", {"service", "no_cache"})
            self._authorize(req, "build")
            return build_verb(
                self.daemon, req.one, peer_label(req.peer), lambda: self._reloaded(req)
            )
        m = re.fullmatch(r"/v1/services/([^/]+)/(logs|describe)", path)
        if m:
            return self._inspect(req, check_service_name(unquote(m.group(1))), m.group(2))
        m = re.fullmatch(r"/v1/services/([^/]+)/(reconcile|pause|resume|[a-z]+)", path)
        if m and (m.group(2) in VERBS or m.group(2) in ("reconcile", "pause", "resume")):
            name, verb = check_service_name(unquote(m.group(1))), m.group(2)
            self._only(req, "POST", PARAMS.get(verb, set()))
            self._authorize(req, verb)
            return self._service_verb(req, name, verb)
        raise ApiError(404, f"no such endpoint: {path[:100]}")

    def _only(self, req: Request, method: str, params: set[str]) -> None:
        """A route takes one method and names its parameters: anything else is a 405/400."""
        if req.method != method:
            raise ApiError(405, f"{req.path} takes {method}, not {req.method}")
        unknown = sorted(set(req.query) - params)
        if unknown:
            raise ApiError(400, f"unknown parameter(s): {', '.join(p[:40] for p in unknown)}")

    def _authorize(self, req: Request, what: str) -> None:
        self._enforce(req, what, self.policy.decide(req.peer, what))

    def _logs_group(self) -> str | None:
        return self.daemon.settings.logs_group  # reloadable: read at each request

    def _enforce(self, req: Request, what: str, d: Decision) -> None:
        if not d.allowed:
            uid = req.peer.uid if req.peer is not None else None
            self.ratelog.warning(
                f"refused-{uid}-{what}",
                "refused %s %s from %s: %s",
                req.method,
                req.path[:100],
                peer_label(req.peer),
                d.reason,
            )
            raise ApiError(403, d.reason)

    # -- reading ------------------------------------------------------------------------

    def _service_filter(self, req: Request) -> str | None:
        name = req.one("service")
        return check_service_name(name) if name is not None else None

    def _containers(self, req: Request) -> tuple[int, Any]:
        service = self._service_filter(req)
        try:
            containers = self.daemon.controller.container_statuses(service, self._reader(req))
        except EngineError as exc:
            raise ApiError(503, f"cannot list containers: engine unreachable: {exc}") from None
        now = time.time()
        rows = sorted(containers, key=lambda c: (c.service, c.name))
        subs = masks_of(self.daemon.controller)
        return 200, {"containers": [container_view(c, now, subs(c.service)) for c in rows]}

    def _events(self, req: Request) -> tuple[int, Any]:
        log_ = self.daemon.controller.events
        after = int(req.number("after", 0, 0, 2**62))
        since_time = req.one("since_time")
        wall: float | None = None
        if since_time is not None:
            wall = req.number("since_time", 0, 0, 1e11)
        wait = req.number("wait", 0, 0, MAX_EVENT_WAIT)
        service = self._service_filter(req)

        def pick(events: list[Event]) -> list[Event]:
            return [
                e
                for e in events
                if e.seq > after
                and (wall is None or e.time >= wall)
                and (service is None or e.service == service)
            ]

        events = pick(log_.since(after, wall_time=wall))
        deadline = time.monotonic() + wait
        req.release_deadline()
        seq = max([after, *(e.seq for e in events)])
        while not events and wait > 0:
            left = deadline - time.monotonic()
            if left <= 0 or req.client_gone():
                # A client that went away frees its connection now, not at the timeout.
                break
            got = log_.wait(seq, min(left, GONE_CHECK_INTERVAL))
            if got:
                seq = max(seq, *(e.seq for e in got))
            events = pick(got)
        last = max([log_.last_seq, *(e.seq for e in events)])
        subs = masks_of(self.daemon.controller)
        return 200, {"events": [event_view(e, subs(e.service)) for e in events], "last_seq": last}

    def _diff(self, req: Request) -> tuple[int, Any]:
        service = self._service_filter(req)
        if service is not None and not self._known(service):
            raise ApiError(404, f"no such service: {service}")
        try:
            actions = self.daemon.controller.preview(service, self._reader(req))
        except EngineError as exc:
            raise ApiError(503, f"cannot plan: engine unreachable: {exc}") from None
        subs = masks_of(self.daemon.controller)
        return 200, {"actions": [action_view(a, subs(a.service)) for a in actions]}

    def _snapshots(self, req: Request) -> tuple[int, Any]:
        """Open to every reader, as status is: names, times, digests and sizes of the
        copies, never a path or their data (state_dir is root's alone)."""
        service = self._service_filter(req)
        return 200, snapshots_payload(self.daemon.settings.state_dir, service)

    def _images(self, req: Request) -> tuple[int, Any]:
        """Open to every reader, as status is; the engine's list on the caller's budget."""
        return images_response(self.daemon.images, self._service_filter(req), self._reader(req))

    def _reader(self, req: Request) -> Reader:
        """Whose read budget the request's engine calls take (core/readlanes.py)."""
        peer = req.peer
        if peer is not None and peer.uid == 0:
            return PRIVILEGED
        privileged = peer is not None and self.policy.decide(peer, "read").allowed
        return Reader(peer.uid if peer is not None else None, privileged)

    def _inspect(self, req: Request, name: str, what: str) -> tuple[int, Any]:
        """Logs and describe: at most `limits.per_user` at once per uid; the request's
        deadline ends once it is read (a describe waits for its read budget, a log is
        sent for up to `limits.stream_seconds`)."""
        if what == "describe":
            self._only(req, "GET", set())
        else:
            self._only(req, "GET", {"previous", "tail", "since"})
            self._enforce(req, "logs", self.policy.decide_logs(req.peer, self._logs_group()))
        uid = req.peer.uid if req.peer is not None else None
        if not self.inflight.take(uid):
            raise ApiError(
                429, f"at most {self.inflight.per_uid} logs or describe requests at once per user"
            )
        done = True
        try:
            req.release_deadline()
            if what == "describe":
                tag = self.daemon.name_tag
                data = describe_payload(self.daemon.controller, name, tag, self._reader(req))
                data["updates"] = self.daemon.images.update_view(name, time.time())
                return 200, data
            streamed = self._logs(req, name)
            # The slot is freed once the output is sent, or abandoned (Streamed.close).
            streamed.close = _then(streamed.close, lambda: self.inflight.release(uid))
            done = False
            return 200, streamed
        except NoSuchService as exc:
            raise ApiError(404, str(exc)) from None
        except EngineAway as exc:
            raise ApiError(503, str(exc)) from None
        finally:
            if done:
                self.inflight.release(uid)

    def _logs(self, req: Request, name: str) -> Streamed:
        try:
            tail = parse_tail(req.one("tail"))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        since = req.one("since")
        return logs_response(
            self.daemon.controller,
            name,
            previous=req.one("previous") in ("1", "true"),
            tail=tail,
            since=None if since is None else req.number("since", 0, 0, 1e11),
            reader=self._reader(req),
            limits=self.limits,
        )

    def _known(self, service: str) -> bool:
        c = self.daemon.controller
        return service in c.desired.services or any(s.name == service for s in c.statuses())

    # -- changing -------------------------------------------------------------------------

    def _reloaded(self, req: Request) -> bool:
        """A reload requested and waited for (RELOAD_APPLY_WAIT): whether it applied."""
        reloads = self.daemon.reloads
        ticket = reloads.begun  # a reload under way now may have read the files before
        self.daemon.request_reload()
        log.info("reload requested by %s", peer_label(req.peer))
        req.release_deadline()
        deadline = time.monotonic() + RELOAD_APPLY_WAIT
        while (applied := reloads.served(ticket)) is None and not req.client_gone():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return bool(applied)

    def _reload(self, req: Request) -> tuple[int, Any]:
        applied = self._reloaded(req)
        after = self.daemon.controller.desired
        node = self.daemon.node_report() if applied else None
        settings_errors = list(node.settings_errors) if node else []
        credentials_error = node.credentials_error if node else ""
        refused = len(after.errors) + len(settings_errors) + bool(credentials_error)
        if not applied:
            message = "reload requested"
        elif refused:
            message = f"reload refused: {refused} error(s); those files keep their last good state"
        else:
            message = "configuration reloaded"
        return 200 if applied else 202, {
            "ok": applied and not refused,
            "applied": applied,
            "message": message,
            "services": sorted(after.services),
            "config_errors": [config_error_view(e) for e in after.errors],
            "settings_errors": settings_errors,
            "credentials_error": credentials_error,
        }

    def _change(self, req: Request, path: str) -> tuple[int, Any]:
        """The daemon-wide changes: reload, reconcile everything, prune volumes, a test
        notification."""
        if path == "/v1/reload":
            self._only(req, "POST", set())
            self._authorize(req, "reload")
            return self._reload(req)
        if path == "/v1/reconcile":
            self._only(req, "POST", set())
            self._authorize(req, "reconcile")
            self.daemon.controller.reconcile_now(None)
            log.info("reconcile of every service requested by %s", peer_label(req.peer))
            return 202, {"ok": True, "message": "reconcile of every service queued"}
        if path == "/v1/sync":
            self._only(req, "POST", {"source"})
            self._authorize(req, "sync")
            req.release_deadline()
            return sync_verb(self.daemon, req.one("source"), peer_label(req.peer))
        if path == "/v1/notify/test":
            self._only(req, "POST", set())
            self._authorize(req, "notify")
            log.info("notification test requested by %s", peer_label(req.peer))
            req.release_deadline()
            return notify_test(self.daemon, req.body)
        self._only(req, "POST", {"dry_run"})
        self._authorize(req, "prune")
        dry_run = req.query.get("dry_run", ["0"])[-1] in ("1", "true")
        return prune_volumes(self.daemon, dry_run, peer_label(req.peer))

    def _service_verb(self, req: Request, name: str, verb: str) -> tuple[int, Any]:
        c, who = self.daemon.controller, peer_label(req.peer)
        if verb in VERBS:  # the updater's (healerd.daemon.api.updateverbs)
            return update_verb(self.daemon, name, verb, req.one, who, req.release_deadline)
        if verb == "pause":
            if name not in c.desired.services:
                raise ApiError(404, f"no such service: {name} (only declared services pause)")
            already = name in c.paused_services()
            c.pause(name)
            msg = f"{name} {'was already' if already else 'is now'} paused"
        elif verb == "resume":
            if name not in c.paused_services() and not self._known(name):
                raise ApiError(404, f"no such service: {name}")
            was = name in c.paused_services()
            refused = c.resume(name)  # "" or why its hold stands (a copy runs)
            msg = refused or (f"{name} resumed" if was else f"{name} was not paused")
        else:
            if not self._known(name):
                raise ApiError(404, f"no such service: {name}")
            c.reconcile_now(name)
            msg = f"reconcile of {name} queued"
        log.info("%s of %s requested by %s", verb, name, who)
        return 200, {"ok": True, "service": name, "message": msg}


__all__ = ["Api", "ApiError", "Handler", "Request", "check_service_name"]
