#!/usr/bin/env bash
# Cairn's object volume (kind = "objects": segments in an object store, a
# local write log, a DRAM cache) against librbd on the same single-node Ceph,
# through fio: qemu-nbd over librbd (rbd_cache writeback; fio's nbd engine)
# and fio's own rbd engine. Cairn runs twice: over RGW (S3, the "cairn"
# column) and over RADOS through librados (backend = "rados", the
# "cairn-rados" column). Every row runs the peers and both Cairns in turn
# and prints the ratios. (The first step of issue 24's `cairn bench objects`.)
#
# Usage: bench/objects-vs-librbd.sh CEPH_DIR [SECONDS] [ROUNDS] [OBJECT_SIZE]
#   CEPH_DIR: a cluster from bench/ceph-cluster.sh, with room for the runs:
#     CAIRN_CEPH_MEMSTORE_MIB=6144 bench/ceph-cluster.sh start /tmp/ceph-bench
#   SECONDS: per run (default 8). ROUNDS: runs of each side per row, in
#   turn; the row shows the medians (default 3: the peers move by up to 2x
#   from run to run on this machine). OBJECT_SIZE: Cairn's segment objects
#   (default 8MiB, the example specs').
# Needs fio (nbd and rbd engines), qemu-nbd with the rbd driver
# (qemu-block-extra), rbd, and a release build (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."

ceph_dir=${1:?usage: bench/objects-vs-librbd.sh CEPH_DIR [SECONDS] [ROUNDS]}
seconds=${2:-8}
rounds=${3:-3}
object_size=${4:-8MiB}
case $object_size in
  [1-9]*MiB) ;;
  *) echo "OBJECT_SIZE is a number of MiB, as 8MiB or 16MiB: $object_size" >&2; exit 2 ;;
esac
# shellcheck disable=SC1091
. "$ceph_dir/env"
cairn=$PWD/target/release/cairn
[ -x "$cairn" ] || { echo "build first: cargo build --release" >&2; exit 1; }
for tool in fio qemu-nbd rbd python3; do
  command -v $tool >/dev/null || { echo "missing $tool" >&2; exit 1; }
done

work=$(mktemp -d)
prefix="bench/objects-vs-librbd-$$-$(date +%s)/"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.2; done; done
  rbd -c "$CAIRN_TEST_CEPH_CONF" rm "$CAIRN_TEST_CEPH_POOL/bench-nbd" >/dev/null 2>&1 || true
  rbd -c "$CAIRN_TEST_CEPH_CONF" rm "$CAIRN_TEST_CEPH_POOL/bench-fio" >/dev/null 2>&1 || true
  # Cairn's RADOS volume: its objects in the pool.
  if command -v rados >/dev/null; then
    rados -c "$CAIRN_TEST_CEPH_CONF" -p "$CAIRN_TEST_CEPH_POOL" ls 2>/dev/null |
      grep -F "$prefix" | while read -r o; do
        rados -c "$CAIRN_TEST_CEPH_CONF" -p "$CAIRN_TEST_CEPH_POOL" rm "$o" || true
      done || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

size=256M
rbd -c "$CAIRN_TEST_CEPH_CONF" create "$CAIRN_TEST_CEPH_POOL/bench-nbd" --size 256
rbd -c "$CAIRN_TEST_CEPH_CONF" create "$CAIRN_TEST_CEPH_POOL/bench-fio" --size 256

start_qemu_nbd() {
  rm -f "$work/qemu.sock"
  qemu-nbd --cache=writeback -f raw -k "$work/qemu.sock" --persistent \
    "rbd:$CAIRN_TEST_CEPH_POOL/bench-nbd:conf=$CAIRN_TEST_CEPH_CONF" >"$work/qemu.log" 2>&1 &
  qemu_pid=$!
  pids+=("$qemu_pid")
  while [ ! -S "$work/qemu.sock" ]; do sleep 0.1; done
}

# Cairn: the example specs, 256 MiB, a 256 MiB DRAM cache, in the test
# bucket (objects.toml) and in the test pool (objects-rados.toml).
sed -e "s|http://127.0.0.1:7480|$CAIRN_TEST_S3_ENDPOINT|" \
    -e "s|bucket = \"cairn\"|bucket = \"$CAIRN_TEST_S3_BUCKET\"|" \
    -e "s|data_dir = \"cairn-objects\"|data_dir = \"$work/data\"|" \
    -e "s|prefix = \"volumes/vm1/\"|prefix = \"$prefix\"|" \
    -e "s|size = \"16GiB\"|size = \"256MiB\"|" \
    -e "s|size = \"64MiB\"|size = \"256MiB\"|" \
    -e "s|object_size = \"8MiB\"|object_size = \"$object_size\"|" \
    examples/volumes/objects.toml >"$work/objects.toml"
sed -e "s|ceph_conf = \"/etc/ceph/ceph.conf\"|ceph_conf = \"$CAIRN_TEST_CEPH_CONF\"|" \
    -e "s|pool = \"cairn\"|pool = \"$CAIRN_TEST_CEPH_POOL\"|" \
    -e "s|data_dir = \"cairn-objects-rados\"|data_dir = \"$work/data-rados\"|" \
    -e "s|prefix = \"volumes/vm1/\"|prefix = \"$prefix\"|" \
    -e "s|size = \"16GiB\"|size = \"256MiB\"|" \
    -e "s|size = \"64MiB\"|size = \"256MiB\"|" \
    -e "s|object_size = \"8MiB\"|object_size = \"$object_size\"|" \
    examples/volumes/objects-rados.toml >"$work/objects-rados.toml"
export AWS_ACCESS_KEY_ID=$CAIRN_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CAIRN_TEST_S3_SECRET_KEY
start_cairn() {
  rm -f "$work/cairn.sock"
  "$cairn" serve --config "$work/objects.toml" --listen "unix:$work/cairn.sock" >/dev/null 2>>"$work/cairn.log" &
  cairn_pid=$!
  pids+=("$cairn_pid")
  while [ ! -S "$work/cairn.sock" ]; do sleep 0.1; done
}
start_cairn_rados() {
  rm -f "$work/rados.sock"
  "$cairn" serve --config "$work/objects-rados.toml" --listen "unix:$work/rados.sock" >/dev/null 2>>"$work/rados.log" &
  rados_pid=$!
  pids+=("$rados_pid")
  while [ ! -S "$work/rados.sock" ]; do
    kill -0 "$rados_pid" 2>/dev/null || { echo "cairn over RADOS did not start:" >&2; cat "$work/rados.log" >&2; exit 1; }
    sleep 0.1
  done
}
stop() { # PID: SIGTERM, wait until it is gone
  kill "$1"
  while kill -0 "$1" 2>/dev/null; do sleep 0.2; done
}

# One fio run: prints "IOPS MiB/s" of the side that moved.
run() { # ENGINE-ARGS... -- JOB-ARGS...
  local engine=() job=()
  while [ "$1" != -- ]; do engine+=("$1"); shift; done
  shift
  job=("$@")
  CEPH_CONF=$CAIRN_TEST_CEPH_CONF fio --name=bench "${engine[@]}" "${job[@]}" --iodepth=8 \
    --size=$size --time_based --runtime="$seconds" --output-format=json 2>/dev/null |
    sed -n '/^{/,$p' | python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
side = j["write"] if j["write"]["io_bytes"] > j["read"]["io_bytes"] else j["read"]
print("%.0f %.1f" % (side["iops"], side["bw_bytes"] / 2**20))'
}

start_qemu_nbd
start_cairn
start_cairn_rados
nbd_peer=(--ioengine=nbd "--uri=nbd+unix:///?socket=$work/qemu.sock")
rbd_peer=(--ioengine=rbd --clientname=admin "--pool=$CAIRN_TEST_CEPH_POOL" --rbdname=bench-fio)
ours=(--ioengine=nbd "--uri=nbd+unix:///vm1?socket=$work/cairn.sock")
ours_rados=(--ioengine=nbd "--uri=nbd+unix:///vm1?socket=$work/rados.sock")

# Ratios: each Cairn against each librbd peer (c: over RGW, r: over RADOS).
printf '%-22s %6s %12s %8s %8s %11s %9s %9s %9s %9s\n' row unit qemu-nbd+rbd fio-rbd cairn cairn-rados \
  c/qemu c/fio-rbd r/qemu r/fio-rbd
ratio() { python3 -c "print('%.2fx' % ($1 / max($2, 1e-9)))"; }
median() { python3 -c 'import sys; v = sorted(float(x) for x in sys.argv[1:]); print(v[len(v) // 2])' "$@"; }
# (row_rounds=1 for a row whose first run changes what the next one finds:
# after a restart, or cold.)
row() { # NAME UNIT(IOPS|MiB/s) JOB-ARGS...: the median of $rounds rounds, the sides in turn
  local name=$1 unit=$2 field=1 i
  shift 2
  [ "$unit" = MiB/s ] && field=2
  local as=() bs=() cs=() rs=() a b c r
  for ((i = 0; i < ${row_rounds:-$rounds}; i++)); do
    as+=("$(run "${nbd_peer[@]}" -- "$@" | cut -d' ' -f$field)")
    bs+=("$(run "${rbd_peer[@]}" -- "$@" | cut -d' ' -f$field)")
    cs+=("$(run "${ours[@]}" -- "$@" | cut -d' ' -f$field)")
    rs+=("$(run "${ours_rados[@]}" -- "$@" | cut -d' ' -f$field)")
  done
  a=$(median "${as[@]}") b=$(median "${bs[@]}") c=$(median "${cs[@]}") r=$(median "${rs[@]}")
  printf '%-22s %6s %12s %8s %8s %11s %9s %9s %9s %9s\n' "$name" "$unit" "$a" "$b" "$c" "$r" \
    "$(ratio "$c" "$a")" "$(ratio "$c" "$b")" "$(ratio "$r" "$a")" "$(ratio "$r" "$b")"
}
row "seq write 1M" MiB/s --rw=write --bs=1M
# What the OSD takes in new objects (Cairn writes every segment as a new
# object; librbd writes over the image's objects in place): rados bench at
# Cairn's object size (8 MiB by default), 8 in flight (its MB/sec are
# MiB/s); at most 1 GiB of them (unbounded, it writes ~6 GiB in 8 s here:
# the memstore OSD goes full and every side after it stops).
object_mib=${object_size%MiB}
ceiling=$(rados -c "$CAIRN_TEST_CEPH_CONF" -p "$CAIRN_TEST_CEPH_POOL" bench "$seconds" write -b "${object_mib}M" -t 8 \
  --max-objects $((1024 / object_mib)) \
  --run-name "${prefix}ceiling" 2>/dev/null | sed -n 's/^Bandwidth (MB\/sec): *//p')
rados -c "$CAIRN_TEST_CEPH_CONF" -p "$CAIRN_TEST_CEPH_POOL" cleanup --run-name "${prefix}ceiling" >/dev/null 2>&1 || true
printf '%-22s %6s %12s   (rados bench: new %s objects, 8 in flight)\n' "store: new objects" MiB/s "$ceiling" "$object_size"
row "rand write 4k fsync32" IOPS --rw=randwrite --bs=4k --fsync=32
row "seq read 1M" MiB/s --rw=read --bs=1M
row "rand read 4k warm" IOPS --rw=randread --bs=4k
# Restarted: every server stopped and started again (DRAM caches empty;
# Cairn's local segment caches kept, as after any restart).
stop "$cairn_pid"; stop "$rados_pid"; stop "$qemu_pid"
start_qemu_nbd
start_cairn
start_cairn_rados
row_rounds=1 row "rand read 4k restarted" IOPS --rw=randread --bs=4k
# Cold: Cairn's local segment caches removed too (a new host, or a lost
# disk): every read goes to the store, as librbd's do.
stop "$cairn_pid"; stop "$rados_pid"; stop "$qemu_pid"
rm -f "$work/data/objects.segcache" "$work/data-rados/objects.segcache"
start_qemu_nbd
start_cairn
start_cairn_rados
row_rounds=1 row "rand read 4k cold" IOPS --rw=randread --bs=4k
row_rounds=1 row "seq read 1M cold" MiB/s --rw=read --bs=1M
stop "$cairn_pid"; stop "$rados_pid"
# Each stop's report: what the writes cost the stores, where reads came from.
grep -h "write amplification" "$work/cairn.log" | sed 's/^.*device/cairn (RGW):   device/'
grep -h "write amplification" "$work/rados.log" | sed 's/^.*device/cairn (RADOS): device/'
