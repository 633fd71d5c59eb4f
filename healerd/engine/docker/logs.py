"""A container's log as the engine sends it (GET /containers/ID/logs), read in bounded
pieces.

The docker SDK's own `logs()` reads the whole body into memory (or, streamed, one frame
whatever its announced size, and a TTY container's output a byte at a time, with the
socket's timeout switched off): a log of hundreds of MiB became several times that in
healerd's memory (issue 29). Here a frame is read in pieces of at most CHUNK bytes,
every read bounded by the engine timeout.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Protocol

from healerd.engine.api import LogStream
from healerd.engine.docker.client import DockerClient

# The most bytes one read takes from the engine's response (and one chunk holds).
CHUNK = 64 * 1024
# A multiplexed frame's header: stream (1 byte), 3 bytes of padding, length (big endian).
_HEADER = struct.Struct(">BxxxL")


class Readable(Protocol):
    def read(self, amt: int) -> bytes: ...


Translate = Callable[[], AbstractContextManager[None]]


def params(tail: int | None, since: float | None, until: float | None) -> dict[str, object]:
    """The query of a logs request: both streams, no follow, no timestamps."""
    query: dict[str, object] = {
        "stdout": 1,
        "stderr": 1,
        "follow": 0,
        "timestamps": 0,
        "tail": "all" if tail is None else str(max(0, int(tail))),
    }
    # Seconds with a fraction, as the engine parses them (and as the SDK sends them).
    if since is not None and since > 0:
        query["since"] = f"{since:.6f}"
    if until is not None and until > 0:
        query["until"] = f"{until:.6f}"
    return query


def open_stream(
    client: DockerClient, container_id: str, query: dict[str, object], translate: Translate
) -> LogStream:
    """GET the log, streamed: whether the container has a TTY decides how its body is
    framed (one inspect first)."""
    with translate():
        config = client.api.inspect_container(container_id).get("Config") or {}
        response = client.get("/containers/{0}/logs", container_id, params=query, stream=True)
    return LogStream(chunks(response.raw, bool(config.get("Tty")), translate), response.close)


def chunks(raw: Readable, tty: bool, translate: Translate) -> Iterator[bytes]:
    """The output's bytes in pieces of at most CHUNK. A TTY container's log is the raw
    byte stream; any other's is multiplexed frames (stdout and stderr interleaved), whose
    headers are dropped. Reads run under `translate`, which turns the transport's errors
    into EngineError; a body cut short ends the stream."""
    if tty:
        while True:
            with translate():
                data = raw.read(CHUNK)
            if not data:
                return
            yield data
    while True:
        with translate():
            header = _exactly(raw, _HEADER.size)
        if len(header) < _HEADER.size:
            return
        _, length = _HEADER.unpack(header)
        while length > 0:
            with translate():
                data = raw.read(min(length, CHUNK))
            if not data:
                return
            length -= len(data)
            yield data


def _exactly(raw: Readable, size: int) -> bytes:
    out = b""
    while len(out) < size:
        data = raw.read(size - len(out))
        if not data:
            break
        out += data
    return out


__all__ = ["CHUNK", "chunks", "open_stream", "params"]
