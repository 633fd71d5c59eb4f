"""healerctl: the operator's command line. Only --version so far; the verbs need the local API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from healerd import __version__


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="healerctl", description="Show and steer healerd.")
    p.add_argument("--version", action="version", version=f"healerctl {__version__}")
    p.parse_args(argv)
    p.print_help(sys.stderr)
    print("\nhealerctl: no verbs yet: the local API is not served by this version", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
