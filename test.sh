#!/usr/bin/env bash
# Runs every test Cairn has, after installing what the tests need.
# Usage: ./test.sh            full run (formatting, lints, unit + integration tests, fuzz smoke)
#        ./test.sh --quick    unit + integration tests only
# Environment: CAIRN_FUZZ_SECONDS (default 5) seconds per fuzz target; 0 skips
# the fuzz smoke. It needs a nightly toolchain and cargo-fuzz, which it installs
# when missing (a skip is printed if that is impossible; the stable
# readers_never_panic property tests run regardless).
set -euo pipefail
cd "$(dirname "$0")"

quick=0
[ "${1:-}" = "--quick" ] && quick=1

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
# Real NBD clients for crates/cairn-nbd/tests/real_clients.rs and cli_serve.rs.
command -v qemu-io >/dev/null || need_apt+=(qemu-utils)
command -v nbdinfo >/dev/null || need_apt+=(libnbd-bin)
command -v nbdkit >/dev/null || need_apt+=(nbdkit)
command -v fio >/dev/null || need_apt+=(fio)
# Test certificates for the TLS tests (crates/cairn-nbd/tests/tls.rs, cli_serve.rs).
command -v openssl >/dev/null || need_apt+=(openssl)
# ext4 through nbdfuse + loop mount (crates/cairn/tests/serve_ext4.rs).
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
command -v mkfs.ext4 >/dev/null || [ -x /usr/sbin/mkfs.ext4 ] || need_apt+=(e2fsprogs)
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
  echo "== import circles between modules (bench/import-circles)" >&2
  # Allowed: two circles that predate the checker. cairn-nbd's server/mod.rs
  # dispatches to server/connection/, which names its parent's `Inner`;
  # cairn-policy's PolicyConfig names every policy while Dual builds any
  # inner policy through it (a recursion of the design). Everything else has
  # none: keep it so.
  python3 bench/import-circles \
    --allow cairn-nbd::server \
    --allow cairn-policy::config --allow cairn-policy::dual
fi

echo "== cargo test (cairn-store's strict_assert! checked in release: feature strict-assertions)" >&2
cargo test --workspace --locked --release --features cairn-store/strict-assertions
echo "== cargo test: block cache under shuttle's randomized scheduler" >&2
cargo test --locked --release -p cairn-store --features shuttle --test cache_shuttle

fuzz_smoke() {
  local seconds=${CAIRN_FUZZ_SECONDS:-5}
  [ "$seconds" = 0 ] && { echo "== fuzz smoke: skipped (CAIRN_FUZZ_SECONDS=0)" >&2; return 0; }
  if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "test.sh: installing the nightly toolchain for cargo-fuzz" >&2
    rustup toolchain install nightly --profile minimal >/dev/null 2>&1 ||
      { echo "== fuzz smoke: skipped (no nightly toolchain can be installed)" >&2; return 0; }
  fi
  if ! command -v cargo-fuzz >/dev/null; then
    echo "test.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked -q ||
      { echo "== fuzz smoke: skipped (cargo-fuzz cannot be installed)" >&2; return 0; }
  fi
  echo "== fuzz smoke: ${seconds}s per decoder" >&2
  (
    cd fuzz
    cargo +nightly fuzz build -O
    for target in $(cargo +nightly fuzz list); do
      cargo +nightly fuzz run -O "$target" -- -max_total_time="$seconds" 2>&1 |
        grep -E "^(Done|INFO: -max_total_time)|ERROR|panicked" || true
      [ "${PIPESTATUS[0]}" = 0 ] || { echo "fuzz target $target failed" >&2; exit 1; }
    done
  )
}
[ $quick = 0 ] && fuzz_smoke
exit 0
