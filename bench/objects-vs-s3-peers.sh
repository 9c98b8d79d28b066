#!/usr/bin/env bash
# Cairn's object volume (kind = "objects" over RGW) against the two S3 block
# devices issue 24 names as peers, on the same single-node Ceph and the same
# RGW bucket, each side under its own key prefix, through fio:
#   s3b-wb    s3backer (FUSE), its block cache write-back (its default): a
#             write or an fsync returns before the block is in the store.
#   s3b-sync  s3backer with --blockCacheSync: a write returns once its block
#             is in the store (the only s3backer 1.5 mode whose fsync is
#             durable in the store).
#   nbdkit-S3 nbdkit's S3 plugin (Python, boto3): every write is a PUT (after
#             a GET for a partial object), FLUSH is a no-op.
#   cairn     the example objects.toml, flush = "local": a FLUSH is durable
#             in the local write log, segments go to the store behind it.
#   cairn-remote  the same with flush = "remote": a FLUSH returns once what
#             it covers is in the store (as s3b-sync and nbdkit-S3).
# fio runs on s3backer's file (libaio, O_DIRECT, the mount --directIO) and on
# the NBD exports of nbdkit and Cairn (fio's nbd engine, one connection).
# Each side runs all rows, then its objects are deleted before the next side
# starts (the memstore OSD is RAM); the table prints the ratios of Cairn to
# each peer: c/… for cairn, r/… for cairn-remote.
#
# Usage: bench/objects-vs-s3-peers.sh CEPH_DIR [SECONDS]
#   CEPH_DIR: a cluster from bench/ceph-cluster.sh:
#     CAIRN_CEPH_MEMSTORE_MIB=3072 bench/ceph-cluster.sh start /tmp/ceph-s3
#   (the cluster's radosgw frees deleted objects' data within 2-4 s; Cairn's
#   sequential write row PUTs 2-3 GB of segments in 8 s and deletes most of
#   them, so a cluster started before that setting fills up: restart it.)
#   SECONDS: per row (default 8).
# Needs fio (nbd engine), s3backer (and /dev/fuse, fusermount), nbdkit with
# its S3 plugin (python3-boto3), and a release build (cargo build --release).
# Everything each side wrote to the bucket is deleted at the end (on exit
# too), and s3backer is unmounted.
set -euo pipefail
cd "$(dirname "$0")/.."

ceph_dir=${1:?usage: bench/objects-vs-s3-peers.sh CEPH_DIR [SECONDS]}
seconds=${2:-8}
# shellcheck disable=SC1091
. "$ceph_dir/env"
cairn=$PWD/target/release/cairn
[ -x "$cairn" ] || { echo "build first: cargo build --release" >&2; exit 1; }
for tool in fio s3backer fusermount nbdkit python3; do
  command -v $tool >/dev/null || { echo "missing $tool" >&2; exit 1; }
done
python3 -c 'import boto3' 2>/dev/null || { echo "missing python3-boto3" >&2; exit 1; }

work=$(mktemp -d)
run_id="$$-$(date +%s)"
root="bench/objects-vs-s3-peers-$run_id"
size=256M
export AWS_ACCESS_KEY_ID=$CAIRN_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CAIRN_TEST_S3_SECRET_KEY

# Delete every object under "$root/" (all sides' prefixes) with boto3.
delete_objects() {
  python3 - "$CAIRN_TEST_S3_ENDPOINT" "$CAIRN_TEST_S3_BUCKET" "$root/" <<'EOF'
import sys, boto3
endpoint, bucket, prefix = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
n = 0
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
    keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
    if keys:
        s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        n += len(keys)
print("deleted %d objects under %s" % (n, prefix), file=sys.stderr)
EOF
}

pids=()
cleanup() {
  for m in "$work"/mnt-*; do
    if [ -d "$m" ]; then fusermount -u "$m" 2>/dev/null || true; fi
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$p" 2>/dev/null || true
  done
  delete_objects 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

stop() { # PID: SIGTERM, wait until it is gone (at most 60 s, then SIGKILL)
  kill "$1" 2>/dev/null || true
  for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.2; done
  kill -9 "$1" 2>/dev/null || true
}

# s3backer: 256 KiB blocks (s3backer's own objects, one per block), a block
# cache of 1024 blocks (256 MiB, as Cairn's DRAM cache), --directIO (no
# kernel page cache above it, as NBD has none). Path-style requests against
# --baseURL: no --region (it would switch to virtual-host style), the
# default aws4 signing. No --listBlocks (it lists the prefix at every mount).
printf '%s:%s\n' "$CAIRN_TEST_S3_ACCESS_KEY" "$CAIRN_TEST_S3_SECRET_KEY" >"$work/s3backer.passwd"
chmod 600 "$work/s3backer.passwd"
s3backer_opts=(--quiet --baseURL="$CAIRN_TEST_S3_ENDPOINT/" --accessFile="$work/s3backer.passwd"
  "--size=$size" --blockSize=256K --blockCacheSize=1024 --directIO)
# The durable mode: every write waits for its PUT. s3backer's MD5 cache
# (a guard against eventually consistent stores, which RGW is not) delays a
# second write of a block by --minWriteDelay (500 ms); with synchronous
# writes that measured 0.3 MiB/s, so it is off here.
s3backer_sync_opts=(--blockCacheSync --blockCacheWriteDelay=0 --md5CacheSize=0 --md5CacheTime=0 --minWriteDelay=0)
declare -A s3b_pid
mount_s3backer() { # NAME (wb|sync)
  local name=$1 extra=()
  [ "$name" = sync ] && extra=("${s3backer_sync_opts[@]}")
  mkdir -p "$work/mnt-$name"
  s3backer -f "${s3backer_opts[@]}" "${extra[@]}" --prefix="$root/s3backer-$name/" \
    "$CAIRN_TEST_S3_BUCKET" "$work/mnt-$name" >>"$work/s3backer-$name.log" 2>&1 &
  s3b_pid[$name]=$!
  pids+=("${s3b_pid[$name]}")
  until grep -qF " $work/mnt-$name fuse" /proc/mounts; do
    kill -0 "${s3b_pid[$name]}" 2>/dev/null ||
      { echo "s3backer ($name) did not mount:" >&2; cat "$work/s3backer-$name.log" >&2; exit 1; }
    sleep 0.1
  done
}
# Unmount and wait for s3backer to exit (it writes its dirty blocks first).
umount_s3backer() { # NAME
  fusermount -u "$work/mnt-$1"
  while kill -0 "${s3b_pid[$1]}" 2>/dev/null; do sleep 0.2; done
}

# nbdkit's S3 plugin: 64 KiB objects, the largest it can serve (it
# advertises object-size as its minimum block size, and nbdkit refuses a
# minimum above 64 KiB); --filter=blocksize lets a client send 4 KiB
# requests (the filter reads and rewrites the 64 KiB object around them),
# as its manual suggests. One connection, the plugin's own (parallel)
# thread model, nbdkit's default 16 threads. Keys from the environment.
start_nbdkit() {
  rm -f "$work/nbdkit.sock"
  nbdkit -f -U "$work/nbdkit.sock" --filter=blocksize S3 \
    endpoint-url="$CAIRN_TEST_S3_ENDPOINT" bucket="$CAIRN_TEST_S3_BUCKET" \
    key="$root/nbdkit" size=$size object-size=64k >>"$work/nbdkit.log" 2>&1 &
  nbdkit_pid=$!
  pids+=("$nbdkit_pid")
  while [ ! -S "$work/nbdkit.sock" ]; do
    kill -0 "$nbdkit_pid" 2>/dev/null || { echo "nbdkit did not start:" >&2; cat "$work/nbdkit.log" >&2; exit 1; }
    sleep 0.1
  done
}

# Cairn: the example spec at 256 MiB with a 256 MiB DRAM cache (as
# bench/objects-vs-librbd.sh edits it), and the same with flush = "remote".
cairn_spec() { # NAME FLUSH
  sed -e "s|http://127.0.0.1:7480|$CAIRN_TEST_S3_ENDPOINT|" \
      -e "s|bucket = \"cairn\"|bucket = \"$CAIRN_TEST_S3_BUCKET\"|" \
      -e "s|data_dir = \"cairn-objects\"|data_dir = \"$work/data-$1\"|" \
      -e "s|prefix = \"volumes/vm1/\"|prefix = \"$root/$1/\"|" \
      -e "s|size = \"16GiB\"|size = \"256MiB\"|" \
      -e "s|size = \"64MiB\"|size = \"256MiB\"|" \
      -e "s|flush = \"local\"|flush = \"$2\"|" \
      examples/volumes/objects.toml >"$work/$1.toml"
  grep -q "^flush = \"$2\"" "$work/$1.toml" || { echo "could not set flush = $2" >&2; exit 1; }
}
cairn_spec cairn local
cairn_spec cairn-remote remote
declare -A cairn_pid
start_cairn() { # NAME
  rm -f "$work/$1.sock"
  "$cairn" serve --config "$work/$1.toml" --listen "unix:$work/$1.sock" >/dev/null 2>>"$work/$1.log" &
  cairn_pid[$1]=$!
  pids+=("${cairn_pid[$1]}")
  while [ ! -S "$work/$1.sock" ]; do
    kill -0 "${cairn_pid[$1]}" 2>/dev/null || { echo "cairn ($1) did not start:" >&2; cat "$work/$1.log" >&2; exit 1; }
    sleep 0.1
  done
}

# One fio run: prints "IOPS MiB/s" of the side that moved ("0 0" if fio
# failed, or hung for a minute past its runtime: a full OSD blocks writes;
# its error is in $work/fio.err).
run() { # ENGINE-ARGS... -- JOB-ARGS...
  local engine=() job=()
  while [ "$1" != -- ]; do engine+=("$1"); shift; done
  shift
  job=("$@")
  timeout -k 5 $((seconds + 60)) fio --name=bench "${engine[@]}" "${job[@]}" --iodepth=8 \
    --size=$size --time_based --runtime="$seconds" --output-format=json 2>>"$work/fio.err" |
    sed -n '/^{/,$p' | python3 -c '
import json, sys
try:
    j = json.load(sys.stdin)["jobs"][0]
except Exception:
    print("0 0"); sys.exit()
side = j["write"] if j["write"]["io_bytes"] > j["read"]["io_bytes"] else j["read"]
print("%.0f %.1f" % (side["iops"], side["bw_bytes"] / 2**20))'
}

s3b_wb=(--ioengine=libaio --direct=1 "--filename=$work/mnt-wb/file")
s3b_sync=(--ioengine=libaio --direct=1 "--filename=$work/mnt-sync/file")
nbdkit_s3=(--ioengine=nbd "--uri=nbd+unix:///?socket=$work/nbdkit.sock")
ours=(--ioengine=nbd "--uri=nbd+unix:///vm1?socket=$work/cairn.sock")
ours_remote=(--ioengine=nbd "--uri=nbd+unix:///vm1?socket=$work/cairn-remote.sock")

rows=("seq write 1M|MiB/s|--rw=write --bs=1M"
      "rand write 4k fsync32|IOPS|--rw=randwrite --bs=4k --fsync=32"
      "seq read 1M|MiB/s|--rw=read --bs=1M"
      "rand read 4k warm|IOPS|--rw=randread --bs=4k"
      "rand read 4k cold|IOPS|--rw=randread --bs=4k")
declare -A result
# One side at a time (start, the warm rows, restart cold, the cold row, stop,
# delete its objects): the memstore OSD is RAM, and a Cairn sequential write
# row alone PUTs 2-3 GB of segments in 8 s; with every side's volume live at
# once a 3 GiB OSD filled and stopped taking writes.
side() { # NAME START STOP COLD ENGINE-ARGS...
  local name=$1 start=$2 stop_=$3 cold=$4 i spec label unit field
  shift 4
  $start
  for i in 0 1 2 3 4; do
    IFS='|' read -r label unit spec <<<"${rows[$i]}"
    if [ "$i" = 4 ]; then $stop_; $cold; $start; fi
    field=1
    [ "$unit" = MiB/s ] && field=2
    # shellcheck disable=SC2086
    result[$name,$i]=$(run "$@" -- $spec | cut -d' ' -f$field)
  done
  $stop_
  delete_objects
  sleep 5 # radosgw's garbage collection (bench/ceph-cluster.sh: after 30 s; see below)
}
# Cold: s3backer unmounted (its dirty blocks written first) and mounted
# again, nbdkit restarted (it caches nothing), Cairn stopped, its local
# segment cache file removed, started again: every read starts from the store.
none() { :; }
s3b_wb_start() { mount_s3backer wb; }
s3b_wb_stop() { umount_s3backer wb; }
s3b_sync_start() { mount_s3backer sync; }
s3b_sync_stop() { umount_s3backer sync; }
nbdkit_stop() { stop "$nbdkit_pid"; }
cairn_start() { start_cairn cairn; }
cairn_stop() { stop "${cairn_pid[cairn]}"; }
cairn_cold() { rm -f "$work/data-cairn/objects.segcache"; }
remote_start() { start_cairn cairn-remote; }
remote_stop() { stop "${cairn_pid[cairn-remote]}"; }
remote_cold() { rm -f "$work/data-cairn-remote/objects.segcache"; }
side s3b-wb s3b_wb_start s3b_wb_stop none "${s3b_wb[@]}"
side s3b-sync s3b_sync_start s3b_sync_stop none "${s3b_sync[@]}"
side nbdkit start_nbdkit nbdkit_stop none "${nbdkit_s3[@]}"
side cairn cairn_start cairn_stop cairn_cold "${ours[@]}"
side cairn-remote remote_start remote_stop remote_cold "${ours_remote[@]}"

fmt='%-22s %6s %8s %8s %9s %8s %12s %9s %10s %9s %10s %10s\n'
# shellcheck disable=SC2059
printf "$fmt" row unit s3b-wb s3b-sync nbdkit-S3 cairn cairn-remote \
  c/s3b-wb c/s3b-sync c/nbdkit r/s3b-sync r/nbdkit
ratio() { python3 -c "print('%.2fx' % ($1 / max($2, 1e-9)))"; }
for i in 0 1 2 3 4; do
  IFS='|' read -r label unit _ <<<"${rows[$i]}"
  a=${result[s3b-wb,$i]} b=${result[s3b-sync,$i]} n=${result[nbdkit,$i]}
  c=${result[cairn,$i]} r=${result[cairn-remote,$i]}
  # shellcheck disable=SC2059
  printf "$fmt" "$label" "$unit" "$a" "$b" "$n" "$c" "$r" \
    "$(ratio "$c" "$a")" "$(ratio "$c" "$b")" "$(ratio "$c" "$n")" "$(ratio "$r" "$b")" "$(ratio "$r" "$n")"
done
# Each Cairn's stop report: what the writes cost the store.
for s in cairn cairn-remote; do
  grep -h "write amplification" "$work/$s.log" | sed "s/^.*device/$s: device/" || true
done
if [ -s "$work/fio.err" ]; then
  echo "fio reported errors:" >&2
  sort "$work/fio.err" | uniq -c | sort -rn | head -5 >&2
fi
