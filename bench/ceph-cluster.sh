#!/usr/bin/env bash
# A single-node Ceph cluster for tests: one mon, one OSD on memstore (data in
# RAM), radosgw (beast, S3) on 127.0.0.1. No mgr (RADOS and S3 work without
# it), no systemd, no root needed, nothing outside DIR.
#
# Usage: bench/ceph-cluster.sh start DIR        start it, wait till S3 answers, write DIR/env
#        bench/ceph-cluster.sh stop DIR         stop what `start DIR` started (idempotent)
#        bench/ceph-cluster.sh status DIR       each daemon and the S3 endpoint; exit 0 if all up
#        bench/ceph-cluster.sh restart-rgw DIR  (re)start radosgw on its port (after a test killed it)
#
# DIR must be absent, empty, or an earlier start's directory whose daemons have
# stopped. Everything lives in it: ceph.conf, keyring, the mon's store, the
# OSD's directory, logs (DIR/log: mon, osd, rgw .log, and each one's
# stdout/stderr in .out), pid files (DIR/pid). `stop` keeps DIR (its logs); remove it yourself.
#
# DIR/env holds `export` lines for the tests: CAIRN_TEST_S3_ENDPOINT,
# CAIRN_TEST_S3_BUCKET (exists, warmed: its pools are created), CAIRN_TEST_S3_ACCESS_KEY,
# CAIRN_TEST_S3_SECRET_KEY, CAIRN_TEST_S3_REGION (path-style requests, SigV4),
# CAIRN_TEST_CEPH_CONF (for librados/librbd clients: auth is "none", no keyring
# needed), CAIRN_TEST_CEPH_POOL (a RADOS pool, `rbd pool init`-ed),
# CAIRN_TEST_CEPH_DIR (DIR) and CAIRN_TEST_RGW_PID (radosgw's PID, for an outage
# test: kill it, then `restart-rgw DIR`, which rewrites DIR/env and prints the
# new PID as CAIRN_TEST_RGW_PID=N on stdout).
#
# Needs the Debian packages ceph-mon ceph-osd radosgw ceph-common (installed
# with --no-install-recommends by test.sh; this script installs nothing) and curl.
#
# What it sets and why (measured on Debian 12, Ceph 16.2.15, 2 vCPUs): the mon's
# paxos propose interval 0.05 s (with the default 1 s every map change waits,
# and the start takes 22 s instead of 2-3 s); `ms mon client mode = crc` for
# radosgw (it asks for "secure", which auth "none" cannot give: it loops on
# error -13); beast's tcp_nodelay (else a keep-alive ranged GET waits ~40 ms for
# the delayed ACK); no lifecycle thread (it makes radosgw's TERM take 10 s). The
# first bucket and the first object create RGW's pools (0.2 s each here, 2-3 s
# with the default paxos interval), so the start does one of each. Daemons run in the foreground (-f) under setsid, so `$!` is the
# daemon's own PID; a stopped daemon may stay a zombie (state Z) a while where
# PID 1 reaps late: it counts as dead.
set -euo pipefail

# The OSD's capacity, in RAM (it fills up to 95 % of it); CAIRN_CEPH_MEMSTORE_MIB
# sets it (benchmarks write more than the tests).
memstore_bytes=$(( ${CAIRN_CEPH_MEMSTORE_MIB:-1024} * 1024 * 1024 ))
start_timeout=60                       # seconds each daemon gets to come up
bucket=cairn-test
pool=cairn
region=us-east-1 # RGW signs with the region the client names; any works
access_key=CAIRNTESTACCESSKEY01
secret_key=cairnTestSecretKey0000000000000000000001

say() { echo "ceph-cluster: $*" >&2; }
die() {
  say "$*"
  exit 1
}

usage() {
  echo "usage: $0 start|stop|status|restart-rgw DIR" >&2
  exit 2
}
[ $# = 2 ] || usage
cmd=$1
[ -n "$2" ] || usage
dir=$(realpath -m -- "$2")
conf=$dir/ceph.conf
marker=$dir/.ceph-cluster # written first by start: DIR is ours to clear
daemons=(rgw osd mon)     # stop order: radosgw first (its shutdown talks to the others)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

pid_of() { cat "$dir/pid/$1" 2>/dev/null || true; }
# Running, not a zombie, and still the daemon this DIR started (a stale pid
# file's PID may belong to another process by now).
alive() {
  local pid state
  pid=$(pid_of "$1")
  [ -n "$pid" ] || return 1
  state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$conf"
}

ceph_() { timeout 30 ceph -c "$conf" "$@"; }

port() { cat "$dir/port/$1"; }
endpoint() { echo "http://127.0.0.1:$(port rgw)"; }
s3_up() { curl -s -o /dev/null -m 2 "$(endpoint)/"; }

# Ports in use by any TCP socket on this machine (/proc/net/tcp*, in hex).
ports_in_use() {
  local _ addr
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    while read -r _ addr _; do
      [ "$addr" = local_address ] || echo $((16#${addr##*:}))
    done
}
# Three free ports below the ephemeral range (32768-60999 on Linux), so that no
# outgoing connection takes one between this pick and the daemon's bind.
pick_ports() {
  local used p name
  used=" $(ports_in_use | tr '\n' ' ') "
  mkdir -p "$dir/port"
  for name in mon mon-v1 rgw; do
    while :; do
      p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
      case $used in *" $p "*) continue ;; esac
      used="$used$p "
      break
    done
    echo "$p" >"$dir/port/$name"
  done
}

# The last lines of a daemon's log and of its stdout/stderr.
log_tail() {
  local f
  for f in "$dir/log/$1.log" "$dir/log/$1.out"; do
    [ -s "$f" ] || continue
    echo "--- tail of $f" >&2
    tail -n 20 "$f" >&2
  done
}

# Foreground daemon in its own session (no terminal signal reaches it). In a
# script the background child is never a process-group leader, so setsid execs
# the daemon in place and $! is the daemon's PID.
launch() {
  local name=$1
  shift
  setsid "$@" -f </dev/null >>"$dir/log/$name.out" 2>&1 &
  echo $! >"$dir/pid/$name"
}

# wait_for NAME WHAT COMMAND...: until COMMAND succeeds; fails at once if the
# daemon exits, or after $start_timeout seconds, with the daemon's log tail.
wait_for() {
  local name=$1 what=$2 deadline=$((SECONDS + start_timeout))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ! alive "$name"; then
      log_tail "$name"
      die "$name exited while waiting for it to be $what (logs in $dir/log)"
    fi
    if [ $SECONDS -ge $deadline ]; then
      log_tail "$name"
      die "$name still not $what after ${start_timeout} s (logs in $dir/log)"
    fi
    sleep 0.1
  done
}

osd_up() { ceph_ osd dump | grep -q '^osd.0 up'; }

write_env() {
  local tmp=$dir/env.tmp
  {
    printf 'export CAIRN_TEST_S3_ENDPOINT=%q\n' "$(endpoint)"
    printf 'export CAIRN_TEST_S3_BUCKET=%q\n' "$bucket"
    printf 'export CAIRN_TEST_S3_ACCESS_KEY=%q\n' "$access_key"
    printf 'export CAIRN_TEST_S3_SECRET_KEY=%q\n' "$secret_key"
    printf 'export CAIRN_TEST_S3_REGION=%q\n' "$region"
    printf 'export CAIRN_TEST_CEPH_CONF=%q\n' "$conf"
    printf 'export CAIRN_TEST_CEPH_POOL=%q\n' "$pool"
    printf 'export CAIRN_TEST_CEPH_DIR=%q\n' "$dir"
    printf 'export CAIRN_TEST_RGW_PID=%q\n' "$(pid_of rgw)"
  } >"$tmp"
  mv "$tmp" "$dir/env"
}

write_conf() {
  local fsid=$1 mon=$2 mon_v1=$3 rgw=$4
  cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$mon,v1:127.0.0.1:$mon_v1]
public addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = false
keyring = $dir/keyring
run dir = $dir/run
admin socket = $dir/run/\$name.asok
pid file = $dir/run/\$name.pid
crash dir = $dir/crash
log to stderr = false
# errors also reach DIR/log/NAME.out: a daemon that exits before its log is
# flushed (a mon refusing to start) still says why
err to stderr = true
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
# The mon refuses to start, and shuts down, when its file system's free share
# is at or below crit (an integer percentage, rounded down). On a large disk
# shared with others 1 % is gigabytes, and 0 % is anything under 1 %: -1 turns
# the check off (the mon's store is a few MB).
mon data avail warn = 2
mon data avail crit = -1
mon max pg per osd = 1000

[mon]
# a map change (OSD boot, pool create) commits in ~50 ms, not the default 1 s
paxos propose interval = 0.05
paxos min wait = 0.01
mon data = $dir/mon/\$name
log file = $dir/log/mon.log
mon cluster log file = $dir/log/cluster.log

[osd]
osd data = $dir/osd/\$name
log file = $dir/log/osd.log
osd objectstore = memstore
memstore device bytes = $memstore_bytes
osd op num shards = 2
osd op num threads per shard = 1

[client]
log file =
admin socket =

[client.rgw.a]
# radosgw asks for "secure", which auth "none" cannot satisfy (error -13, in a loop)
ms mon client mode = crc
rgw data = $dir/rgw
rgw frontends = beast endpoint=127.0.0.1:$rgw tcp_nodelay=1
rgw thread pool size = 32
rgw enable usage log = false
# the lifecycle thread sleeps in 5 s steps and makes a TERM take 10 s (0.2 s without)
rgw enable lc threads = false
# a deleted object's data waits for garbage collection (2 h by default): in
# a memstore OSD that is RAM, and benchmarks that delete gigabytes a minute
# (Cairn's cleaner deletes whole segment objects) fill it within one run
rgw gc obj min wait = 2
rgw gc processor period = 2
log file = $dir/log/rgw.log
admin socket = $dir/run/\$name.asok
EOF
}

# curl with the test user's SigV4 signature; RGW answers 411 to a chunked
# upload, so a PUT's body is a file (-T) with UNSIGNED-PAYLOAD.
s3() {
  curl -sS -f -o /dev/null --aws-sigv4 "aws:amz:$region:s3" --user "$access_key:$secret_key" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"
}

start_rgw() {
  launch rgw radosgw -c "$conf" -n client.rgw.a
  wait_for rgw "answering S3 on $(endpoint)" s3_up
}

cmd_start() {
  local b missing=()
  for b in ceph-mon ceph-osd radosgw radosgw-admin ceph ceph-authtool monmaptool; do
    command -v "$b" >/dev/null || missing+=("$b")
  done
  command -v curl >/dev/null || missing+=(curl)
  [ ${#missing[@]} = 0 ] ||
    die "missing ${missing[*]}: apt-get install --no-install-recommends ceph-mon ceph-osd radosgw ceph-common curl"

  if [ -e "$marker" ]; then
    for b in "${daemons[@]}"; do
      ! alive "$b" || die "$dir: its cluster is running ($b pid $(pid_of "$b")); stop it first"
    done
    rm -rf "${dir:?}"/{ceph.conf,keyring,monmap,env,env.tmp,pid,port,run,log,mon,osd,rgw,crash,warm-up}
  elif [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
    die "$dir is not empty and not a cluster this script made"
  fi
  mkdir -p "$dir"
  touch "$marker"
  mkdir -p "$dir"/{pid,run,log,mon/mon.a,osd/osd.0,rgw,crash}

  local t0 fsid uuid id
  t0=$(now)
  trap on_start_failure EXIT
  pick_ports
  fsid=$(cat /proc/sys/kernel/random/uuid)
  write_conf "$fsid" "$(port mon)" "$(port mon-v1)" "$(port rgw)"

  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  monmaptool --create --fsid "$fsid" \
    --addv a "[v2:127.0.0.1:$(port mon),v1:127.0.0.1:$(port mon-v1)]" "$dir/monmap" >/dev/null
  ceph-mon -c "$conf" -i a --mkfs --monmap "$dir/monmap" --keyring "$dir/keyring" \
    >>"$dir/log/mon.out" 2>&1 || { log_tail mon; die "ceph-mon --mkfs failed"; }
  launch mon ceph-mon -c "$conf" -i a
  wait_for mon "in quorum on 127.0.0.1:$(port mon)" ceph_ --connect-timeout 2 mon stat
  say "mon up on 127.0.0.1:$(port mon) after $(since "$t0") s"

  uuid=$(cat /proc/sys/kernel/random/uuid)
  id=$(ceph_ osd new "$uuid")
  [ "$id" = 0 ] || die "ceph osd new gave id $id, not 0"
  ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$uuid" >>"$dir/log/osd.out" 2>&1 ||
    { log_tail osd; die "ceph-osd --mkfs failed"; }
  launch osd ceph-osd -c "$conf" -i 0
  wait_for osd "up in the OSD map" osd_up
  say "osd.0 up (memstore, $((memstore_bytes >> 20)) MiB) after $(since "$t0") s"

  start_rgw
  say "radosgw answering on $(endpoint) after $(since "$t0") s"
  timeout 60 radosgw-admin -c "$conf" user create --uid=cairn-test --display-name=cairn-test \
    --access-key="$access_key" --secret-key="$secret_key" >/dev/null
  # The first bucket and the first object create RGW's index and data pools.
  local url
  url=$(endpoint)/$bucket
  printf 'warm-up' >"$dir/warm-up"
  s3 -X PUT "$url"
  s3 -T "$dir/warm-up" "$url/warm-up"
  s3 "$url/warm-up"
  s3 -X DELETE "$url/warm-up"
  rm -f "$dir/warm-up"
  say "S3 user and bucket $bucket ready after $(since "$t0") s"

  ceph_ osd pool create "$pool" 8 8 >/dev/null 2>&1
  if command -v rbd >/dev/null; then
    timeout 30 rbd -c "$conf" pool init "$pool"
  else
    ceph_ osd pool application enable "$pool" rados >/dev/null 2>&1
  fi
  write_env
  trap - EXIT
  say "ready in $(since "$t0") s: $(endpoint), bucket $bucket, pool $pool; source $dir/env"
}

on_start_failure() {
  say "start failed; stopping what it started (logs kept in $dir/log)"
  stop_all
}

# TERM, wait up to 10 s, then KILL and wait again: returns when the daemon is
# gone or a zombie.
stop_one() {
  local name=$1 pid _
  alive "$name" || return 0
  pid=$(pid_of "$name")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do
    alive "$name" || return 0
    sleep 0.1
  done
  say "$name (pid $pid) still running 10 s after TERM: KILL"
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 50); do
    alive "$name" || return 0
    sleep 0.1
  done
  die "$name (pid $pid) survives KILL"
}

stop_all() {
  local name
  for name in "${daemons[@]}"; do stop_one "$name"; done
}

cmd_stop() {
  [ -e "$marker" ] || { say "$dir: no cluster here; nothing to stop"; return 0; }
  stop_all
  say "stopped ($dir kept: logs in $dir/log)"
}

cmd_status() {
  local name pid up=0
  [ -e "$marker" ] || die "$dir: no cluster here"
  for name in mon osd rgw; do
    if alive "$name"; then
      pid=$(pid_of "$name")
      printf '%-4s pid %-8s rss %6d MiB\n' "$name" "$pid" \
        "$(($(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status") / 1024))"
    else
      printf '%-4s down\n' "$name"
      up=1
    fi
  done
  if [ -e "$dir/port/rgw" ] && s3_up; then
    echo "s3   $(endpoint) answering"
  else
    echo "s3   not answering"
    up=1
  fi
  return $up
}

# A radosgw still running (or still shutting down after a TERM) is stopped first.
cmd_restart_rgw() {
  local t0
  [ -e "$marker" ] || die "$dir: no cluster here"
  if ! alive mon || ! alive osd; then die "$dir: mon or OSD not running; start the cluster again"; fi
  t0=$(now)
  stop_one rgw
  start_rgw
  say "radosgw answering on $(endpoint) after $(since "$t0") s"
  write_env
  echo "CAIRN_TEST_RGW_PID=$(pid_of rgw)"
}

case $cmd in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  restart-rgw) cmd_restart_rgw ;;
  *) usage ;;
esac
