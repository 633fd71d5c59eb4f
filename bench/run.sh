#!/usr/bin/env bash
# The benchmark suite from a clean checkout, as root on Debian 12:
#   bash bench/run.sh            # all of them (about 15 minutes)
#   bash bench/run.sh heal       # or one of: heal fleet scale reload restart slowpull
#                                # autoupdate notify snapshot updatedowntime rmfloor
#   bash bench/run.sh engines    # heal after kill per engine (docker 20.10, 26.1, podman)
# Installs what is missing (docker.io, busybox-static, Debian's docker-compose for the
# compose reference, the venv), runs everything on a private dockerd that it removes at
# the end, and writes bench/results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/support/engine.sh
bash tests/support/venv.sh
if [[ " $* " == *" engines "* ]]; then
  HEALERD_TEST_ENGINE=podman bash tests/support/engine.sh  # Podman, for the engines suite
fi
if ! command -v docker-compose >/dev/null 2>&1; then
  echo "bench: installing Debian's docker-compose (the compose reference)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
fi
exec .venv/bin/python -m bench.run "$@"
