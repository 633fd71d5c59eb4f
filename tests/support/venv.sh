#!/usr/bin/env bash
# Create ./.venv with healerd (editable) and the test tools. Debian's own python3 (12 and 13)
# refuses system-wide pip installs (PEP 668), so everything lives in the venv.
set -euo pipefail
cd "$(dirname "$0")/../.."

# A minimal Debian (debootstrap minbase, a cloud image) may have no python3 at all.
if ! command -v python3 >/dev/null 2>&1; then
  echo "venv.sh: installing python3" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "venv.sh: healerd needs Python 3.11 or newer" >&2
  exit 1
fi
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  echo "venv.sh: installing python3-venv" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
# Reinstall only when the project's declared dependencies changed.
stamp=.venv/.healerd-deps
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "venv.sh: installing healerd and its test tools into .venv" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
  echo "$want" > "$stamp"
fi
