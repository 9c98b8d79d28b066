#!/usr/bin/env bash
# Time to listen: how long `cairn serve --config examples/volumes/tiered.toml`
# takes until `nbdinfo --list` answers, at its first start (the format), after
# a crash and after a clean stop; one or more binaries, alternated, in one run.
#
# Usage: bench/time-to-listen.sh [RUNS] [BINARY ...]
#        (RUNS: default 2; BINARY: default target/release/cairn;
#         DIR=..., default /var/tmp/cairn-ttl; PORT=..., default 10809)
#
# Per binary and run, in a fresh data directory: start and time (first);
# write 256 MiB (`qemu-io write -P 0x5a 1M 256M`, flush), SIGKILL, start and
# time (crash); read the 256 MiB back and check the pattern; SIGTERM, start
# and time (clean). One line each:
#   BINARY run N: first S s, crash S s (its recovery line), clean S s, read back ok|FAILED
# Needs qemu-io and nbdinfo.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-2}
shift || true
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=("$root/target/release/cairn")
dir=${DIR:-/var/tmp/cairn-ttl}
port=${PORT:-10809}
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true; }
trap cleanup EXIT

# Starts the server (log to $1.log) and sets `pid` and `took` (seconds).
listen() {
  local t0 t1
  t0=$(date +%s.%N)
  "$bin" serve --config tiered.toml --listen "tcp:127.0.0.1:$port" >"$1.log" 2>&1 &
  pid=$!
  until nbdinfo --list "nbd://127.0.0.1:$port" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { echo "the server exited:" >&2; cat "$1.log" >&2; exit 1; }
    sleep 0.05
  done
  t1=$(date +%s.%N)
  took=$(echo "$t1 - $t0" | bc)
}

stop() { kill "-$1" "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

for run in $(seq "$runs"); do
  for bin in "${bins[@]}"; do
    bin=$(realpath "$bin")
    work="$dir/run$run-$(basename "$bin")"
    rm -rf "$work" && mkdir -p "$work" && cd "$work"
    cp "$root/examples/volumes/tiered.toml" .
    listen first; first=$took
    qemu-io -f raw -c 'write -P 0x5a 1M 256M' -c flush "nbd://127.0.0.1:$port/tiered" >/dev/null
    stop 9
    listen crash; crash=$took
    if qemu-io -f raw -c 'read -P 0x5a 1M 256M' "nbd://127.0.0.1:$port/tiered" | grep -q 'read 268435456'; then
      back=ok
    else
      back=FAILED
    fi
    stop TERM
    listen clean; clean=$took
    stop TERM
    recovery=$(grep -o 'recovered after an unclean stop: [0-9]* of [0-9]* segments read' crash.log | head -1 || true)
    echo "$bin run $run: first $first s, crash $crash s ($recovery), clean $clean s, read back $back"
    cd "$dir" && rm -rf "$work"
  done
done
