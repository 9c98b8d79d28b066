#!/usr/bin/env bash
# Runs every test Cairn has, after installing what the tests need.
# Usage: ./test.sh            full run (formatting, lints, unit + integration tests, fuzz smoke)
#        ./test.sh --quick    unit + integration tests only
set -euo pipefail
cd "$(dirname "$0")"

quick=0
[ "${1:-}" = "--quick" ] && quick=1

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "test.sh: installing ${need_apt[*]}" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null; then
  echo "test.sh: cargo not found; install Rust with rustup (the toolchain is pinned in rust-toolchain.toml)" >&2
  exit 1
fi

if [ $quick = 0 ]; then
  echo "== cargo fmt --check" >&2
  cargo fmt --all -- --check
  echo "== cargo clippy" >&2
  cargo clippy --workspace --all-targets --locked -- -D warnings
fi

echo "== cargo test" >&2
cargo test --workspace --locked --release
