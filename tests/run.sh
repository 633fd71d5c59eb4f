#!/usr/bin/env bash
# The test suite, on a fresh Debian 12 or 13 machine as root: installs what is missing
# (docker.io, busybox-static, a venv with the Python deps), then runs pytest.
# Unit tests need no engine; integration tests start a private dockerd of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/support/engine.sh
bash tests/support/venv.sh
# pytest exits 5 when it collected no test: with `set -e` that fails the run too.
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
