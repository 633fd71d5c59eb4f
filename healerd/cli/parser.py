"""healerctl's command line: its verbs, their options and help, and the exit codes
`healerctl --help` lists (the verbs' code is in healerctl and the *_verb modules)."""

from __future__ import annotations

import argparse
import os
from typing import Protocol

from healerd import __version__, paths
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
from healerd.cli.export import verbs as export_verbs

EXIT_CODES_HELP = """exit codes:
  0  done (status --check / wait: converged; validate: valid; diff: nothing to do)
  1  the answer is "no": not converged, wait timed out, config invalid, diff has actions,
     reload refused a file (or was not applied in time), a build failed, sync: a fetch
     failed or a commit was refused,
     export --strict: a field the target cannot express, or a value from a ${VAR} in a
     command or healthcheck, bundle: not written or refused (the engine away too)
  2  bad usage
  3  healerd unreachable (no socket, permission denied, not running, no answer)
  4  refused: changes and logs need root or the admin group (default healerd-admin)
  5  healerd answered with another error (unknown service, engine unreachable, ...)
"""


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
    build_verb.add_verbs(verb)
    snapshot_verb.add_verbs(verb)
    images_verb.add_verbs(verb)
    sync_verb.add_verbs(verb)
    notify_verb.add_verbs(verb)
    postmortem.add_verbs(verb)
    export_verbs.add_verbs(verb)
    bundle_verb.add_verbs(verb)
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
        help="exit 0 only if every service is converged (and no config error, engine ok, "
        "no git source failing)",
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
