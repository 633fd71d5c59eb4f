"""healerctl: see and steer healerd over its local socket, like kubectl: the verbs that
read and steer (`Ctl`), the table of verbs and `main`. The command line is
healerd.cli.parser (its exit codes are EXIT_CODES_HELP there, also in
docs/operations.md and `healerctl --help`); what the verbs make of the daemon's answers
is healerd.cli.answers."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from healerd import paths
from healerd.cli import (
    build_verb,
    bundle_verb,
    images_verb,
    notify_verb,
    postmortem,
    snapshot_verb,
    sync_verb,
    update_verb,
)
from healerd.cli.answers import (
    check_problems,
    container_status,
    dump_line,
    event_row,
    wait_problems,
)
from healerd.cli.client import ApiFailure, Client, DaemonUnreachable, service_path
from healerd.cli.output import dump, human_age, one_line, table
from healerd.cli.parser import build_parser
from healerd.cli.terminal import on_terminal
from healerd.cli.views import reload_text, status_text

__all__ = [
    "EXIT_API",
    "EXIT_FORBIDDEN",
    "EXIT_NO",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "Ctl",
    "build_parser",
    "check_problems",
    "container_status",
    "main",
]

EXIT_OK, EXIT_NO, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_FORBIDDEN, EXIT_API = range(6)


DEFAULT_CONF_DIR = paths.CONFIG_DIR
POLL_INTERVAL = 0.25
FOLLOW_WAIT = 25.0


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
        return EXIT_API if data.get("missing") else EXIT_OK  # one name unknown is enough

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
    "rollback": update_verb.rollback,
    "pin": update_verb.pin,
    "unpin": update_verb.unpin,
    "snapshots": snapshot_verb.snapshots,
    "images": images_verb.images,
    "sync": sync_verb.sync,
    "build": build_verb.build,
    "notify": notify_verb.notify,
    "logs": postmortem.logs,
    "describe": postmortem.describe,
    "export": _export,
    "bundle": bundle_verb.bundle,
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
