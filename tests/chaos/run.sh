#!/usr/bin/env bash
# Chaos soak (issue 8): a real healerd on a private dockerd, disrupted in random bursts
# for --duration seconds (default 300), invariants checked after every burst and in the
# background. Prints the seed (replay with --seed), a summary table, exits 1 on any
# violation. See tests/chaos/README.md.
#
#   bash tests/chaos/run.sh [--duration SECONDS] [--seed N] [--json PATH] [--keep-logs]
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tests/support/engine.sh
bash tests/support/venv.sh
# The private engine is the only one the soak (and its healerd) may touch.
unset DOCKER_HOST
exec env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" .venv/bin/python -m tests.chaos.soak "$@"
