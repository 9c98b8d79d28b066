#!/usr/bin/env bash
# kill -9 stress of the durable default stack through NBD (issue 21's bar):
# four connections write 4 KiB blocks and flush (seeded), the server is killed
# with SIGKILL at a random instant, restarted, and every block is checked: the
# last acknowledged write (or the one in flight) must read back, whole; and
# every restart must be reported as a crash recovery. Prints the cycle count
# and the seed; CAIRN_SEED=N replays a run.
#
# Usage: bench/kill9-stress.sh [CYCLES]     (default 200; ~2 s a cycle)
set -euo pipefail
cd "$(dirname "$0")/.."
cycles=${1:-200}
CAIRN_CRASH_CYCLES=$cycles cargo test --release --locked -p cairn --test serve_crash \
  kill_9_loses_no_acknowledged_write_on_the_durable_default_stack -- --nocapture 2>&1 |
  grep -E "seed|cycles|panicked|test result|FAILED|error" | grep -v "round [0-9]*: killed"
