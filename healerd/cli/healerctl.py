"""healerctl: see and steer healerd over its local socket, like kubectl. Its exit codes
are EXIT_CODES_HELP below (also in docs/operations.md and `healerctl --help`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO

from healerd import __version__, paths
from healerd.cli import inspect_verbs, update_verb
from healerd.cli.client import ApiFailure, Client, DaemonUnreachable, service_path
from healerd.cli.export import verbs as export_verbs
from healerd.cli.output import clock_time, dump, human_age, one_line, table
from healerd.cli.terminal import on_terminal
from healerd.cli.views import reload_text, service_converged, status_text

EXIT_OK, EXIT_NO, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_FORBIDDEN, EXIT_API = range(6)

EXIT_CODES_HELP = """exit codes:
  0  done (status --check / wait: converged; validate: valid; diff: nothing to do)
  1  the answer is "no": not converged, wait timed out, config invalid, diff has actions,
     reload refused a file (or was not applied in time),
     export --strict: a field the target cannot express, or a value from a ${VAR} in a
     command or healthcheck
  2  bad usage
  3  healerd unreachable (no socket, permission denied, not running, no answer)
  4  refused: changes and logs need root or the admin group (default healerd-admin)
  5  healerd answered with another error (unknown service, engine unreachable, ...)
"""

DEFAULT_CONF_DIR = paths.CONFIG_DIR
POLL_INTERVAL = 0.25
FOLLOW_WAIT = 25.0


def default_socket() -> str:
    return os.environ.get("HEALERD_SOCKET") or str(paths.SOCKET)


def duration(text: str) -> float:
    # The config package is loaded only by the verbs that read config (validate, export):
    # a tenth of a second of every other healerctl call.
    from healerd.config import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Ctl:
    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.args = args
        self.out = out
        self.err = err
        self.client = Client(args.socket, timeout=args.request_timeout)

    @property
    def fmt(self) -> str:
        return str(getattr(self.args, "output", "table"))

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def warn(self, text: str) -> None:
        self.err.write(text + "\n")

    # -- status -----------------------------------------------------------------------

    def status(self) -> int:
        data = self.client.get("/v1/status", service=self.args.services or None)
        services = data["services"]
        if self.fmt in ("table", "wide"):
            self.say(status_text(data, wide=self.fmt == "wide"))
        else:
            dump(data, self.fmt, self.out)
        for name in data.get("missing", []):
            self.warn(f"healerctl: no such service: {name}")
        if self.args.check:
            problems = check_problems(data)
            for p in problems:
                self.warn(f"not converged: {p}")
            return EXIT_NO if problems else EXIT_OK
        if data.get("missing") and not services:
            return EXIT_API
        return EXIT_OK

    # -- get ---------------------------------------------------------------------------

    def get(self) -> int:
        data = self.client.get("/v1/containers", service=self.args.service)
        if self.fmt != "table":
            dump(data, self.fmt, self.out)
            return EXIT_OK
        containers = data["containers"]
        if not containers:
            self.say("No containers found.")
            return EXIT_OK
        rows = [
            [
                c["name"],
                c["service"],
                container_status(c),
                c.get("health") or "-",
                c["restarts"],
                human_age(c.get("age_seconds")),
                c["image"],
            ]
            for c in containers
        ]
        self.say(table(["NAME", "SERVICE", "STATUS", "HEALTH", "RESTARTS", "AGE", "IMAGE"], rows))
        return EXIT_OK

    # -- events ------------------------------------------------------------------------

    def events(self) -> int:
        params: dict[str, Any] = {"service": self.args.service}
        if self.args.since is not None:
            params["since_time"] = f"{time.time() - self.args.since:.3f}"
        data = self.client.get("/v1/events", **params)
        events = data["events"]
        follow = self.args.follow
        if self.fmt != "table" and not follow:
            dump(data, self.fmt, self.out)
            return EXIT_OK
        if self.fmt == "table" and not follow:
            if not events:
                self.say("No events.")
                return EXIT_OK
            rows = [event_row(e) for e in events]
            self.say(table(["TIME", "KIND", "SERVICE", "CONTAINER", "MESSAGE"], rows))
            return EXIT_OK
        # --follow: one line per event as it comes (JSON: one object per line).
        for e in events:
            self._follow_line(e)
        seq = data["last_seq"]
        try:
            while True:
                data = self.client.request(
                    "GET",
                    "/v1/events",
                    {"after": seq, "wait": FOLLOW_WAIT, "service": self.args.service},
                    timeout=FOLLOW_WAIT + 10,
                )
                for e in data["events"]:
                    self._follow_line(e)
                seq = max(seq, data["last_seq"])
        except KeyboardInterrupt:
            return EXIT_OK

    def _follow_line(self, e: dict[str, Any]) -> None:
        if self.fmt == "table":
            t, kind, svc, ctr, msg = event_row(e)
            self.say(f"{t:<8}   {kind:<14}   {svc:<20}   {ctr or '-':<24}   {msg}")
        else:
            dump_line(e, self.fmt, self.out)
        self.out.flush()

    # -- diff --------------------------------------------------------------------------

    def diff(self) -> int:
        data = self.client.get("/v1/diff", service=self.args.service)
        actions = data["actions"]
        if self.fmt != "table":
            dump(data, self.fmt, self.out)
        elif not actions:
            self.say("No changes: what runs is what is declared.")
        else:
            rows = [
                [a["kind"], a["service"], a.get("container") or "(new)", one_line(a["reason"])]
                for a in actions
            ]
            self.say(table(["ACTION", "SERVICE", "CONTAINER", "REASON"], rows))
        return EXIT_NO if actions else EXIT_OK

    # -- validate (no daemon) ---------------------------------------------------------------

    def validate(self) -> int:
        paths = [Path(p) for p in self.args.paths] or [DEFAULT_CONF_DIR]
        from healerd.cli.validate import validate

        report = validate(paths)
        if self.fmt != "table":
            dump(report.as_dict(), self.fmt, self.out)
        else:
            for e in report.errors:
                self.say(str(e))
        if report.ok:
            if self.fmt == "table":
                self.say(f"ok: {len(report.services)} service(s) in {len(report.files)} file(s)")
            return EXIT_OK
        self.warn(f"{len(report.errors)} error(s) in {len(report.files)} file(s) checked")
        return EXIT_NO

    # -- changes ---------------------------------------------------------------------------

    def reconcile(self) -> int:
        if self.args.service:
            data = self.client.post(service_path(self.args.service, "reconcile"))
        else:
            data = self.client.post("/v1/reconcile")
        return self._done(data)

    def pause(self) -> int:
        return self._done(self.client.post(service_path(self.args.service, "pause")))

    def prune(self) -> int:
        dry = "?dry_run=1" if self.args.dry_run else ""
        return self._done(self.client.post(f"/v1/prune/{self.args.what}{dry}"))

    def resume(self) -> int:
        return self._done(self.client.post(service_path(self.args.service, "resume")))

    def reload(self) -> int:
        """Says "reloaded" only when every file was taken; else what the reload refused
        (or that it was not applied in time) goes to stderr, with exit code 1."""
        data = self.client.post("/v1/reload")
        said, refused = reload_text(data)
        done = bool(data.get("applied")) and not refused
        if self.fmt != "table":
            dump(data, self.fmt, self.out)
        elif done:
            self.say(said)
        else:
            self.warn(f"healerctl: {said}")
            for line in refused:
                self.warn(f"  {line}")
        return EXIT_OK if done else EXIT_NO

    def _done(self, data: dict[str, Any]) -> int:
        if self.fmt != "table":
            dump(data, self.fmt, self.out)
        else:
            self.say(str(data.get("message", "ok")))
        return EXIT_OK

    # -- wait --------------------------------------------------------------------------------

    def wait(self) -> int:
        deadline = time.monotonic() + self.args.wait_timeout
        names = list(self.args.services)
        while True:
            data = self.client.get("/v1/status", service=names or None)
            pending = wait_problems(data, names)
            if not pending:
                if self.fmt == "table":
                    done = [s["name"] for s in data["services"]]
                    self.say(f"converged: {', '.join(done) or 'no services declared'}")
                else:
                    dump({"converged": True, "services": data["services"]}, self.fmt, self.out)
                return EXIT_OK
            left = deadline - time.monotonic()
            if left <= 0:
                timeout = human_age(self.args.wait_timeout)
                if self.fmt == "table":
                    self.warn(f"healerctl: timed out after {timeout} waiting for convergence:")
                    for p in pending:
                        self.warn(f"  {p}")
                else:
                    dump(
                        {"converged": False, "pending": pending, "services": data["services"]},
                        self.fmt,
                        self.out,
                    )
                return EXIT_NO
            time.sleep(min(POLL_INTERVAL, left))


# -- pure helpers (unit-tested) ------------------------------------------------------------


def describe_service(s: dict[str, Any]) -> str:
    reason = f": {s['reason']}" if s.get("reason") else ""
    return (
        f"{s['name']}: {s['state']}{reason} ({s['running']}/{s['desired']} running, "
        f"{s['up_to_date']} up to date, {s['available']} available)"
    )


def check_problems(data: dict[str, Any]) -> list[str]:
    """Why `status --check` fails: services not converged, config errors, engine lost."""
    problems = [describe_service(s) for s in data["services"] if not service_converged(s)]
    problems += [f"no such service: {n}" for n in data.get("missing", [])]
    for e in data.get("config_errors", []):
        problems.append(f"config error: {e['message']}")
    if data.get("engine", {}).get("reachable") is False:
        problems.append("engine unreachable")
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


# -- the command line -------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="healerctl",
        description="See and steer healerd, the node's self-healing container daemon.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"healerctl {__version__}")
    p.add_argument(
        "--socket",
        default=default_socket(),
        help="healerd's socket (default $HEALERD_SOCKET, else /run/healerd/healerd.sock)",
    )
    p.add_argument(
        "--request-timeout",
        type=duration,
        default=40.0,
        help="how long to wait for one answer from healerd (default 40s)",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(
        name: str, help: str, output: bool = True, wide: bool = False
    ) -> argparse.ArgumentParser:
        sp = verbs.add_parser(name, help=help, description=help)
        if output:
            sp.add_argument(
                "-o",
                "--output",
                choices=["table", *(["wide"] if wide else []), "json", "yaml"],
                default="table",
                help="output format (default table"
                + ("; wide: the table with whole reasons)" if wide else ")"),
            )
        return sp

    # Verbs are listed in `healerctl --help` in the order they are added.
    _add_looking_verbs(verb)
    _add_steering_verbs(verb)
    update_verb.add_verbs(verb)
    inspect_verbs.add_verbs(verb)
    export_verbs.add_verbs(verb)
    return p


class AddVerb(Protocol):
    def __call__(
        self, name: str, help: str, output: bool = True, wide: bool = False
    ) -> argparse.ArgumentParser: ...


def _add_looking_verbs(verb: AddVerb) -> None:
    """Verbs that only read: status, get, events, diff, validate."""
    sp = verb(
        "status",
        "services at a glance: replicas, state, reason (a long one loses its middle, "
        "never its end; -o wide: whole); engine and host",
        wide=True,
    )
    sp.add_argument("services", nargs="*", metavar="SERVICE")
    sp.add_argument(
        "--check",
        action="store_true",
        help="exit 0 only if every service is converged (and no config error, engine ok)",
    )
    sp = verb("get", "one row per container healerd manages")
    sp.add_argument("service", nargs="?", metavar="SERVICE")
    sp = verb("events", "what healerd did and why, newest last")
    sp.add_argument("-f", "--follow", action="store_true", help="keep printing new events")
    sp.add_argument(
        "--since", type=duration, help="only events of the last DURATION (e.g. 10m, 1h)"
    )
    sp.add_argument("--service", help="only events of this service")
    sp = verb("diff", "what healerd would do right now, without doing it (exit 1 if anything)")
    sp.add_argument("service", nargs="?", metavar="SERVICE")
    sp = verb("validate", "check config files without a daemon (default /etc/healerd/conf.d)")
    sp.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="a service file, a conf.d directory, or a config directory",
    )


def _add_steering_verbs(verb: AddVerb) -> None:
    """Verbs that change or wait on the daemon: reconcile, pause, resume, reload, wait."""
    sp = verb("reconcile", "look at a service (or every service) again now")
    sp.add_argument("service", nargs="?", metavar="SERVICE")
    sp = verb("pause", "leave a service alone until resumed (shown as Paused)")
    sp.add_argument("service", metavar="SERVICE")
    sp = verb("resume", "heal a paused service again")
    sp.add_argument("service", metavar="SERVICE")
    verb(
        "reload",
        "re-read the config files now (like SIGHUP); exit 1 if it refused a file "
        "(errors in it; healerd.yaml, auth.json included) or was not applied within 5s",
    )
    sp = verb(
        "prune",
        "remove the named volumes healerd made that no declared service names and no "
        "container uses (healerd never removes them by itself, like docker compose down)",
    )
    sp.add_argument("what", choices=["volumes"])
    sp.add_argument("--dry-run", action="store_true", help="only list what would go")
    sp = verb("wait", "block until services are converged (like kubectl rollout status)")
    sp.add_argument("services", nargs="*", metavar="SERVICE")
    sp.add_argument(
        "--timeout",
        dest="wait_timeout",
        type=duration,
        default=300.0,
        help="give up after DURATION, exit 1 with the reason (default 5m)",
    )


def _export(ctl: Ctl) -> int:
    from healerd.cli.export import command

    return command.export(ctl)


VERBS: dict[str, Callable[[Ctl], int]] = {
    "status": Ctl.status,
    "get": Ctl.get,
    "events": Ctl.events,
    "diff": Ctl.diff,
    "validate": Ctl.validate,
    "reconcile": Ctl.reconcile,
    "pause": Ctl.pause,
    "resume": Ctl.resume,
    "reload": Ctl.reload,
    "prune": Ctl.prune,
    "wait": Ctl.wait,
    "update": update_verb.update,
    "logs": inspect_verbs.logs,
    "describe": inspect_verbs.describe,
    "export": _export,
}


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    ctl = Ctl(args, on_terminal(out), on_terminal(err))
    try:
        return VERBS[args.verb](ctl)
    except DaemonUnreachable as exc:
        err.write(f"healerctl: {exc}\n")
        return EXIT_UNREACHABLE
    except ApiFailure as exc:
        if exc.status == 403:
            err.write(f"healerctl: refused: {exc.message}\n")
            return EXIT_FORBIDDEN
        err.write(f"healerctl: {exc.message} (HTTP {exc.status})\n")
        return EXIT_API
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `healerctl events | head`: the reader left; that is not an error.
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
