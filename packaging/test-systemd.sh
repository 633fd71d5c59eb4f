#!/usr/bin/env bash
# Proof under a real systemd: build the .deb, install it in a Debian container whose
# PID 1 is systemd, and check the unit end to end (issue 6, item 5), on each Debian
# release healerd supports with that release's own packages (issue 31, item 4).
#
#   bash packaging/test-systemd.sh [bookworm|trixie]   (as root; default bookworm)
#   bash packaging/test-systemd.sh --release trixie
#
# - The systemd image is made from the release's packages with debootstrap and
#   `docker import`, cached per release as a tarball under /var/cache/healerd-test and
#   as a local image (healerd-test/systemd:RELEASE-KEY).
# - The container runs on the system dockerd (tests/support/engine.sh starts it).
# - healerd inside talks to a dockerd of this script's own (own socket, data root and
#   bridge, no iptables), mounted as /var/run/docker.sock: a healerd removes every
#   labelled container it was not told about, so it must not see the system engine,
#   where other healerds (the example, benchmarks) keep theirs.
# Everything it starts is removed at exit, pass or fail.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
unset DOCKER_HOST

release=bookworm
while [ $# -gt 0 ]; do
  case $1 in
    --release) release=${2:?--release needs bookworm or trixie}; shift 2 ;;
    --release=*) release=${1#--release=}; shift ;;
    bookworm|trixie) release=$1; shift ;;
    *) echo "usage: $0 [bookworm|trixie] (or --release RELEASE)" >&2; exit 2 ;;
  esac
done
case $release in
  bookworm|trixie) ;;
  *) echo "test-systemd.sh: release '$release': bookworm (Debian 12) or trixie (Debian 13)" >&2; exit 2 ;;
esac

cache=/var/cache/healerd-test
# The .deb's Depends (dpkg -i installs nothing; debootstrap adds what these depend on),
# apprise included: Debian's own on both releases. python3-cffi-backend: apprise's
# python3-cryptography (through python3-oauthlib) wants it by virtual names
# (python3-cffi-backend-api-min/max), which debootstrap cannot resolve.
pkgs=systemd,systemd-sysv,dbus,procps,python3,python3-docker,python3-yaml,python3-psutil,python3-systemd,python3-prometheus-client,apprise,python3-zstandard,python3-cffi-backend
tag=$(printf '%s' "$release $pkgs" | sha256sum | cut -c1-12)
image=healerd-test/systemd:$release-$tag
run=/var/lib/healerd-systest/run-$$
bridge=hst$$
subnet=10.232.126
ctr=healerd-systest-$$
svc=systest-$$
hook_port=8099   # the loopback receiver of the notification step, inside the container
t0=$(date +%s)

step() { printf '\n== [%3ss] %s\n' "$(( $(date +%s) - t0 ))" "$*"; }
ok() { printf '   ok: %s\n' "$*"; }
fail() { printf '   FAIL: %s\n' "$*" >&2; dump; exit 1; }
in_ctr() { docker exec "$ctr" "$@"; }
pdocker() { docker -H "unix://$run/docker.sock" "$@"; }
dump() {
  docker exec "$ctr" journalctl -u healerd --no-pager -n 40 2>/dev/null >&2 || true
}
wait_until() { # SECONDS WHAT COMMAND...
  local limit=$1 what=$2; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${limit}s: $what"
    sleep 0.5
  done
}
prop() { in_ctr systemctl show -p "$1" --value healerd; }

cleanup() {
  set +e
  docker rm -f "$ctr" >/dev/null 2>&1
  if [ -f "$run/docker.pid" ]; then
    local pid; pid=$(cat "$run/docker.pid")
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null
  fi
  ip link delete "$bridge" 2>/dev/null
  rm -rf --one-file-system "$run"
  rmdir /var/lib/healerd-systest 2>/dev/null
}

exec 9>/run/healerd-systest.lock
flock -n 9 || { echo "test-systemd.sh: another run is going on" >&2; exit 1; }
trap cleanup EXIT

step "system dockerd and tools"
bash tests/support/engine.sh
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
[ ${#need[@]} -eq 0 ] || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; }

step "systemd image $image"
if docker image inspect "$image" >/dev/null 2>&1; then
  ok "cached image"
else
  mkdir -p "$cache"
  tarball=$cache/$release-systemd-$tag.tar
  log=$cache/$release-systemd-$tag.debootstrap.log
  if [ ! -s "$tarball" ]; then
    rootfs=$(mktemp -d "$cache/rootfs.XXXXXX")
    debootstrap --variant=minbase --include="$pkgs" "$release" "$rootfs" http://deb.debian.org/debian \
      > "$log" 2>&1 || { tail -20 "$log"; rm -rf --one-file-system "$rootfs"; exit 1; }
    tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf --one-file-system "$rootfs"
    ok "debootstrap done"
  fi
  docker import -c 'CMD ["/sbin/init"]' "$tarball" "$image" >/dev/null
  ok "imported $tarball"
fi

step "build the .deb (packaging/build-deb)"
deb=$(packaging/build-deb)
ok "$deb"

step "private dockerd for healerd ($run/docker.sock, bridge $bridge)"
mkdir -p "$run"
ip link add name "$bridge" type bridge
ip addr add "$subnet.1/24" dev "$bridge"
ip link set "$bridge" up
setsid dockerd --host "unix://$run/docker.sock" --data-root "$run/data" --exec-root "$run/exec" \
  --pidfile "$run/docker.pid" --bridge="$bridge" --iptables=false --ip6tables=false \
  --ip-masq=false >"$run/dockerd.log" 2>&1 </dev/null &
wait_until 60 "private dockerd answers" pdocker version
ok "dockerd $(pdocker version --format '{{.Server.Version}}')"

step "start systemd in a container"
docker run -d --name "$ctr" --cgroupns=host -e container=docker \
  -v /sys/fs/cgroup:/sys/fs/cgroup:rw -v "$run/docker.sock:/var/run/docker.sock" \
  --tmpfs /run --tmpfs /run/lock "$image" /sbin/init >/dev/null
wait_until 60 "systemd is up" in_ctr sh -c 'systemctl is-system-running | grep -qE "running|degraded"'
ok "PID 1: $(in_ctr ps -o comm= -p 1), $(in_ctr systemctl --version | head -1), system $(in_ctr systemctl is-system-running || true)"

step "test image from busybox-static, built with Debian's python3-docker inside"
docker cp /bin/busybox "$ctr:/bin/busybox"
docker cp tests/support/busybox_image.py "$ctr:/tmp/busybox_image.py"
in_ctr python3 -c 'import sys, docker, urllib3, apprise; print("   Debian", open("/etc/debian_version").read().strip(), "python3", sys.version.split()[0], "docker SDK", docker.__version__, "urllib3", urllib3.__version__, "apprise", apprise.__version__)'
in_ctr python3 /tmp/busybox_image.py healerd-systest/busybox:1 >/dev/null
ok "healerd-systest/busybox:1 on the private engine"

step "install: dpkg -i (dependencies are Debian's packages, preinstalled by debootstrap)"
docker cp "$deb" "$ctr:/tmp/healerd.deb"
in_ctr dpkg -i /tmp/healerd.deb
in_ctr systemctl is-enabled healerd | grep -qx enabled || fail "not enabled by postinst"
wait_until 30 "healerd active after install" in_ctr systemctl is-active -q healerd
ok "enabled and started by the maintainer scripts"
in_ctr test -f /etc/healerd/healerd.yaml && in_ctr test -d /etc/healerd/conf.d || fail "/etc/healerd missing"
in_ctr sh -c 'dpkg-query --control-show healerd conffiles' | grep -q healerd.yaml || fail "no conffile"
in_ctr test -f /usr/share/doc/healerd/examples/example.yaml || fail "no example"
in_ctr getent group healerd >/dev/null || fail "no group healerd"
mode=$(in_ctr stat -c '%a %U:%G' /etc/healerd/healerd.yaml)
[ "$mode" = "640 root:healerd" ] || fail "healerd.yaml is $mode, not 640 root:healerd"
ok "conffile (healerd.yaml $mode), conf.d, example, group healerd"

step "systemd-analyze verify and security"
# --man=no: this minimal image has no man-db to look the Documentation= pages up with;
# they are checked to be installed right below.
out=$(in_ctr systemd-analyze verify --man=no /usr/lib/systemd/system/healerd.service 2>&1) || true
[ -z "$out" ] || { echo "$out"; fail "systemd-analyze verify is not clean"; }
in_ctr test -f /usr/share/man/man8/healerd.8.gz -a -f /usr/share/man/man1/healerctl.1.gz || fail "man pages missing"
ok "systemd-analyze verify: clean; man pages healerd(8), healerctl(1) installed"
in_ctr sh -c 'sed "/^# Hardening/,/^\[Install\]/{/^\[Install\]/!d}" /usr/lib/systemd/system/healerd.service > /tmp/healerd-unhardened.service'
before=$(in_ctr systemd-analyze security --offline=yes /tmp/healerd-unhardened.service 2>/dev/null | tail -1)
after=$(in_ctr systemd-analyze security healerd 2>/dev/null | tail -1)
echo "   before hardening: $before"
echo "   after hardening:  $after"

step "systemctl start: active (running) with the STATUS text"
in_ctr systemctl stop healerd
in_ctr systemctl start healerd   # returns once READY=1 arrived (Type=notify)
[ "$(prop SubState)" = running ] || fail "not running after start"
status=$(prop StatusText)
echo "$status" | grep -q "services converged" || fail "no STATUS text: '$status'"
in_ctr systemctl status healerd --no-pager -n 0 | sed 's/^/   | /'
ok "active (running), Status: \"$status\""

step "healing end to end"
in_ctr sh -c "cat > /etc/healerd/conf.d/systest.yaml <<EOF
services:
  $svc:
    image: healerd-systest/busybox:1
    command: [\"sh\", \"-c\", \"exec sleep 3600\"]
    stop_grace_period: 1s
    replicas: 2
EOF
chmod 644 /etc/healerd/conf.d/systest.yaml"
running() { pdocker ps -q --filter "label=io.healerd.service=$svc" --filter status=running | wc -l; }
wait_until 30 "2 replicas running" sh -c "[ \$(docker -H unix://$run/docker.sock ps -q --filter label=io.healerd.service=$svc --filter status=running | wc -l) -eq 2 ]"
in_ctr healerctl wait --timeout 30s
victim=$(pdocker ps -q --filter "label=io.healerd.service=$svc" | head -1)
before=$(pdocker inspect -f '{{.State.StartedAt}}' "$victim")
pdocker kill "$victim" >/dev/null
# Healed in place (issue 28): the same container runs again, started anew.
wait_until 30 "the killed container started again in place" sh -c "[ \$(docker -H unix://$run/docker.sock ps -q --filter label=io.healerd.service=$svc --filter status=running | wc -l) -eq 2 ] && [ \"\$(docker -H unix://$run/docker.sock inspect -f '{{.State.Running}} {{.State.StartedAt}}' $victim)\" != 'true $before' ] && docker -H unix://$run/docker.sock inspect -f '{{.State.Running}}' $victim | grep -q true"
ok "docker kill $victim: started again in place; $(running) running"
wait_until 15 "STATUS shows the service converged" sh -c "docker exec $ctr systemctl show -p StatusText --value healerd | grep -q '1/1 services converged, 2 containers'"
ok "Status: \"$(prop StatusText)\""

step "systemctl reload"
pid=$(prop MainPID)
since=$(in_ctr date '+%Y-%m-%d %H:%M:%S')
sleep 1
in_ctr sed -i 's/replicas: 2/replicas: 3/' /etc/healerd/conf.d/systest.yaml
in_ctr systemctl reload healerd
wait_until 15 "reload logged" sh -c "docker exec $ctr journalctl -u healerd --since '$since' | grep -q 'reloading configuration'"
wait_until 30 "3 replicas after reload" sh -c "[ \$(docker -H unix://$run/docker.sock ps -q --filter label=io.healerd.service=$svc --filter status=running | wc -l) -eq 3 ]"
[ "$(prop MainPID)" = "$pid" ] || fail "reload restarted healerd"
# The edit itself (inotify) and the SIGHUP each bring a reload: RELOADING=1 ... READY=1,
# during which systemd shows the unit "reloading". It must come back to active/running.
state() { in_ctr systemctl show -p ActiveState,SubState --value healerd | paste -sd/; }
end=$(( $(date +%s) + 15 ))
until [ "$(state)" = active/running ]; do
  [ "$(date +%s)" -lt "$end" ] || fail "not active/running 15s after reload: $(state)"
  sleep 0.2
done
[ "$(prop MainPID)" = "$pid" ] || fail "reload restarted healerd"
ok "reloaded in place (MainPID $pid), 3 replicas"

step "notifications: healerctl notify test to a loopback receiver (Apprise json://)"
# The receiver: each POST's body appended to /tmp/hook.jsonl, answered 200.
in_ctr rm -f /tmp/hook.jsonl
docker exec -d "$ctr" python3 -c "
import http.server
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get('Content-Length') or 0))
        with open('/tmp/hook.jsonl', 'ab') as f:
            f.write(body.replace(b'\n', b' ') + b'\n')
        self.send_response(200)
        self.send_header('Content-Length', '0')
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(('127.0.0.1', $hook_port), Hook).serve_forever()
"
wait_until 15 "the receiver listens on 127.0.0.1:$hook_port" in_ctr python3 -c "import socket; socket.create_connection(('127.0.0.1', $hook_port), 1).close()"
hook="json://127.0.0.1:$hook_port/hook"
in_ctr sed -i "s|^notifications: \[\]\$|notifications:\n  - url: \"$hook\"\n    name: systest|" /etc/healerd/healerd.yaml
in_ctr grep -q "url: \"$hook\"" /etc/healerd/healerd.yaml || fail "the notifications: entry is not in healerd.yaml"
mode=$(in_ctr stat -c '%a %U:%G' /etc/healerd/healerd.yaml)
[ "$mode" = "640 root:healerd" ] || fail "healerd.yaml became $mode"
pid=$(prop MainPID)
in_ctr healerctl reload || fail "healerctl reload did not apply the notifications: entry"
[ "$(prop MainPID)" = "$pid" ] || fail "the reload restarted healerd"
ok "healerd.yaml ($mode) has target systest ($hook); healerctl reload applied it in place"
set +e
out=$(in_ctr healerctl notify test 2>&1); rc=$?
set -e
echo "$out" | sed 's/^/   | /'
[ "$rc" -eq 0 ] || fail "healerctl notify test: exit $rc"
echo "$out" | grep -q '^systest: sent' || fail "healerctl notify test: no 'systest: sent'"
wait_until 10 "the receiver got the message" in_ctr test -s /tmp/hook.jsonl
title=$(in_ctr python3 -c "import json; print(json.loads(open('/tmp/hook.jsonl').read().splitlines()[-1])['title'])")
echo "$title" | grep -q test || fail "the receiver's JSON title has no 'test': '$title'"
ok "healerctl notify test: exit 0, sent; the receiver got JSON titled \"$title\""
set +e
out=$(in_ctr healerctl notify test --url json://127.0.0.1:1/none 2>&1); rc=$?
set -e
echo "$out" | sed 's/^/   | /'
[ "$rc" -eq 1 ] || fail "healerctl notify test --url json://127.0.0.1:1/none: exit $rc, not 1"
echo "$out" | grep -q FAILED || fail "healerctl notify test --url to a closed port: no FAILED"
ok "healerctl notify test --url json://127.0.0.1:1/none: exit 1, FAILED"
no_urls() {
  in_ctr journalctl -u healerd -o verbose --no-pager > "$run/journal-urls.txt" || true
  ! grep -qF -e "127.0.0.1:$hook_port/hook" -e /none "$run/journal-urls.txt"
}
no_urls || { grep -nF -e "127.0.0.1:$hook_port/hook" -e /none "$run/journal-urls.txt" | head -5; fail "a notification URL is in healerd's journal"; }
ok "healerd's journal (all fields) names neither 127.0.0.1:$hook_port/hook nor /none"

step "kill -9 of the main PID: restarted by systemd"
restarts=$(prop NRestarts)
in_ctr kill -9 "$pid"
wait_until 30 "a new main PID" sh -c "p=\$(docker exec $ctr systemctl show -p MainPID --value healerd); [ \"\$p\" != 0 ] && [ \"\$p\" != $pid ] && docker exec $ctr systemctl is-active -q healerd"
pid2=$(prop MainPID)
[ "$(prop NRestarts)" -gt "$restarts" ] || fail "NRestarts did not grow"
ok "MainPID $pid -> $pid2, NRestarts $(prop NRestarts)"

# The unit's own WatchdogSec (a minute) is shown; the step runs the same mechanism with a
# drop-in of 10 s (a minute of waiting in every CI run otherwise), removed afterwards.
step "SIGSTOP of the main PID: restarted by the watchdog (the unit's WatchdogSec=$(prop WatchdogUSec); 10s here)"
dropin=/run/systemd/system/healerd.service.d
in_ctr sh -c "mkdir -p $dropin && printf '[Service]\nWatchdogSec=10s\n' > $dropin/watchdog-test.conf"
in_ctr systemctl daemon-reload
in_ctr systemctl restart healerd
[ "$(prop WatchdogUSec)" = 10s ] || fail "the drop-in's WatchdogSec=10s was not taken: $(prop WatchdogUSec)"
pid2=$(prop MainPID)
since=$(in_ctr date '+%Y-%m-%d %H:%M:%S')
in_ctr kill -STOP "$pid2"
stopped=$(date +%s)
wait_until 60 "the watchdog restart" sh -c "p=\$(docker exec $ctr systemctl show -p MainPID --value healerd); [ \"\$p\" != 0 ] && [ \"\$p\" != $pid2 ] && docker exec $ctr systemctl is-active -q healerd"
# journald writes systemd's "Watchdog timeout" line on its own time: waited for, not read
# once the new MainPID is up (a CI run read the journal before it was there).
wait_until 20 "a watchdog message in the journal" sh -c "docker exec $ctr journalctl -u healerd --since '$since' --no-pager | grep -qi watchdog"
in_ctr journalctl -u healerd --since "$since" --no-pager -o cat | grep -i watchdog | sed 's/^/   | /'
ok "restarted $(( $(date +%s) - stopped ))s after SIGSTOP; MainPID $(prop MainPID), NRestarts $(prop NRestarts)"
# The watchdog's restart is an unclean stop: healerd tells the target so at its next start
# (a notice sent for real, not a test), 2 s gathered: waited for before the clean restart.
wait_until 20 "the unclean-stop notice at the receiver" in_ctr grep -q 'unclean stop' /tmp/hook.jsonl
in_ctr rm "$dropin/watchdog-test.conf"
in_ctr systemctl daemon-reload
in_ctr systemctl restart healerd
[ "$(prop WatchdogUSec)" = 1min ] || fail "the unit's WatchdogSec is not back: $(prop WatchdogUSec)"

step "journal: structured fields"
in_ctr journalctl -u healerd -o verbose --no-pager "HEALERD_SERVICE=$svc" > "$run/journal.txt" || true
n=$(grep -c '^    MESSAGE=' "$run/journal.txt" || true)
echo "   journalctl -u healerd HEALERD_SERVICE=$svc: $n entries, for instance:"
in_ctr journalctl -u healerd -o cat --no-pager "HEALERD_SERVICE=$svc" | tail -5 | sed 's/^/   | /'
[ "$n" -gt 0 ] || fail "no entry with HEALERD_SERVICE=$svc"
for field in CONTAINER_ID ACTION REASON; do
  grep -q "^    $field=" "$run/journal.txt" || fail "no $field= field on the service's entries"
done
grep -E '^    (HEALERD_SERVICE|CONTAINER_ID|CONTAINER_NAME|ACTION|REASON|HEALERD_STATE|PRIORITY|SYSLOG_IDENTIFIER)=' "$run/journal.txt" | sort | uniq -c | sort -rn | head -12 | sed 's/^/   | /'
ok "HEALERD_SERVICE, CONTAINER_ID, ACTION, REASON present"
# The unclean-stop notice (waited for above, after the watchdog's restart): still no URL
# in the journal.
no_urls || fail "a notification URL is in healerd's journal (after the restarts)"
ok "the receiver got the unclean-stop notice ($(in_ctr sh -c 'wc -l < /tmp/hook.jsonl') messages in all); still no notification URL in healerd's journal"

step "volume snapshots under the unit's own sandbox"
# healerd's snapshot store (healerd.daemon.snapshots) run as a transient unit with the
# installed unit's sandbox (its capabilities, ProtectSystem, ReadWritePaths,
# RestrictSUIDSGID, system-call filter, state directory): a database-like volume (a 0700
# directory of uid 999, a 0600 file) is copied, changed, and restored, owners and modes
# kept. Without the unit's file capabilities the copy cannot even read the directory.
vol=/var/lib/docker/volumes/systest_db/_data
in_ctr sh -c "mkdir -p $vol/pg && echo v1 > $vol/pg/row && chown -R 999:999 $vol/pg && chmod 700 $vol/pg && chmod 600 $vol/pg/row" || fail "cannot make the test volume"
mapfile -t sandbox < <(in_ctr grep -E '^(CapabilityBoundingSet|AmbientCapabilities|NoNewPrivileges|ProtectSystem|ProtectHome|PrivateTmp|PrivateDevices|ReadWritePaths|RestrictSUIDSGID|SystemCallFilter|SystemCallErrorNumber|StateDirectory|StateDirectoryMode|ProtectProc|MemoryDenyWriteExecute)=' /usr/lib/systemd/system/healerd.service)
[ "${#sandbox[@]}" -ge 8 ] || fail "the unit's sandbox options were not found"
props=(); for line in "${sandbox[@]}"; do props+=(-p "$line"); done
out=$(in_ctr systemd-run --wait --pipe --quiet "${props[@]}" python3 -c "
import os, pathlib
from healerd.daemon.snapshots import SnapshotStore
v = '$vol'
store = SnapshotStore.at(pathlib.Path('/var/lib/healerd'))
snap = store.take('systest', {'systest_db': v}, from_digest='sha256:' + '1' * 64, to_digest='sha256:' + '2' * 64)
open(v + '/pg/row', 'w').write('v2 migrated')
store.restore(snap, {'systest_db': v})
st = os.stat(v + '/pg')
print(open(v + '/pg/row').read().strip(), st.st_uid, oct(st.st_mode & 0o777), snap.size > 0)
" 2>&1) || fail "snapshot under the sandbox: $out"
[ "$out" = "v1 999 0o700 True" ] || fail "snapshot under the sandbox: got '$out', not 'v1 999 0o700 True'"
ok "taken and restored under the unit's sandbox: the row is v1 again, pg/ still uid 999, 0700"

step "purge: removes what it installed, never a container"
# Stop healerd first: with its file gone, a running healerd would (rightly) remove the
# service's containers as undeclared, racing the package's prerm.
in_ctr systemctl stop healerd
before_n=$(pdocker ps -aq --filter "label=io.healerd.service=$svc" | wc -l)
in_ctr rm /etc/healerd/conf.d/systest.yaml
in_ctr dpkg --purge healerd
in_ctr systemctl is-active -q healerd && fail "still running after purge"
in_ctr test -e /etc/healerd && fail "/etc/healerd left behind"
in_ctr test -e /usr/lib/systemd/system/healerd.service && fail "unit left behind"
in_ctr test -e /usr/lib/python3/dist-packages/healerd && fail "python package left behind"
after_n=$(pdocker ps -aq --filter "label=io.healerd.service=$svc" | wc -l)
[ "$after_n" -eq "$before_n" ] || fail "purge changed the containers: $before_n -> $after_n"
ok "gone: service, /etc/healerd, unit, modules; $after_n containers untouched"

step "PASS in $(( $(date +%s) - t0 ))s"
