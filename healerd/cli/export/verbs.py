"""`healerctl export`'s arguments, apart from the export itself: building the parser
must not load the config package (healerd.cli.export.command), which every healerctl call
would pay for."""

from __future__ import annotations

from typing import Any

TARGET_NAMES = ("compose", "kubernetes", "swarm")


def add_verbs(verb: Any) -> None:
    sp = verb(
        "export",
        "write the services as a Swarm stack, Kubernetes manifests or a Compose file "
        "(no daemon; default /etc/healerd/conf.d)",
        output=False,
    )
    sp.epilog = (
        "${VAR}s read the files' .env, and your environment only for the names given with "
        "--environment. Values from them are written back as ${VAR} (compose, swarm: keep "
        "the .env) or read from the service's Secret <service>-env (kubernetes); one in a "
        "command, entrypoint or healthcheck is a warning (an error with --strict). -o FILE "
        "is replaced whole, mode 0600, through a new file (a symbolic link is replaced, "
        "never followed)."
    )
    sp.add_argument("--to", dest="target", required=True, choices=sorted(TARGET_NAMES))
    sp.add_argument("--service", dest="export_services", action="append", default=[],
                    metavar="NAME", help="only this service (repeat for more)")  # fmt: skip
    sp.add_argument("-o", "--file", dest="export_file", metavar="FILE",
                    help="write to FILE instead of stdout")  # fmt: skip
    sp.add_argument("--strict", action="store_true",
                    help="a field the target cannot express is an error (exit 1), and so is "
                    "a value from a ${VAR} in a command or healthcheck")  # fmt: skip
    sp.add_argument("--include-secrets", action="store_true",
                    help="kubernetes: put env_file values and values from ${VAR}s in a "
                    "Secret (needs -o FILE)")  # fmt: skip
    sp.add_argument("--environment", dest="export_environment", action="append", default=[],
                    metavar="NAME", help="let ${NAME} read your environment (repeat for more); "
                    "by default only the files' .env are read")  # fmt: skip
    sp.add_argument("paths", nargs="*", metavar="PATH",
                    help="a service file, a conf.d directory, or a config directory")  # fmt: skip


__all__ = ["TARGET_NAMES", "add_verbs"]
