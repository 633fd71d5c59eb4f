#!/usr/bin/env bash
# The README's two commands on a fresh Debian machine, as root (issue 31, item 4): a
# debootstrap'd root of the release (minbase: not even python3) with this checkout copied
# into it, made the `/` of a mount namespace of its own (pivot_root, as
# tests/support/chrootdockerd.py does) in which everything below runs.
#
#   bash packaging/test-readme-commands.sh [trixie|bookworm] [-- PYTEST-ARGS...]
#       (as root; default trixie; about 5.5 min with the root cached, 1 more without)
#
# (1) `bash tests/support/run-example.sh`: installs docker.io and the test tools with apt,
#     starts dockerd, makes the .venv, runs healerd on config/; checked: the example's 2
#     replicas run, `healerctl wait` answers, a `docker kill`ed one runs again, Ctrl-C
#     (SIGINT) ends healerd.
# (2) `bash tests/run.sh PYTEST-ARGS` (default: tests/unit, then
#     tests/integration/test_heal.py): the suite on the release's python3.
#
# Not a bare chroot: under one, dockerd's `docker exec` and health checks ran in this
# machine's root directory, not the container's (setns into a container's mount
# namespace lands at that namespace's root: ../shared/notes/machine-facts.md). A
# holder process (`sleep infinity`) keeps the namespace: private (nothing mounted in it
# reaches this machine, and its mounts go with its last process), with proc, this
# machine's /sys and /dev, a tmpfs /run and /tmp; each command enters it with nsenter.
# The root shares this machine's network namespace with its dockerd, so engine.sh's
# dockerd gets a bridge of its own and no iptables (HEALERD_DOCKERD_ARGS), as
# ../shared/notes/machine-facts.md says; the integration tests' private dockerds do that
# already. apt in the root starts no service (policy-rc.d), as in any chroot.
# The debootstrap'd root is cached as a tarball under /var/cache/healerd-test (key:
# release and variant); each run unpacks a fresh copy. Everything it starts is stopped and
# unmounted at exit, pass or fail.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
unset DOCKER_HOST

release=trixie
pytest_args=()
while [ $# -gt 0 ]; do
  case $1 in
    bookworm|trixie) release=$1; shift ;;
    --release) release=${2:?}; shift 2 ;;
    --) shift; pytest_args=("$@"); break ;;
    *) echo "usage: $0 [trixie|bookworm] [-- PYTEST-ARGS...]" >&2; exit 2 ;;
  esac
done

cache=/var/cache/healerd-test
tag=$(printf '%s' "$release minbase" | sha256sum | cut -c1-12)
tarball=$cache/$release-fresh-$tag.tar
run=/var/lib/healerd-readme/run-$$
root=$run/root
# The logs outlive the run (the root does not).
logs=/var/log/healerd-readme/run-$$
bridge=hrd$$
subnet=10.232.125
t0=$(date +%s)
example_pid=
holder=
mntns=

step() { printf '\n== [%4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*"; }
ok() { printf '   ok: %s\n' "$*"; }
fail() { printf '   FAIL: %s (logs in %s)\n' "$*" "$logs" >&2; exit 1; }
# A command in the root (the namespace's `/`), from the copied checkout, with a clean environment
# and SIGINT and SIGQUIT not ignored (run in the background, `... &`, this script ignores
# them, and so would a `healerctl logs -f` a test interrupts); the machine's CA bundle goes with it where it has one (an egress proxy's CA, say).
in_root() {
  local env=(HOME=/root LANG=C.UTF-8 TERM=dumb
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    "HEALERD_DOCKERD_ARGS=--bridge=$bridge --iptables=false --ip6tables=false --ip-masq=false")
  if [ -s "$root/etc/healerd-check-ca.crt" ]; then
    env+=(PIP_CERT=/etc/healerd-check-ca.crt SSL_CERT_FILE=/etc/healerd-check-ca.crt
      REQUESTS_CA_BUNDLE=/etc/healerd-check-ca.crt)
  fi
  nsenter -t "$holder" -m /usr/bin/env -i --default-signal=INT,QUIT "${env[@]}" bash -c 'cd /root/healerd && exec "$@"' bash "$@"
}
wait_until() { # SECONDS WHAT COMMAND...
  local limit=$1 what=$2; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${limit}s: $what"
    if [ -n "$example_pid" ] && ! kill -0 "$example_pid" 2>/dev/null; then
      tail -30 "$logs/example.log" >&2; fail "run-example.sh ended while waiting: $what"
    fi
    sleep 1
  done
}
victim_running() { [ "$(in_root docker inspect -f '{{.State.Running}}' "$1")" = true ]; }
running_hello() {
  [ "$(in_root docker ps -q --filter label=io.healerd.service=hello --filter status=running | wc -l)" -eq "${1:-2}" ]
}

# Processes in this run's mount namespace and their descendants (the containers, in
# mount namespaces of their own under the shims): only ours.
ours() {
  [ -n "$mntns" ] || return 0
  local p n
  declare -A seen=()
  for p in /proc/[0-9]*; do
    n=$(readlink "$p/ns/mnt" 2>/dev/null) || continue
    [ "$n" = "$mntns" ] && seen[${p#/proc/}]=1
  done
  local grew=1 pid ppid
  while [ $grew = 1 ]; do
    grew=0
    while read -r pid ppid; do
      if [ -z "${seen[$pid]:-}" ] && [ -n "${seen[$ppid]:-}" ]; then seen[$pid]=1; grew=1; fi
    done < <(ps -e -o pid=,ppid=)
  done
  [ ${#seen[@]} -eq 0 ] || printf '%s\n' "${!seen[@]}"
}
cleanup() {
  set +e
  cp "$root/var/log/dockerd.log" "$logs/chroot-dockerd.log" 2>/dev/null
  [ -n "$example_pid" ] && kill -INT "$example_pid" 2>/dev/null
  if [ -n "$holder" ] && [ -d "$root/root/healerd" ] && in_root test -S /run/docker.sock; then
    ids=$(in_root docker ps -aq 2>/dev/null)
    [ -n "$ids" ] && in_root docker rm -f $ids >/dev/null 2>&1
    pid=$(in_root cat /run/docker.pid 2>/dev/null)
    if [ -n "$pid" ]; then
      kill "$pid" 2>/dev/null
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
  fi
  # The holder last: with the namespace's last process go its mounts.
  pids=$(ours | grep -vx "$holder"); [ -n "$pids" ] && kill $pids 2>/dev/null && sleep 1
  [ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
  pids=$(ours); [ -n "$pids" ] && kill -9 $pids 2>/dev/null && sleep 1
  [ -n "$holder" ] && kill -9 "$holder" 2>/dev/null
  # (A run of the script before the namespace had the root mounted here.)
  if mountpoint -q "$root" 2>/dev/null; then
    umount -R "$root" 2>/dev/null || umount -R -l "$root"
  fi
  ip link delete "$bridge" 2>/dev/null
  if [ -d "$run" ] && ! findmnt -rn -o TARGET | grep -q "^$run"; then
    rm -rf --one-file-system "$run"
    rmdir /var/lib/healerd-readme 2>/dev/null
  fi
}

exec 9>/run/healerd-readme.lock
flock -n 9 || { echo "test-readme-commands.sh: another run is going on" >&2; exit 1; }
trap cleanup EXIT

step "a fresh Debian $release root (debootstrap --variant=minbase, cached)"
command -v debootstrap >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
mkdir -p "$cache"
(
  exec 8>"$cache/$release-fresh-$tag.lock"
  flock 8
  if [ ! -s "$tarball" ]; then
    tmp=$(mktemp -d "$cache/fresh.XXXXXX")
    debootstrap --variant=minbase "$release" "$tmp" http://deb.debian.org/debian \
      > "$cache/$release-fresh-$tag.debootstrap.log" 2>&1 \
      || { tail -20 "$cache/$release-fresh-$tag.debootstrap.log"; rm -rf --one-file-system "$tmp"; exit 1; }
    tar -C "$tmp" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf --one-file-system "$tmp"
    echo "   debootstrap done"
  fi
)
mkdir -p "$root" "$logs"
tar -C "$root" -xf "$tarball"
# A machine's / is 755 (the tarball's top came from mktemp -d, 700): users other than
# root must reach their files (healerctl as nobody, in tests/integration/test_healerctl.py).
chmod 755 "$root"
ok "Debian $(cat "$root/etc/debian_version") unpacked in $root ($(du -sm "$root" | cut -f1) MiB); python3: $([ -e "$root/usr/bin/python3" ] && echo /usr/bin/python3 || echo none)"

step "the root: resolv.conf, policy-rc.d, the checkout; its mount namespace"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d" && chmod 755 "$root/usr/sbin/policy-rc.d"
ca=${PIP_CERT:-${SSL_CERT_FILE:-}}
[ -n "$ca" ] && [ -s "$ca" ] && cp "$ca" "$root/etc/healerd-check-ca.crt"
mkdir -p "$root/root/healerd"
git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$root/root/healerd" -xf -
ip link add name "$bridge" type bridge
ip addr add "$subnet.1/24" dev "$bridge"
ip link set "$bridge" up
# Run by this machine's sh in the new, private namespace: the root bound on itself (a mount
# point: without it dockerd's `docker load` fails, "remount /"), its mounts, pivot_root
# into it and this machine's tree unmounted; then the holder.
launch='set -e
root=$1; shift
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mkdir "$root/.host"
cd "$root"
pivot_root . .host
cd /
/usr/bin/umount -l /.host
/usr/bin/rmdir /.host
exec "$@"'
unshare --mount --propagation private /bin/sh -c "$launch" launch-root "$root" \
  /usr/bin/sleep infinity </dev/null >"$logs/namespace.log" 2>&1 &
holder=$!
end=$(( $(date +%s) + 30 ))
until [ "$(tr '\0' ' ' < "/proc/$holder/cmdline" 2>/dev/null)" = "/usr/bin/sleep infinity " ]; do
  kill -0 "$holder" 2>/dev/null || { cat "$logs/namespace.log" >&2; holder=; fail "the root's mount namespace"; }
  [ "$(date +%s)" -lt "$end" ] || fail "the root's mount namespace: timed out"
  sleep 0.2
done
ns=$(readlink "/proc/$holder/ns/mnt")
[ "$ns" != "$(readlink /proc/self/ns/mnt)" ] || fail "the root's mount namespace is this machine's"
mntns=$ns
[ "$(in_root stat -c %a /)" = 755 ] || fail "the root's / is not mode 755"
ok "mount namespace $mntns (holder $holder): / is the Debian root, mode 755, $(in_root findmnt -rn -o TARGET | wc -l) mounts"
ok "checkout copied ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', with uncommitted changes')); bridge $bridge $subnet.1/24"

step "(1) bash tests/support/run-example.sh (until the example converges, then Ctrl-C)"
t1=$(date +%s)
setsid nsenter -t "$holder" -m /usr/bin/env -i --default-signal=INT,QUIT HOME=/root LANG=C.UTF-8 TERM=dumb \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  "HEALERD_DOCKERD_ARGS=--bridge=$bridge --iptables=false --ip6tables=false --ip-masq=false" \
  ${ca:+PIP_CERT=/etc/healerd-check-ca.crt SSL_CERT_FILE=/etc/healerd-check-ca.crt REQUESTS_CA_BUNDLE=/etc/healerd-check-ca.crt} \
  bash -c 'cd /root/healerd && exec bash tests/support/run-example.sh' >"$logs/example.log" 2>&1 </dev/null &
example_pid=$!
wait_until 1200 "the example's 2 replicas running" running_hello 2
ok "2 replicas of hello running, $(( $(date +%s) - t1 ))s after the command"
grep -E '^engine.sh|^venv.sh' "$logs/example.log" | sed 's/^/   | /'
in_root .venv/bin/python -c 'import sys, docker, urllib3; print("   venv: python", sys.version.split()[0], "docker SDK", docker.__version__, "urllib3", urllib3.__version__)'
in_root docker version --format '   engine: dockerd {{.Server.Version}} (API {{.Server.APIVersion}})'
in_root .venv/bin/healerctl wait --timeout 60s >/dev/null || fail "healerctl wait"
in_root .venv/bin/healerctl status | sed 's/^/   | /'
victim=$(in_root docker ps -q --filter label=io.healerd.service=hello | head -1)
in_root docker kill "$victim" >/dev/null
wait_until 60 "the killed replica running again" victim_running "$victim"
ok "docker kill $victim: running again"
kill -INT "$example_pid"
end=$(( $(date +%s) + 30 ))
while kill -0 "$example_pid" 2>/dev/null; do
  [ "$(date +%s)" -lt "$end" ] || fail "healerd still running 30s after SIGINT"
  sleep 0.5
done
wait "$example_pid" && rc=0 || rc=$?
example_pid=
ok "Ctrl-C: healerd ended (exit $rc); (1) took $(( $(date +%s) - t1 ))s in all"

step "(2) bash tests/run.sh"
[ ${#pytest_args[@]} -gt 0 ] || pytest_args=(tests/unit -q)
t2=$(date +%s)
in_root bash tests/run.sh "${pytest_args[@]}" > "$logs/suite.log" 2>&1 \
  || { tail -40 "$logs/suite.log" | sed 's/^/   | /'; fail "tests/run.sh ${pytest_args[*]}"; }
grep -E '^(engine|venv)\.sh' "$logs/suite.log" | sed 's/^/   | /'
tail -3 "$logs/suite.log" | sed 's/^/   | /'
ok "bash tests/run.sh ${pytest_args[*]}: passed in $(( $(date +%s) - t2 ))s"
if [ "${pytest_args[0]}" = tests/unit ]; then
  t3=$(date +%s)
  in_root bash tests/run.sh tests/integration/test_heal.py -q > "$logs/integration.log" 2>&1 \
    || { tail -40 "$logs/integration.log" | sed 's/^/   | /'; fail "tests/run.sh tests/integration/test_heal.py"; }
  tail -3 "$logs/integration.log" | sed 's/^/   | /'
  ok "bash tests/run.sh tests/integration/test_heal.py: passed in $(( $(date +%s) - t3 ))s"
fi

step "PASS in $(( $(date +%s) - t0 ))s (Debian $release; logs in $logs)"
