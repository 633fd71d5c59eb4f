"""`GET /v1/services/NAME/logs`: a container's output, streamed as the engine sends it.

The body is the output's own bytes (`application/octet-stream`), written to the client
as they come from the engine: nothing holds a whole log, nothing is decoded or escaped.
A 32 MiB log of NUL bytes took healerd to 451 MiB when it was read whole and sent as
JSON (each control byte six), past the unit's MemoryMax (issue 29). What the client
needs besides the bytes comes in headers (`X-Healerd-*`). The output is cut at a byte
cap, and the cut is said at its end, on a line of its own: `[healerd: output cut ...]`.
Without `tail` the last DEFAULT_TAIL lines are sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from healerd.config.masking import mask_free, shown
from healerd.core.postmortem import Dead
from healerd.core.readlanes import Reader
from healerd.daemon.api.describe import EngineAway, known
from healerd.daemon.api.views import ControllerLike, Subs, termination_view
from healerd.engine import EngineError, LogStream

# Lines sent when the request names no tail (as `healerctl logs` without --tail).
DEFAULT_TAIL = 1000
MAX_TAIL = 1_000_000
# The most characters of a death's error text a header carries.
HEADER_TEXT_MAX = 300


@dataclass(frozen=True)
class InspectLimits:
    """What logs and describe may cost: requests at once per uid (root's too), the bytes
    of output one logs answer carries, and how long it may take to send them."""

    per_user: int = 2
    max_log_bytes: int = 8 * 1024 * 1024
    stream_seconds: float = 60.0


@dataclass
class Streamed:
    """A body sent as it is made (no Content-Length: the connection's close ends it);
    `close` runs once it is sent or abandoned."""

    headers: dict[str, str]
    chunks: Iterable[bytes]
    close: Callable[[], None] = field(default=lambda: None)
    content_type: str = "application/octet-stream"


def logs_response(
    c: ControllerLike,
    name: str,
    *,
    previous: bool,
    tail: int | None,
    since: float | None,
    reader: Reader,
    limits: InspectLimits,
) -> Streamed:
    known(c, name)
    # The engine is asked for what was written until now, and told so: a follow's next
    # request starts here, with nothing twice.
    until = time.time()
    try:
        container, stream = c.logs(
            name, previous=previous, tail=tail, since=since, until=until, reader=reader
        )
    except EngineError as exc:
        raise EngineAway(f"cannot read logs: engine unreachable: {exc}") from None
    headers = {"X-Healerd-Service": name, "X-Healerd-Until": f"{until:.6f}"}
    if container is None:
        stream.close()
        headers["X-Healerd-Why"] = "no failed container is kept" if previous else "no container"
        return Streamed(headers, ())
    subs = shown(c.desired.services.get(name))
    try:
        dead = _death(c, name, container.id, reader, subs) if previous else None
    except EngineError:
        dead = None  # the output is what was asked for; how it ended is a bonus
    except BaseException:
        stream.close()
        raise
    headers.update(
        {
            "X-Healerd-Container": _header_safe(container.name),
            "X-Healerd-Container-Id": _header_safe(container.id),
            "X-Healerd-Previous": "1" if previous else "0",
            "X-Healerd-Limit": str(limits.max_log_bytes),
        }
    )
    if dead is not None:
        headers["X-Healerd-Death"] = json.dumps(dead, separators=(",", ":"))
    deadline = time.monotonic() + limits.stream_seconds
    return Streamed(headers, capped(stream, limits.max_log_bytes, deadline), stream.close)


def capped(
    stream: LogStream,
    limit: int,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[bytes]:
    """The stream's bytes, at most `limit` of them and until `deadline`; a cut or an
    engine that stopped answering is said at the end, on a line of its own."""
    sent = 0
    try:
        for chunk in stream:
            room = limit - sent
            if len(chunk) > room:
                if room:
                    yield chunk[:room]
                yield _note(f"output cut at {_size(limit)}: ask for less with --tail or --since")
                return
            sent += len(chunk)
            yield chunk
            if clock() > deadline:
                yield _note(f"output cut after {sent} bytes: it took too long to send")
                return
    except EngineError as exc:
        yield _note(f"output incomplete: {exc}")


def parse_tail(raw: str | None) -> int | None:
    """`tail`: a number of lines, or `all` (None); absent: DEFAULT_TAIL."""
    if raw is None:
        return DEFAULT_TAIL
    if raw == "all":
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_TAIL:
        raise ValueError(f"parameter 'tail': a number of lines from 0 to {MAX_TAIL}, or all")
    return int(raw)


def _note(text: str) -> bytes:
    return f"\n[healerd: {text}]\n".encode()


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"


def _death(
    c: ControllerLike, name: str, cid: str, reader: Reader, subs: Subs
) -> dict[str, Any] | None:
    """How the run shown ended: the run before the container's latest start in place
    (healerd's runs), or, for a container kept as history, its end (one inspect)."""
    term = c.termination(cid)
    if term is not None:
        return termination_view(term)
    newest = c.deaths(name, reader, 1)
    return _death_view(newest[0], subs) if newest and newest[0].container.id == cid else None


def _death_view(d: Dead, subs: Subs) -> dict[str, Any]:
    """How it ended, its error text masked as every view masks a spec's values."""
    return {
        "exit_code": d.death.exit_code,
        "oom_killed": d.death.oom_killed,
        "finished_at": _header_safe(d.death.finished_at),
        "error": mask_free(d.death.error, subs)[:HEADER_TEXT_MAX],
    }


def _header_safe(text: str) -> str:
    """Printable ASCII only: what the engine says must not end a header or add one."""
    return "".join(ch for ch in text[:HEADER_TEXT_MAX] if " " <= ch <= "~")


__all__ = [
    "DEFAULT_TAIL",
    "InspectLimits",
    "Streamed",
    "capped",
    "logs_response",
    "parse_tail",
]
