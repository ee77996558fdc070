#!/usr/bin/env bash
# osd.sh DIR kill|start N — crash or bring back one OSD of the cluster start-cluster.sh DIR booted.
#
#   kill N   SIGKILL osd.N (a crash: no clean unmount, no goodbye to the monitor) and wait until
#            its process is gone. Only the pid DIR/run/osd.N.pid records, and only if that pid is
#            still a ceph-osd of DIR's configuration.
#   start N  start osd.N again on its data (bluestore only: a memstore OSD's objects died with
#            it) and wait until the monitor reports it up. Its placement groups peer after that;
#            clients' operations wait for them (up to their operation timeout).
#
# For fault tests on a three-OSD cluster (CEPH_OSDS=3 CEPH_OBJECTSTORE=bluestore): with one OSD
# down a size 3 / min_size 2 pool keeps accepting writes; with two down it stops until one is
# back. Env: CEPH_BOOT_TIMEOUT seconds to wait (default 60).
set -euo pipefail

DIR=${1:?usage: osd.sh DIR kill|start N}
ACTION=${2:?usage: osd.sh DIR kill|start N}
ID=${3:?usage: osd.sh DIR kill|start N}
DIR=$(cd "$DIR" && pwd)
CONF=$DIR/ceph.conf
PIDF=$DIR/run/osd.$ID.pid
TMO=${CEPH_BOOT_TIMEOUT:-60}

log() { echo "[osd.sh $(date +%T)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[ -f "$CONF" ] || die "no $CONF: not a cluster of start-cluster.sh"
[ -d "$DIR/osd/ceph-$ID" ] || die "no osd.$ID in $DIR"

# ours PID: PID is a live ceph-osd started with DIR's configuration
ours() {
  [ "$(cat "/proc/$1/comm" 2>/dev/null)" = ceph-osd ] &&
    tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "-c $CONF" &&
    [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}
# state: "UP UP_FROM" of osd.ID in the monitor's map (UP 1 or 0; UP_FROM the map epoch at
# which its current instance came up, so a restarted OSD has a higher one)
state() {
  timeout 30 ceph -c "$CONF" --connect-timeout 10 osd dump --format json 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; i=int(sys.argv[1]); o=next(o for o in json.load(sys.stdin)["osds"] if o["osd"]==i); print(o["up"], o["up_from"])' "$ID"
}
# back SINCE: osd.ID is up in an instance that came up after map epoch SINCE
back() { local s; s=$(state) || return 1; set -- $s; [ "$1" = 1 ] && [ "$2" -gt "$since" ]; }
wait_until() {   # wait_until WHAT CMD...: poll CMD every 0.2 s until it succeeds
  local what=$1; shift
  local end=$(( $(date +%s) + TMO ))
  until "$@"; do
    [ "$(date +%s)" -lt "$end" ] || die "timed out after ${TMO}s waiting for $what"
    sleep 0.2
  done
}

case $ACTION in
  kill)
    [ -f "$PIDF" ] || die "osd.$ID has no pid file: not running"
    pid=$(cat "$PIDF")
    ours "$pid" || die "osd.$ID (pid $pid) is not running"
    kill -KILL "$pid"
    wait_until "osd.$ID (pid $pid) to exit" eval '! ours '"$pid"
    log "osd.$ID killed (pid $pid)"
    ;;
  start)
    grep -q '^osd objectstore = bluestore' "$CONF" || die "only a bluestore OSD restarts on its data"
    if [ -f "$PIDF" ] && ours "$(cat "$PIDF")"; then die "osd.$ID is running"; fi
    before=$(state) || die "the monitor does not answer"
    since=${before#* }
    ceph-osd -c "$CONF" -i "$ID" >>"$DIR/log/osd.$ID.stdout" 2>&1 || die "ceph-osd.$ID failed to start"
    wait_until "osd.$ID to be up in the OSD map" back
    log "osd.$ID up (pid $(cat "$PIDF"))"
    ;;
  *) die "unknown action $ACTION (kill or start)" ;;
esac
