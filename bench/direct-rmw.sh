#!/usr/bin/env bash
# A file opened O_DIRECT exported with nothing above it to align clients'
# requests (or under a DRAM cache alone): Cairn bounces what is not whole
# 4 KiB blocks and turns a write of part of a block into a locked
# read-modify-write (crates/cairn-store/src/device/align.rs). The peer does
# the same: qemu-nbd --cache=none (O_DIRECT, its block layer's request
# alignment and serialising read-modify-write). Same file, same fio loads,
# the servers alternated, same run.
#
# Usage: bench/direct-rmw.sh [ROUNDS] [DIR]   (ROUNDS default 2; DIR default
#        /var/tmp/cairn-rmw, on a file system that takes O_DIRECT;
#        CAIRN=path/to/cairn, default target/release/cairn; SECONDS_EACH=10)
#
# Servers, each over DIR/disk.img (1 GiB, written whole once so that no
# write allocates):
#   cairn   `cairn serve --config direct.toml`: one export, the file with
#           `direct = true` (the AligningDevice over it);
#   cached  the same under a 256 MiB DRAM cache of 4 KiB blocks (`kind =
#           "cache"`; a quarter of the disk, so a uniform read hits 1 in 4);
#   qemu    `qemu-nbd --cache=none --aio=threads -f raw`.
# Loads, fio's nbd engine, 1 job, iodepth 16, SECONDS_EACH seconds each,
# uniformly random over the whole disk:
#   w4k  4 KiB writes (aligned)     w512  512 B writes (7 in 8 part of a block)
#   r4k  4 KiB reads (aligned)      r512  512 B reads
# Prints IOPS per load and server, one line per round, then each server's
# median over qemu-nbd's median. Needs fio (with its nbd engine) and qemu-nbd.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cairn=$(realpath "${CAIRN:-$root/target/release/cairn}")
rounds=${1:-2}
dir=${2:-/var/tmp/cairn-rmw}
each=${SECONDS_EACH:-10}
command -v fio > /dev/null && command -v qemu-nbd > /dev/null ||
  { echo "needs fio and qemu-nbd (apt-get install fio qemu-utils)"; exit 1; }
mkdir -p "$dir/data"
cd "$dir"
sock=$dir/nbd.sock
uri="nbd+unix:///e?socket=$sock"
[ "$(stat -c %s data/disk.img 2>/dev/null || echo 0)" = 1073741824 ] ||
  dd if=/dev/urandom of=data/disk.img bs=1M count=1024 status=none conv=fsync
for stack in direct cached; do
  {
    echo "data_dir = \"data\""
    echo "listen = \"unix:$sock\""
    echo "[[export]]"
    echo "name = \"e\""
    if [ $stack = cached ]; then
      echo "device = \"c\""
      printf '[device.c]\nkind = "cache"\nover = "f"\nsize = "256MiB"\nblock_size = "4KiB"\n'
    else
      echo "device = \"f\""
    fi
    printf '[device.f]\nkind = "file"\npath = "disk.img"\ndirect = true\n'
  } > $stack.toml
done

start() {
  rm -f "$sock"
  case $1 in
    cairn) "$cairn" serve -q --no-control --config direct.toml > server.log 2>&1 & ;;
    cached) "$cairn" serve -q --no-control --config cached.toml > server.log 2>&1 & ;;
    qemu) qemu-nbd -t -f raw --cache=none --aio=threads -x e -k "$sock" data/disk.img \
      > server.log 2>&1 & ;;
  esac
  pid=$!
  for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null || { echo "$1 did not start:"; tail -5 server.log; exit 1; }
}
stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
trap 'stop 2>/dev/null || true' EXIT

load() { # NAME RW BS -> IOPS
  fio --name="$1" --ioengine=nbd --uri="$uri" --rw="$2" --bs="$3" --iodepth=16 \
    --size=1g --time_based --runtime="$each" --randrepeat=0 --output-format=json \
    2> fio.err | python3 -c "
import json, sys
out = sys.stdin.read()  # the nbd engine prints a line before the JSON
j = json.loads(out[out.index('{'):])['jobs'][0]
print(round(j['write']['iops'] + j['read']['iops']))"
}

loads=(w4k:randwrite:4k w512:randwrite:512 r4k:randread:4k r512:randread:512)
declare -A got
printf '%-7s %5s' server round
for l in "${loads[@]}"; do printf ' %9s' "${l%%:*}"; done
echo '   (IOPS)'
for round in $(seq "$rounds"); do
  for server in cairn cached qemu; do
    start $server
    printf '%-7s %5s' $server "$round"
    for l in "${loads[@]}"; do
      IFS=: read -r name rw bs <<< "$l"
      iops=$(load "$name" "$rw" "$bs")
      got[$server.$name]="${got[$server.$name]:-} $iops"
      printf ' %9s' "$iops"
    done
    echo
    stop
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
for server in cairn cached; do
  printf '%-7s %5s' $server '÷qemu'
  for l in "${loads[@]}"; do
    name=${l%%:*}
    ours=$(echo "${got[$server.$name]}" | median)
    peer=$(echo "${got[qemu.$name]}" | median)
    printf ' %9s' "$(python3 -c "print(f'{$ours / $peer:.2f}')")"
  done
  echo
done
