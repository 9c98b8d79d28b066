#!/usr/bin/env bash
# Runs, exactly as printed, the `--help` examples that take minutes each
# (full-scale reproductions and benchmarks) and the one that signals every
# `cairn serve` on the machine: too long, or too wide, for ./test.sh.
# crates/cairn/tests/cli_every_help_example.rs checks that every example of
# every `--help` is run somewhere: by a test, or here (each line of LONG,
# verbatim). Each runs by bash in one scratch directory holding what the
# examples name (my.toml and the other specs, a running server for kill -HUP);
# an example passes when it exits 0. `--s3 test` needs the test cluster: one is
# started (bench/ceph-cluster.sh) unless CAIRN_TEST_S3_ENDPOINT is set.
#
# Usage: bench/help-examples.sh [TEXT]   only the examples containing TEXT
#        (about 40 minutes for all of them on 2 cores)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
only=${1:-}

LONG=(
  'cairn reproduce all'
  'cairn reproduce logdisk'
  'cairn reproduce logdisk --spec my.toml --out /tmp/ld'
  'cairn reproduce ntl'
  'cairn reproduce ntl --skip-ext4'
  'cairn reproduce ntl --spec my.toml --out /tmp/ntl'
  'cairn bench objects'
  'cairn bench objects --part wa --wa-size 64MiB --turnover 2'
  'cairn bench objects --part size --object-sizes 4MiB,8MiB --random-bytes 16MiB'
  'cairn bench objects --part size --s3 test --json'
  'cairn bench files'
  'cairn bench files --readers 8 --seconds 1 --policies ons,lru'
  'cairn bench files --readers 40 --policies ons,lfu,lru --rounds 8'
  'cairn bench files --workload table1 --throttle 2ms,100MB/s'
  'cairn bench files --workload restart --readers 10,40'
  'cairn bench files --readers 40 --policies ons --cache 64MiB --spill 64MiB'
  'cairn bench tier'
  'cairn bench tier --part warm,scan,dram'
  'cairn bench tier --part warm --cache-size 64MiB --replay 4'
  'cairn bench tier --part clean --cache-size 64MiB --clean-seconds 10'
  'cairn bench tier --part dram --dram-size 256MiB'
  'cairn bench tier --part fio --cache-size 64MiB --seconds 5 --rounds 3'
  'cairn bench tier --part fio --cache-size 16MiB --seconds 2 --warmup 4 --dir /var/tmp'
  'cairn serve --config examples/volumes/tiered.toml --listen tcp:127.0.0.1:10809'
  "kill -HUP \$(pgrep -f 'cairn serve')"
)

cd "$root"
cargo build --release --locked -p cairn
export PATH=$root/target/release:$PATH
scratch=$(mktemp -d)
# The example as a file of its own: run by `bash -c`, its command line would
# hold the example's text, which `pgrep -f 'cairn serve'` matches.
script=$(mktemp)
log=$(mktemp)
ceph_dir=
cleanup() {
  [ -z "$ceph_dir" ] || { bench/ceph-cluster.sh stop "$ceph_dir" || true; rm -rf "$ceph_dir"; }
  rm -rf "$scratch" "$script" "$log"
}
trap cleanup EXIT

failed=0
ran=0
for example in "${LONG[@]}"; do
  [[ -z $only || $example == *"$only"* ]] || continue
  rm -rf "${scratch:?}"/*
  # What the examples name: `--spec my.toml`, a copy of the reproduction's
  # own spec (logdisk's or ntl's, by the command), as a user starts one.
  case $example in
    *"logdisk --spec"*) cp reproduce/logdisk.toml "$scratch/my.toml" ;;
    *"ntl --spec"*) cp reproduce/ntl.toml "$scratch/my.toml" ;;
  esac
  if [[ $example == *"--s3 test"* && -z ${CAIRN_TEST_S3_ENDPOINT:-} && -z $ceph_dir ]]; then
    ceph_dir=$(mktemp -d)
    bench/ceph-cluster.sh start "$ceph_dir"
    # shellcheck disable=SC1091 # written by the start above
    . "$ceph_dir/env"
  fi
  server=
  if [[ $example == kill* ]]; then
    # A server for it to signal: SIGHUP reloads, so it must still serve.
    (cd "$scratch" && exec cairn serve --memory 64MiB >/dev/null 2>serve.log) &
    server=$!
    for _ in $(seq 200); do [ -S "$scratch/cairn-data/cairn.ctl" ] && break; sleep 0.05; done
  fi
  start=$(date +%s)
  status=0
  printf '%s\n' "$example" >"$script"
  if [[ $example == "cairn serve"* ]]; then
    # A server: it passes when nbdinfo lists its exports at the port it
    # names, then stops on SIGTERM with status 0. Its first start formats
    # the spec's devices.
    cp -r examples "$scratch/"
    # bash -c runs a lone command in its own process: the signal reaches it.
    (cd "$scratch" && exec bash -c "$example") >"$log" 2>&1 &
    server=$!
    port=${example##*:}
    for _ in $(seq 600); do
      nbdinfo --list "nbd://127.0.0.1:$port" >>"$log" 2>&1 && break
      kill -0 $server 2>/dev/null || break
      sleep 0.5
    done
    nbdinfo --list "nbd://127.0.0.1:$port" >>"$log" 2>&1 || status=1
    kill -TERM $server 2>/dev/null || true
    wait $server || status=$?
    server=
  else
    (cd "$scratch" && bash "$script") >"$log" 2>&1 || status=$?
  fi
  seconds=$(($(date +%s) - start))
  if [ -n "$server" ]; then
    sleep 0.5
    if ! kill -0 "$server" 2>/dev/null || ! grep -q SIGHUP "$scratch/serve.log" ||
      ! cairn stats --socket "$scratch/cairn-data/cairn.ctl" >/dev/null; then
      status=1
      cat "$scratch/serve.log" >>"$log"
    fi
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" || status=1
  fi
  ran=$((ran + 1))
  if [ $status = 0 ]; then
    printf 'ok    %5ss  %s\n' "$seconds" "$example"
  else
    printf 'FAIL  %5ss  %s (exit %s); its output:\n' "$seconds" "$example" "$status"
    tail -20 "$log" | sed 's/^/      /'
    failed=$((failed + 1))
  fi
done
echo "help-examples: $ran run, $failed failed"
[ $failed = 0 ]
