"""What healerctl makes of the daemon's answers: why `status --check` and `wait` fail,
a container's status word, an event's row, one line of -o json/yaml. Pure, unit-tested."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO

from healerd.cli.output import clock_time, dump, one_line
from healerd.cli.views import service_converged


def describe_service(s: dict[str, Any]) -> str:
    reason = f": {s['reason']}" if s.get("reason") else ""
    return (
        f"{s['name']}: {s['state']}{reason} ({s['running']}/{s['desired']} running, "
        f"{s['up_to_date']} up to date, {s['available']} available)"
    )


def check_problems(data: dict[str, Any]) -> list[str]:
    """Why `status --check` fails: services not converged, config errors, engine lost,
    a git source whose last fetch or check failed (the host no longer follows it)."""
    problems = [describe_service(s) for s in data["services"] if not service_converged(s)]
    problems += [f"no such service: {n}" for n in data.get("missing", [])]
    for e in data.get("config_errors", []):
        problems.append(f"config error: {e['message']}")
    if data.get("engine", {}).get("reachable") is False:
        problems.append("engine unreachable")
    for s in data.get("sources") or []:
        if s.get("last_error"):
            problems.append(f"source {s['name']}: {s['last_error']}")
    return problems


def wait_problems(data: dict[str, Any], names: Sequence[str]) -> list[str]:
    problems = [describe_service(s) for s in data["services"] if not service_converged(s)]
    problems += [f"{n}: not declared" for n in data.get("missing", [])]
    return problems


def container_status(c: dict[str, Any]) -> str:
    state = str(c.get("state") or "?")
    text = state.capitalize()
    if state != "running" and c.get("exit_code") is not None:
        text += f" ({c['exit_code']})"
    return text


def event_row(e: dict[str, Any]) -> tuple[str, str, str, str, str]:
    return (
        clock_time(e["time"]),
        e["kind"],
        e["service"] or "-",
        e.get("container") or "",
        one_line(e["message"], 200),
    )


def dump_line(data: Any, fmt: str, out: TextIO) -> None:
    if fmt == "yaml":
        out.write("---\n")
        dump(data, fmt, out)
    else:
        out.write(json.dumps(data, separators=(",", ":")) + "\n")
