#!/usr/bin/env bash
# The nbd project's own test client against Cairn, nbdkit and qemu-nbd, same run.
#
# Usage: NBD_TESTER_CLIENT=/path/to/nbd-tester-client bench/nbd-tester.sh [TRACE_DIR]
#
# NBD_TESTER_CLIENT is `tests/run/nbd-tester-client` from the NetworkBlockDevice/nbd
# repository, built by you (this script never builds or fetches it: `sh autogen.sh
# && ./configure --without-gnutls && make -C tests/run nbd-tester-client` in a
# checkout, with glib's development files). TRACE_DIR holds its
# `integrity-test.tr` and `integrityhuge-test.tr` (default: the binary's directory).
#
# Every case runs on a fresh 50 MiB export (the size the nbd project's test suite
# gives these traces), served on a Unix socket by:
#   cairn-memory   `cairn serve` with a memory volume
#   cairn-default  `cairn serve` with the embedded default stack (DRAM read cache,
#                  log disk with its NV write cache on /dev/shm, file device),
#                  resized to 50 MiB, data in a temporary directory
#   nbdkit         nbdkit's memory plugin                (skipped if not installed)
#   qemu-nbd       qemu-nbd over a raw file on /dev/shm   (skipped if not installed)
# Cases (the nbd project's tests/run/simple_test names): integrity (-i with
# integrity-test.tr: 69,000 pipelined reads, writes and flushes whose replies are
# checked against what was written), integrityhuge (-i with integrityhuge-test.tr:
# large overlapping requests), write (-w), flush (-w -f), read (no flags),
# oversize (-o: 1 MiB and 2 MiB requests), handshake (-h).
#
# Prints one row per server and case: pass/FAIL, the client's own MiB/s where it
# reports one, wall seconds; then Cairn's MiB/s ÷ the better peer's for the
# integrity cases. Exits non-zero if any Cairn case fails. Each server's log and
# the client's output stay in the printed directory when a case fails.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${NBD_TESTER_CLIENT:?set NBD_TESTER_CLIENT to an nbd-tester-client binary}"
client=$(readlink -f "$NBD_TESTER_CLIENT")
traces=$(readlink -f "${1:-$(dirname "$client")}")
for t in integrity-test.tr integrityhuge-test.tr; do
  [ -f "$traces/$t" ] || { echo "nbd-tester.sh: $traces/$t not found (give TRACE_DIR)" >&2; exit 2; }
done

cargo build -q --release -p cairn
cairn=$(readlink -f target/release/cairn)
work=$(mktemp -d "${TMPDIR:-/tmp}/cairn-nbd-tester.XXXXXX")
server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
failed=0
trap 'stop_server; rm -f /dev/shm/cairn-nbd-tester.img; [ "$failed" = 0 ] && rm -rf "$work"' EXIT

cat >"$work/memory.toml" <<EOF
[[export]]
name = "export1"
device = "ram"

[device.ram]
kind = "memory"
size = "50MiB"
EOF
# The default stack, renamed and resized: 50 MiB seen by clients, the file 20 % larger.
"$cairn" serve --print-default-config \
  | sed -e 's/^name = "cairn"/name = "export1"/' \
        -e 's/^size = "1GiB"/size = "50MiB"/' \
        -e 's/^size = "1280MiB"/size = "64MiB"/' \
        -e 's/^nv_cache = { size = "64MiB" }/nv_cache = { size = "8MiB" }/' \
        -e "s|^data_dir = .*|data_dir = \"$work/data\"|" >"$work/default.toml"

# start SERVER SOCKET: starts a fresh server with an empty 50 MiB export1.
start() {
  local sock=$2
  rm -f "$sock"
  rm -rf "$work/data"
  rm -f /dev/shm/cairn-nbd-tester.img
  truncate -s 50M /dev/shm/cairn-nbd-tester.img
  # `exec`: the background job is the server itself, so stop_server's kill
  # reaches it (not a subshell that would leave it running).
  case $1 in
    cairn-memory) exec "$cairn" -q serve --config "$work/memory.toml" --listen "unix:$sock" ;;
    cairn-default) exec "$cairn" -q serve --config "$work/default.toml" --listen "unix:$sock" ;;
    nbdkit) exec nbdkit -f -U "$sock" memory 50M ;;
    qemu-nbd) exec qemu-nbd -f raw -x export1 -k "$sock" -e 16 -t /dev/shm/cairn-nbd-tester.img ;;
  esac >"$work/$1.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    [ -S "$sock" ] && return 0
    sleep 0.05
  done
  echo "nbd-tester.sh: $1 did not create $sock; see $work/$1.log" >&2
  return 1
}

servers=(cairn-memory cairn-default)
command -v nbdkit >/dev/null && servers+=(nbdkit) || echo "nbdkit not installed: skipped"
command -v qemu-nbd >/dev/null && servers+=(qemu-nbd) || echo "qemu-nbd not installed: skipped"
cases=(integrity integrityhuge write flush read oversize handshake)
declare -A mib

printf '%-14s %-14s %-6s %10s %8s\n' server case result "MiB/s" seconds
for server in "${servers[@]}"; do
  for case in "${cases[@]}"; do
    case $case in
      integrity) args=(-i -t "$traces/integrity-test.tr") ;;
      integrityhuge) args=(-i -t "$traces/integrityhuge-test.tr") ;;
      write) args=(-w) ;;
      flush) args=(-w -f) ;;
      read) args=() ;;
      oversize) args=(-o) ;;
      handshake) args=(-h) ;;
    esac
    sock="$work/$server.sock"
    start "$server" "$sock"
    out="$work/$server-$case.out"
    t0=$(date +%s.%N)
    if "$client" -N export1 "${args[@]}" -u "$sock" >"$out" 2>&1; then result=pass; else result=FAIL; fi
    t1=$(date +%s.%N)
    stop_server
    rate=$(tr '\r' '\n' <"$out" | grep -o '[0-9.]*Mib/s' | tail -1 | sed 's/Mib\/s//' || true)
    [ -n "$rate" ] || rate="-"
    mib[$server/$case]=$rate
    printf '%-14s %-14s %-6s %10s %8.2f\n' "$server" "$case" "$result" "$rate" "$(echo "$t1 - $t0" | bc)"
    if [ "$result" = FAIL ]; then
      tr '\r' '\n' <"$out" | grep -E 'WARNING|CRITICAL|Bad|error' | head -3 | sed 's/^/    /'
      case $server in cairn-*) failed=1 ;; esac
    fi
  done
done

echo
printf '%-14s %-14s %12s\n' server case "÷ best peer"
for server in cairn-memory cairn-default; do
  for case in integrity integrityhuge write flush read; do
    best=0
    for peer in nbdkit qemu-nbd; do
      v=${mib[$peer/$case]:-}
      [[ "$v" =~ ^[0-9.]+$ ]] && best=$(echo "if ($v > $best) $v else $best" | bc -l)
    done
    ours=${mib[$server/$case]:-}
    if [[ "$ours" =~ ^[0-9.]+$ ]] && [ "$(echo "$best > 0" | bc)" = 1 ]; then
      printf '%-14s %-14s %11.2fx\n' "$server" "$case" "$(echo "$ours / $best" | bc -l)"
    fi
  done
done
if [ "$failed" = 1 ]; then
  echo "a Cairn case failed; logs in $work" >&2
  exit 1
fi
