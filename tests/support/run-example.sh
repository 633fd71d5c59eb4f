#!/usr/bin/env bash
# Run healerd in the foreground on the example config in config/ (Ctrl-C stops it and
# leaves the containers running). Installs the engine and builds the example image
# locally first: there is no registry to pull from.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tests/support/engine.sh
bash tests/support/venv.sh
.venv/bin/python tests/support/busybox_image.py healerd-example/busybox:1 >/dev/null
# healerd refuses config in a directory that others can write (a checkout under /tmp,
# say): it runs on a copy in a root-only directory.
example=/var/lib/healerd-example
install -d -m 0755 /var/lib
rm -rf "$example" && install -d -m 0700 "$example"
cp -r config/. "$example/"
chmod -R go-w "$example"
exec .venv/bin/healerd --config-dir "$example" "$@"
