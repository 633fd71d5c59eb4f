"""How healerctl renders the documents of `status`, `describe` and `reload` as text.

Pure functions of the API's JSON (unit-tested without a daemon). Environment values
never reach them: the API sends variable names only, and so do they.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from typing import Any

from healerd.cli.output import clock_time, human_age, human_bytes, keep_end, table

# The status table's REASON column: the head and, above all, the end of a longer
# reason (the engine's last words: "port is already allocated"); `-o wide` shows it all.
REASON_WIDTH = 100


# -- status -----------------------------------------------------------------------------


def service_converged(s: dict[str, Any]) -> bool:
    """The daemon decides (healerd.core.status.is_converged); healerctl only reads it."""
    return s.get("converged") is True


def status_text(data: dict[str, Any], *, wide: bool = False) -> str:
    """The table of services, then config errors, unverified containers, settings not
    reloaded, the engine and host line, and healerd's own."""
    lines: list[str] = []
    services = data["services"]
    if services:
        lines.append(status_table(services, wide=wide))
    elif not data.get("missing"):
        lines.append("No services declared.")
    errors = data.get("config_errors") or []
    if errors:
        lines.append(f"config: {len(errors)} error(s); broken files are skipped:")
        lines += [f"  {e['message']}" for e in errors]
    unverified = data.get("unverified") or []
    if unverified:
        lines.append(
            f"{len(unverified)} container(s) carry healerd's labels without its "
            "signature: not counted, never touched:"
        )
        lines += [
            f"  {u['name']} ({u['id'][:12]}, service {u['service']}): {u['why']}"
            for u in unverified
        ]
    lines += not_reloaded(data)
    lines += notifications_lines(data)
    lines += sources_lines(data)
    lines.append(engine_host_line(data))
    lines += [f"  {r}" for r in (data.get("host") or {}).get("pressure_reasons") or []]
    me = self_line(data)
    if me:
        lines.append(me)
    return "\n".join(lines)


def notifications_lines(data: dict[str, Any]) -> list[str]:
    """`healerctl status`: the targets that failed or wait, one line each."""
    lines = []
    for t in data.get("notifications") or []:
        if not (t.get("pending") or t.get("dropped") or t.get("last_error")):
            continue
        said = f"; last error: {t['last_error']}" if t.get("last_error") else ""
        lines.append(
            f"notifications to {t['name']}: {t.get('sent', 0)} sent, {t.get('failed', 0)} "
            f"failed, {t.get('pending', 0)} waiting, {t.get('dropped', 0)} dropped{said}"
        )
    return lines


def sources_lines(data: dict[str, Any]) -> list[str]:
    """`healerctl status`: each git source, the commit in force, the tip's age, the error."""
    lines = []
    for s in data.get("sources") or []:
        applied, tip = (s.get("applied_commit") or "")[:12], (s.get("commit") or "")[:12]
        age = f"committed {human_age(s.get('commit_age_seconds'))} ago"
        said = f"at {applied}, {age}" if tip == applied else f"applied {applied or '-'}"
        if tip and tip != applied:
            said += f", tip {tip} {age}"
        fetched = s.get("fetched_age_seconds")
        said += f", fetched {human_age(fetched)} ago" if fetched is not None else ", not fetched"
        if s.get("candidate_commit"):
            said += f"; {s['candidate_commit'][:12]} to be loaded"
        if s.get("last_error"):
            said += f"; last error: {s['last_error']}"
        lines.append(f"source {s['name']} ({s['ref']}): {said}")
    return lines


def status_table(services: Sequence[dict[str, Any]], *, wide: bool = False) -> str:
    headers = ["SERVICE", "DESIRED", "READY", "UP-TO-DATE", "AVAILABLE", "RESTARTS", "STATE"]
    rows = [
        [
            s["name"],
            s["desired"],
            s["running"],
            s["up_to_date"],
            s["available"],
            s["restarts"],
            s["state"],
            human_age(s.get("age_seconds")),
            _reason(s, wide),
        ]
        for s in services
    ]
    return table([*headers, "AGE", "REASON"], rows)


def _reason(s: dict[str, Any], wide: bool) -> str:
    """Why the service is not converged; when it is, what the updater last did (an
    update, a hold, a rollback: a day long) and how long ago, or its pin."""
    if not service_converged(s):
        return reason_cell(s.get("reason") or "", wide=wide)
    u = s.get("update") or {}
    note = u.get("note") or ""
    if note and u.get("age_seconds") is not None:
        note = f"{note} ({human_age(u['age_seconds'])} ago)"
    if u.get("pinned") and "healerctl pin" not in note:
        pin = f"pinned to {_short(u['pinned'])}"
        note = f"{pin}; {note}" if note else pin
    return reason_cell(note, wide=wide)


def reason_cell(reason: str, *, wide: bool = False) -> str:
    """One line; past REASON_WIDTH the middle goes, never the end (`wide`: nothing goes)."""
    return keep_end(reason, None if wide else REASON_WIDTH)


def not_reloaded(data: dict[str, Any]) -> list[str]:
    """healerd.yaml or auth.json that a reload refused: the previous ones stay."""
    lines = []
    bad_settings = data.get("settings_errors") or []
    if bad_settings:
        lines.append("healerd.yaml: not reloaded; the settings in force stay:")
        lines += [f"  {msg}" for msg in bad_settings]
    if data.get("credentials_error"):
        lines.append("registry credentials: not reloaded; the previous ones stay:")
        lines.append(f"  {data['credentials_error']}")
    return lines


def engine_host_line(data: dict[str, Any]) -> str:
    eng = data.get("engine") or {}
    reachable = {True: "reachable", False: "UNREACHABLE", None: "not checked yet"}.get(
        eng.get("reachable"), "?"
    )
    # "docker 20.10.24" or "podman 4.3.1"; "version ..." from a daemon older than the kind.
    kind = eng.get("kind") or "version"
    version = f", {kind} {eng['version']}" if eng.get("version") else ""
    if eng.get("api_version"):
        version += f" (API {eng['api_version']})"
    host = data.get("host") or {}
    parts = []
    mem = host.get("memory")
    if mem:
        used = mem["total_bytes"] - mem["available_bytes"]
        parts.append(
            f"memory {human_bytes(used)}/{human_bytes(mem['total_bytes'])} "
            f"({mem['used_percent']:.0f}%)"
        )
    disk = host.get("disk")
    if disk:
        parts.append(
            f"disk {disk['path']} {disk['used_percent']:.0f}% used "
            f"({human_bytes(disk['free_bytes'])} free)"
        )
    inodes = host.get("inodes")
    if inodes and inodes.get("total"):
        parts.append(f"inodes {100 * inodes['free'] / inodes['total']:.0f}% free")
    if host.get("load"):
        parts.append("load " + " ".join(f"{x:.2f}" for x in host["load"]))
    flags = host.get("pressure")
    if isinstance(flags, dict):
        on = [name.upper() for name, v in flags.items() if v]
        parts.append(f"pressure: {', '.join(on) if on else 'none'}")
    return f"engine: {reachable}{version}; host: {', '.join(parts) or 'unknown'}"


def self_line(data: dict[str, Any]) -> str | None:
    """healerd's own footprint and engine call budget; None from an older daemon."""
    me = data.get("healerd")
    if not me:
        return None
    cpu = f", cpu {me['cpu_percent']:.1f}%" if me.get("cpu_percent") is not None else ""
    fds = f", {me['open_fds']} fds" if me.get("open_fds") is not None else ""
    return (
        f"healerd: rss {human_bytes(me.get('rss_bytes'))}{cpu}{fds}; engine calls "
        f"{me['engine_calls']} (cap {me['engine_calls_per_second_limit']:g}/s, burst "
        f"{me['engine_call_burst']}; {me['engine_calls_throttled']} waited)"
    )


# -- reload -----------------------------------------------------------------------------


def reload_refusals(data: dict[str, Any]) -> list[str]:
    """What the reload refused: broken service files, healerd.yaml, auth.json (each keeps
    its last good state)."""
    refused = [f"config error: {e['message']}" for e in data.get("config_errors") or []]
    refused += [f"healerd.yaml not reloaded: {m}" for m in data.get("settings_errors") or []]
    if data.get("credentials_error"):
        refused.append(f"registry credentials not reloaded: {data['credentials_error']}")
    return refused


def reload_text(data: dict[str, Any]) -> tuple[str, list[str]]:
    """(what goes to stdout, the refusals for stderr). "reloaded" only when it was, and
    every file was taken."""
    declared = f"{len(data.get('services') or [])} service(s) declared"
    refused = reload_refusals(data)
    if not data.get("applied"):
        return "reload requested, not applied within the wait: see `healerctl status`", refused
    if refused:
        return (
            f"reload refused: {len(refused)} error(s); those files keep their last good "
            f"state ({declared}):",
            refused,
        )
    return f"configuration reloaded: {declared}", []


# -- describe ---------------------------------------------------------------------------

LABEL = 14  # "Update order: " and the other labels, padded to one width


def describe_text(name: str, data: dict[str, Any], now: float | None = None) -> str:
    """Like `kubectl describe`: the spec summary, then containers, last failures, events."""
    now = time.time() if now is None else now
    st, spec = data.get("service") or {}, data.get("spec") or {}
    pairs: list[tuple[str, str]] = [("Name", name)]
    replicas = f"{st.get('running', 0)} running, {st.get('available', 0)} available"
    if spec:
        pairs += [
            ("Image", spec["image"]),
            ("Replicas", f"{spec['replicas']} declared, {replicas}"),
        ]
    else:
        pairs.append(("Replicas", replicas))
    reason = f": {st['reason']}" if st.get("reason") else ""
    pairs.append(("State", f"{st.get('state', '-')}{reason}"))
    if spec:
        pairs += spec_pairs(spec)
    out = [f"{(label + ':').ljust(LABEL)}{value}" for label, value in pairs]
    out += ["", "Containers:", _or_none(container_table(data["containers"]))]
    out += ["", "Last failures (kept for `healerctl logs --previous`):"]
    out.append(_or_none(failure_table(data["history"])))
    out += _digest_history(data.get("updates") or {}, now)
    events = [[clock_time(e["time"], now), e["kind"], e["message"]] for e in data["events"]]
    out += ["", "Events:", _or_none(table(["TIME", "KIND", "MESSAGE"], events) if events else "")]
    return "\n".join(out) + "\n"


def _short(digest: object) -> str:
    return str(digest).removeprefix("sha256:")[:12]


def _digest_history(u: dict[str, Any], now: float) -> list[str]:
    """describe's digest history: updates, rollbacks, pins, oldest first."""
    if not u:
        return []
    rows = [
        [
            clock_time(h["at"], now),
            h["what"],
            str(h["digest"]).removeprefix("sha256:")[:12],
            h["text"],
        ]
        for h in u.get("history") or []
    ]
    pinned = f" (pinned to {u['pinned']})" if u.get("pinned") else ""
    body = table(["TIME", "WHAT", "DIGEST", "MESSAGE"], rows) if rows else ""
    return ["", f"Digest history{pinned}:", _or_none(body)]


def spec_pairs(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """The declared spec, label by label; environment by name only."""
    pairs = [("Command", _argv(spec.get("command")))]
    if spec.get("entrypoint") is not None:
        pairs.append(("Entrypoint", _argv(spec["entrypoint"])))
    env = spec.get("environment") or []
    pairs.append(("Environment", ", ".join(env) + " (names only)" if env else "none"))
    if spec.get("env_files"):
        pairs.append(("Env files", ", ".join(spec["env_files"])))
    pairs.append(("Volumes", ", ".join(spec.get("volumes") or []) or "none"))
    pairs.append(("Ports", ", ".join(spec.get("ports") or []) or "none"))
    pairs.append(("Healthcheck", healthcheck_text(spec)))
    rp = spec.get("restart_policy")
    if rp:
        pairs.append(
            (
                "Restart",
                f"backoff {_secs(rp['delay'])} doubling to {_secs(rp['max_delay'])}, "
                f"reset after {_secs(rp['window'])} running",
            )
        )
    pairs.append(("Update order", f"{spec['update_order']}; revision {spec['revision']}"))
    pairs.append(("File", str(spec.get("source_file") or "-")))
    return pairs


def healthcheck_text(spec: dict[str, Any]) -> str:
    opts = spec.get("healthcheck_options") or {}
    if opts.get("disable"):
        return "disabled"
    test = spec.get("healthcheck")
    if not test:
        return "(image default)"
    kind, args = (test[0], test[1:]) if test[0] in ("CMD", "CMD-SHELL", "NONE") else ("", test)
    what = " ".join(args) if kind == "CMD-SHELL" else _argv(args)
    timing = [
        f"{label} {_secs(opts[key])}"
        for key, label in (("interval", "every"), ("timeout", "timeout"))
        if opts.get(key) is not None
    ]
    if opts.get("retries") is not None:
        timing.append(f"{opts['retries']} retries")
    if opts.get("start_period") is not None:
        timing.append(f"start period {_secs(opts['start_period'])}")
    return what + (f" ({', '.join(timing)})" if timing else "")


def container_table(containers: Sequence[dict[str, Any]]) -> str:
    rows = [
        [
            c["name"],
            c["state"],
            c.get("health") or "-",
            c["restarts"],
            human_age(c.get("age_seconds")),
            last_termination(c.get("last_termination")),
        ]
        for c in containers
    ]
    head = ["NAME", "STATE", "HEALTH", "RESTARTS", "AGE", "LAST TERMINATION"]
    return table(head, rows) if rows else ""


def last_termination(t: dict[str, Any] | None) -> str:
    """How the run before its latest start in place ended: healerd's words (exit code,
    OOM, signal, who stopped it) and when."""
    if not t:
        return "-"
    when = str(t.get("finished_at") or "")[:19].replace("T", " ")
    return f"{t.get('why') or 'exit code ' + str(t.get('exit_code'))}, {when} UTC"


def failure_table(history: Sequence[dict[str, Any]]) -> str:
    rows = [
        [
            h["name"],
            h.get("exit_code"),
            "yes" if h.get("oom_killed") else "no",
            h.get("finished_at") or "-",
        ]
        for h in history
    ]
    return table(["NAME", "EXIT CODE", "OOM-KILLED", "DIED"], rows) if rows else ""


def _or_none(text: str) -> str:
    return text or "  none"


def _argv(argv: Sequence[str] | None) -> str:
    return "(image default)" if argv is None else shlex.join(argv)


def _secs(seconds: float) -> str:
    return f"{seconds:g}s" if seconds < 120 else human_age(seconds)


__all__ = [
    "describe_text",
    "engine_host_line",
    "reload_text",
    "self_line",
    "service_converged",
    "status_text",
]
