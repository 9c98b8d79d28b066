#!/usr/bin/env bash
# What a cache device read through the page cache costs in memory, and what
# O_DIRECT costs in speed: the file gateway's spill and a volume's tier, each
# buffered and then O_DIRECT, beside a peer that caches on a file through the
# page cache, same binary, same run.
#
# Usage: bench/direct-page-cache.sh [DIR]     (DIR: default /var/tmp/cairn-direct;
#        CAIRN=path/to/cairn, default target/release/cairn)
#
# 1. Spill: `cairn serve --files DIR/files --cache-size 64MiB --spill spill.img
#    --spill-size 256MiB [--spill-direct]` over 4 files of 32 MiB of random
#    bytes, and nginx (proxy_cache, max_size 256m, slice 1m, in front of an
#    nginx serving the same directory); each file read twice whole with curl
#    and compared with the file; then the bytes of the cache's files in the
#    page cache (fincore) and the RSS (nginx: every process's).
# 2. Tier: examples/volumes/tier.toml (32 MiB DRAM cache, 256 MiB cache
#    device, write-back, HDD throttled), with and without `direct = true` on
#    the cache device, and nbdkit's cache filter (cache=writeback, over its
#    delay filter, 8 ms a request, over the file plugin); fio's nbd engine
#    writes 192 MiB in 64 KiB random writes, then 2 jobs x iodepth 16 of 4 KiB
#    random reads for 10 s; then the read IOPS, the cache file's bytes in the
#    page cache, and Cairn's tier hit ratio.
# DIR must be on a file system that takes O_DIRECT (tmpfs does from Linux 6.6).
# Needs curl, fio (with its nbd engine), nbdinfo, fincore (util-linux), nginx
# and nbdkit; a missing peer's row is skipped.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cairn=$(realpath "${CAIRN:-$root/target/release/cairn}")
dir=${1:-/var/tmp/cairn-direct}
mkdir -p "$dir/files"
cd "$dir"
for i in 0 1 2 3; do
  [ -s "files/f$i" ] || head -c 32M /dev/urandom > "files/f$i"
done
port=18090
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
up() { kill -0 "$1" 2>/dev/null || { echo "the server stopped:"; tail -5 "$2"; exit 1; }; }

echo "spill           spill file in the page cache   RSS"
for mode in buffered direct; do
  rm -f spill.img spill.img.map
  flag=(); [ "$mode" = direct ] && flag=(--spill-direct)
  "$cairn" serve --files ./files --export media --listen "tcp:127.0.0.1:$port" \
    --cache-size 64MiB --spill spill.img --spill-size 256MiB "${flag[@]}" > spill.log 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    curl -sf -o /dev/null -r 0-0 "http://127.0.0.1:$port/media/f0" && break; sleep 0.1
  done
  up "$pid" spill.log
  for _ in 1 2; do for i in 0 1 2 3; do
    curl -sf "http://127.0.0.1:$port/media/f$i" | cmp -s - "files/f$i" || { echo "f$i differs"; exit 1; }
  done; done
  printf '%-15s %12s B                %8s KiB\n' "$mode" \
    "$(fincore --bytes --noheadings spill.img | awk '{print $1}')" "$(ps -o rss= -p "$pid")"
  stop "$pid"
done

if command -v nginx > /dev/null; then
  rm -rf nginx && mkdir -p nginx
  cat > nginx/nginx.conf <<CONF
daemon off; master_process on; worker_processes 2; pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/nginx/body; proxy_temp_path $dir/nginx/proxy;
  fastcgi_temp_path $dir/nginx/fcgi; uwsgi_temp_path $dir/nginx/uwsgi; scgi_temp_path $dir/nginx/scgi;
  proxy_cache_path $dir/nginx/cache levels=1:2 keys_zone=files:16m max_size=256m inactive=1h use_temp_path=off;
  server { listen 127.0.0.1:$((port + 1)); root $dir/files; }
  server {
    listen 127.0.0.1:$port;
    location / {
      slice 1m;
      proxy_cache files;
      proxy_cache_key \$uri\$slice_range;
      proxy_set_header Range \$slice_range;
      proxy_cache_valid 200 206 1h;
      proxy_cache_lock on;
      proxy_http_version 1.1;
      proxy_pass http://127.0.0.1:$((port + 1));
    }
  }
}
CONF
  nginx -p "$dir/nginx" -c "$dir/nginx/nginx.conf" > nginx/out.log 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    curl -sf -o /dev/null -r 0-0 "http://127.0.0.1:$port/f0" && break; sleep 0.1
  done
  up "$pid" nginx/error.log
  for _ in 1 2; do for i in 0 1 2 3; do
    curl -sf "http://127.0.0.1:$port/f$i" | cmp -s - "files/f$i" || { echo "nginx f$i differs"; exit 1; }
  done; done
  cached=$(find nginx/cache -type f -exec fincore --bytes --noheadings {} + | awk '{s += $1} END {print s + 0}')
  rss=$(ps -o rss= --ppid "$pid" | awk -v m="$(ps -o rss= -p "$pid")" '{s += $1} END {print s + m}')
  printf '%-15s %12s B                %8s KiB\n' "nginx" "$cached" "$rss"
  stop "$pid"
fi

# The tier's load on the NBD export at $1: 192 MiB in 64 KiB random writes,
# then 2 jobs x iodepth 16 of 4 KiB random reads for 10 s, in fio.out.
fio_load() {
  fio --name=w --ioengine=nbd --uri="$1" --rw=randwrite --bs=64k --size=192M --iodepth=8 \
    --end_fsync=1 > /dev/null
  fio --name=r --ioengine=nbd --uri="$1" --rw=randread --bs=4k --size=192M --iodepth=16 \
    --time_based --runtime=10 --numjobs=2 --group_reporting > fio.out
}

echo "tier cache      read IOPS   page cache bytes   tier hit ratio"
for mode in buffered direct; do
  rm -rf cairn-tier
  if [ "$mode" = direct ]; then
    sed 's/size = "256MiB"/size = "256MiB"\ndirect = true/' "$root/examples/volumes/tier.toml" > tier.toml
  else
    cp "$root/examples/volumes/tier.toml" tier.toml
  fi
  "$cairn" serve --config tier.toml --listen "tcp:127.0.0.1:$port" > tier.log 2>&1 &
  pid=$!
  for _ in $(seq 100); do nbdinfo --list "nbd://127.0.0.1:$port" > /dev/null 2>&1 && break; sleep 0.1; done
  up "$pid" tier.log
  uri="nbd://127.0.0.1:$port/tier"
  fio_load "$uri"
  printf '%-15s %9s   %16s   %s\n' "$mode" \
    "$(grep -oE 'IOPS=[0-9.]+k?' fio.out | head -1 | cut -d= -f2)" \
    "$(fincore --bytes --noheadings cairn-tier/ssd.img | awk '{print $1}')" \
    "$("$cairn" stats --socket cairn-tier/cairn.ctl | grep -oE 'hit_ratio [0-9.]+' | tail -1 | cut -d' ' -f2)"
  stop "$pid"
done

if command -v nbdkit > /dev/null; then
  rm -f hdd.img && truncate -s 2G hdd.img
  nbdkit -f -i 127.0.0.1 -p "$port" --filter=cache --filter=delay file hdd.img \
    cache=writeback delay-read=8ms delay-write=8ms > nbdkit.log 2>&1 &
  pid=$!
  for _ in $(seq 100); do nbdinfo "nbd://127.0.0.1:$port" > /dev/null 2>&1 && break; sleep 0.1; done
  up "$pid" nbdkit.log
  uri="nbd://127.0.0.1:$port"
  fio_load "$uri"
  # The cache filter's file is unlinked at start: read it through the fd.
  fd=$(find "/proc/$pid/fd" -lname '*(deleted)' | head -1)
  printf '%-15s %9s   %16s   %s\n' "nbdkit cache" \
    "$(grep -oE 'IOPS=[0-9.]+k?' fio.out | head -1 | cut -d= -f2)" \
    "$(fincore --bytes --noheadings "$fd" | awk '{print $1}')" "-"
  stop "$pid"
fi
