"""The engine's event stream (EventSource): Docker's event names mapped to healerd's
EngineAction here, so that nothing past the adapter reads them."""

from __future__ import annotations

import json
import signal
import socket
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import requests.exceptions

from healerd.engine.api import EngineUnavailable
from healerd.engine.docker import sdk
from healerd.engine.docker.client import DockerClient
from healerd.engine.docker.errors import translated
from healerd.engine.docker.listing import int_or_none
from healerd.model import LABEL_SERVICE, EngineAction, EngineEvent

# The engine's names of the actions healerd subscribes to, and what each is.
ACTIONS = {
    "create": EngineAction.CREATED,
    "start": EngineAction.STARTED,
    "die": EngineAction.DIED,
    "stop": EngineAction.STOPPED,
    "kill": EngineAction.KILLED,
    "destroy": EngineAction.DESTROYED,
    "pause": EngineAction.PAUSED,
    "unpause": EngineAction.UNPAUSED,
    "oom": EngineAction.OOM,
    "health_status": EngineAction.HEALTH,  # "health_status: healthy", ...
    "rename": EngineAction.RENAMED,  # the list's names change: readers' LastLook
}
WATCHED_EVENTS = sorted(ACTIONS)
# requests' chunk size for "each chunk as it arrives" (its type hints say int only).
_AS_THEY_COME: Any = None
# Podman 4.3's Docker-compatible stream sends Docker's names but `remove` for `destroy`
# (and no `stop`; `kill` without a signal). Its event filter matches its own names:
# `died` lets its `die` events through, which a filter of `die` drops.
PODMAN_ACTIONS = {"died": EngineAction.DIED, "remove": EngineAction.DESTROYED}
_NAMES = {**ACTIONS, **PODMAN_ACTIONS}


def event_filters(kind: str | None) -> dict[str, list[str]]:
    """The stream's filters. Podman 4.3 matches a label filter only as key=value (a key
    alone lets nothing through): on Podman the label is checked here (event_of)."""
    if kind == "podman":
        return {"type": ["container"], "event": sorted(_NAMES)}
    return {"type": ["container"], "label": [LABEL_SERVICE], "event": WATCHED_EVENTS}


def signal_number(value: object) -> int | None:
    """A kill event's signal ("9", "SIGKILL", "KILL") as its number."""
    text = str(value or "").upper()
    if text.isdigit():
        return int(text)
    try:
        return int(signal.Signals["SIG" + text.removeprefix("SIG")])
    except KeyError:
        return None


def event_of(line: bytes) -> EngineEvent | None:
    """One line of the engine's event stream, if it is about a healerd container."""
    event = json.loads(line)
    actor = event.get("Actor") or {}
    attrs = actor.get("Attributes") or {}
    service = attrs.get(LABEL_SERVICE)
    action = _NAMES.get(str(event.get("Action", "")).partition(":")[0])
    if not service or action is None:
        return None
    return EngineEvent(
        service=str(service),
        container_id=str(actor.get("ID", "")),
        action=action,
        signal=signal_number(attrs.get("signal")),
        exit_code=int_or_none(attrs.get("exitCode")),
        name=str(attrs.get("name", "")),
    )


class DockerEvents:
    """EventSource: one stream at a time, on a client of its own."""

    _client: DockerClient
    _watch_lock: threading.Lock
    _watch_stream: Any
    _watch_stopped: bool

    def watch(
        self, on_event: Callable[[EngineEvent], None], on_connected: Callable[[], None]
    ) -> None:
        # A client of its own: the stream holds its connection for as long as it lives.
        api = self._client.new_api(timeout=None)
        try:
            with translated("events"):
                # The version negotiated (made with the floor, the client may be older).
                sdk.speak(api, self._client.negotiated())
                # Not api.events(): its chunk reader can hold the last event back until
                # the next one arrives (docker-py over urllib3 2), and a held-back `die`
                # is a missed heal. requests yields each chunk as it arrives.
                filters = event_filters(self._client.engine_kind)
                query = {"filters": json.dumps(filters)}
                resp = self._client.get("/events", api=api, params=query, stream=True, timeout=None)
            with self._watch_lock:
                if self._watch_stopped:
                    resp.close()
                    return
                self._watch_stream = resp
            on_connected()
            with translated("events"):
                for line in resp.iter_lines(chunk_size=_AS_THEY_COME):
                    event = event_of(line) if line else None
                    if event is not None:
                        on_event(event)
        except (
            AttributeError,
            ValueError,
            OSError,
            requests.exceptions.RequestException,
            EngineUnavailable,
        ) as exc:
            # stop_watch() from another thread surfaces as one of these (a stream that
            # "ended prematurely", translated): then the watch just returns.
            with self._watch_lock:
                if self._watch_stopped:
                    return
            if isinstance(exc, EngineUnavailable):
                raise
            raise EngineUnavailable(f"events: stream broken ({exc})") from exc
        finally:
            with self._watch_lock:
                self._watch_stream = None
                if not self._watch_stopped:
                    # A stream that ends is most often an engine that restarted (maybe
                    # upgraded), which calls on fresh connections need not notice.
                    self._client.api_version = None
            api.close()

    def stop_watch(self) -> None:
        with self._watch_lock:
            self._watch_stopped = True
            stream = self._watch_stream
        if stream is None:
            return
        # Response.close() would wait for the reader thread's buffer lock; shutting the
        # socket down wakes the reader with end-of-stream instead.
        sock = sdk.stream_socket(stream)
        if sock is not None:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


__all__ = [
    "ACTIONS",
    "PODMAN_ACTIONS",
    "WATCHED_EVENTS",
    "DockerEvents",
    "event_filters",
    "event_of",
    "signal_number",
]
