"""How healerctl prints: kubectl-style tables, ages, sizes, and JSON or YAML documents."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, TextIO

import yaml

from healerd.cli.terminal import cell

GAP = "   "
WORD_SLACK = 16


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns, three spaces apart, like kubectl; the last column is not
    padded. Control characters in a cell are shown (`^[`), never passed on (terminal.py)."""
    cells = [[str(h) for h in headers], *[[cell(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r)]
        lines.append(GAP.join(parts).rstrip())
    return "\n".join(lines)


def human_age(seconds: float | None) -> str:
    """kubectl's compact durations: 45s, 3m12s, 17m, 5h3m, 2d4h, 40d."""
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d"


def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def clock_time(t: float, now: float | None = None) -> str:
    """Local time; the date only when it is not today."""
    now = time.time() if now is None else now
    lt, ln = time.localtime(t), time.localtime(now)
    if lt[:3] == ln[:3]:
        return time.strftime("%H:%M:%S", lt)
    return time.strftime("%Y-%m-%d %H:%M:%S", lt)


def dump(data: Any, fmt: str, out: TextIO) -> None:
    if fmt == "yaml":
        out.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    else:
        out.write(json.dumps(data, indent=2) + "\n")


def one_line(text: str, limit: int = 160) -> str:
    """Whitespace runs as one space, other control characters shown, at most `limit`."""
    text = cell(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def keep_end(text: str, limit: int | None) -> str:
    """One line of at most `limit` characters that keeps both ends: the middle goes (at
    word boundaries where it can), since a reason's last words are often the engine's
    own ("... port is already allocated"). `limit` None: the whole line."""
    text = " ".join(text.split())
    if limit is None or len(text) <= limit:
        return text
    room = limit - 3  # " … "
    head_len = room // 3
    head = text[:head_len]
    tail = text[len(text) - (room - head_len) :]
    # A cut word is dropped, unless that would drop more than a few characters.
    cut = head.rfind(" ")
    if cut >= len(head) - WORD_SLACK:
        head = head[:cut]
    cut = tail.find(" ")
    if 0 <= cut < WORD_SLACK:
        tail = tail[cut + 1 :]
    return f"{head} … {tail}"
