#!/usr/bin/env bash
# Make sure Debian's docker.io, busybox-static, docker-registry, apache2-utils
# (htpasswd, for the registry's basic auth), debootstrap and prometheus (promtool) are
# installed and that a Docker engine answers on the default socket (started in the
# background if not).
# Used by .ci/run, the README's example command and the benchmarks.
set -euo pipefail

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# The differential oracle for Compose semantics (tests/integration/test_compose_diff.py).
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
# A real registry for the pull tests (tests/support/registry.py), with htpasswd -B.
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
# Images of real software from Debian's packages (tests/support/debian_image.py).
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
# A real MQTT broker for the notification tests (tests/integration/test_notifications.py).
command -v mosquitto >/dev/null 2>&1 || need+=(mosquitto)
# Git sources (tests/integration/test_git_sources.py, test_git_apply.py): git and its
# daemon, ssh-keygen for the signing keys, gpg for the OpenPGP case.
command -v git >/dev/null 2>&1 || need+=(git)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v gpg >/dev/null 2>&1 || need+=(gpg)
# Podman 4.3 (and netavark, aardvark-dns, conmon) for HEALERD_TEST_ENGINE=podman only:
# about 16 packages (tests/support/podman.py).
if [ "${HEALERD_TEST_ENGINE:-docker}" = podman ]; then
  command -v podman >/dev/null 2>&1 || need+=(podman)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "engine.sh: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # docker-registry's package enables a service of its own (port 5000) where systemd
  # runs; the tests never use it: they start their own registries on free ports.
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

# promtool, for tests/unit/test_prometheus_rules.py (packaging/prometheus): Debian's
# prometheus package, without its recommends (node exporter). Its postinst starts the
# server where an init system runs: a policy-rc.d of our own (when there is none) keeps
# it from starting during the install, and goes with it.
if ! command -v promtool >/dev/null 2>&1; then
  echo "engine.sh: installing prometheus (promtool)" >&2
  export DEBIAN_FRONTEND=noninteractive
  [ ${#need[@]} -gt 0 ] || apt-get update -qq
  policy=/usr/sbin/policy-rc.d
  if [ -e "$policy" ]; then
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    status=0
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null || status=$?
    rm -f "$policy"
    [ "$status" -eq 0 ] || exit "$status"
  fi
fi

ping_engine() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
if ! ping_engine; then
  # HEALERD_DOCKERD_ARGS: more flags for it, where another engine shares the network
  # namespace (a bridge of its own and --iptables=false, as
  # packaging/test-readme-commands.sh gives it).
  read -r -a extra <<< "${HEALERD_DOCKERD_ARGS:-}"
  echo "engine.sh: starting dockerd ${extra[*]} (log: /var/log/dockerd.log)" >&2
  setsid dockerd "${extra[@]}" >/var/log/dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    ping_engine && break
    sleep 0.5
  done
  ping_engine || { tail -20 /var/log/dockerd.log >&2; echo "engine.sh: dockerd did not answer" >&2; exit 1; }
fi
echo "engine.sh: engine $(docker version --format '{{.Server.Version}}') answers" >&2
