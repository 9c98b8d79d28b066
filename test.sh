#!/usr/bin/env bash
# Runs every test Cairn has, after installing what the tests need.
# Usage: ./test.sh            full run (formatting, lints, unit + integration tests, fuzz smoke)
#        ./test.sh --quick    unit + integration tests only
# Environment: CAIRN_FUZZ_SECONDS (default 5) seconds per fuzz target; 0 skips
# the fuzz smoke. It needs a nightly toolchain and cargo-fuzz, which it installs
# when missing (a skip is printed if that is impossible; the stable
# readers_never_panic property tests run regardless).
# The tests run beside a single-node Ceph (bench/ceph-cluster.sh: mon, memstore
# OSD, radosgw with S3) started once, in a temporary directory, and stopped at
# exit; CAIRN_TEST_S3_ENDPOINT already set means a cluster of yours (with the
# other CAIRN_TEST_S3_* / CAIRN_TEST_CEPH_* variables): none is started.
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
# The operator's files (crates/cairn/tests/contrib_systemd_units.rs,
# cli_completions_and_man_pages.rs): systemd-analyze and systemd-socket-activate,
# groff and man.
command -v systemd-analyze >/dev/null || need_apt+=(systemd)
command -v groff >/dev/null || need_apt+=(groff-base)
command -v man >/dev/null || need_apt+=(man-db)
# The metrics listener (crates/cairn/tests/metrics_*.rs): a real Prometheus
# scrapes it, headless Chromium renders the dashboard page, curl runs the
# --help example.
# No recommends for those two (prometheus would bring node-exporter, a
# daemon no test wants; chromium its desktop helpers).
need_bare=()
command -v prometheus >/dev/null || need_bare+=(prometheus)
command -v chromium >/dev/null || need_bare+=(chromium)
command -v curl >/dev/null || need_apt+=(curl)
# nginx: an origin for the file gateway's HTTP backend
# (crates/cairn-files/tests/http_origin_backend.rs) and `cairn bench files`.
command -v nginx >/dev/null || need_bare+=(nginx-light)
# rclone: an S3 client reading through the file gateway
# (crates/cairn-files/tests/s3_clients_awscli_rclone.rs).
command -v rclone >/dev/null || need_bare+=(rclone)
if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
apt_updated=0
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "test.sh: installing ${need_apt[*]}" >&2
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
  apt_updated=1
fi
if [ ${#need_bare[@]} -gt 0 ]; then
  echo "test.sh: installing ${need_bare[*]} (no recommends)" >&2
  { [ $apt_updated = 1 ] || $SUDO apt-get update -qq; } &&
    $SUDO apt-get install -y -qq --no-install-recommends "${need_bare[@]}" >/dev/null
  apt_updated=1
fi
# Ceph for the S3 and RADOS tests (no recommends: 66 MB, no mgr). Without it
# those tests skip, saying why.
ceph=0
if [ -z "${CAIRN_TEST_S3_ENDPOINT:-}" ]; then
  ceph=1
  for b in ceph-mon ceph-osd radosgw ceph; do command -v $b >/dev/null || ceph=0; done
  if [ $ceph = 0 ]; then
    echo "test.sh: installing ceph-mon ceph-osd radosgw ceph-common" >&2
    if { [ $apt_updated = 1 ] || $SUDO apt-get update -qq; } &&
      $SUDO apt-get install -y -qq --no-install-recommends \
        ceph-mon ceph-osd radosgw ceph-common >/dev/null; then
      ceph=1
    else
      echo "== ceph: skipped (apt-get cannot install it); the S3 and RADOS tests will skip" >&2
    fi
  fi
fi
# boto3 for crates/cairn-files/tests/s3_clients_boto3.rs (an S3 client reading
# through the file gateway).
if ! python3 -c 'import boto3' 2>/dev/null; then
  echo "test.sh: installing boto3 (pip)" >&2
  python3 -m pip install --quiet --disable-pip-version-check boto3
fi
# aws-cli for crates/cairn-files/tests/s3_clients_awscli_rclone.rs.
if ! command -v aws >/dev/null; then
  echo "test.sh: installing awscli (pip)" >&2
  python3 -m pip install --quiet --disable-pip-version-check awscli
  # pyenv puts a new executable on PATH only through a rehashed shim.
  if command -v pyenv >/dev/null; then pyenv rehash; fi
fi
# Installed above, so the tests that honour it (crates/cairn/tests/metrics_*.rs:
# prometheus, chromium, fio, curl; crates/cairn-files/tests: curl, boto3,
# aws-cli, rclone) fail
# when one is missing instead of skipping.
export CAIRN_REQUIRE_SYSTEM_TOOLS=1
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

# One cluster for the whole run; its daemons run in sessions of their own, so
# only this trap stops them (after a failure or ^C too). Logs are kept when a
# step failed.
ceph_dir=
stop_ceph() {
  [ -n "$ceph_dir" ] || return 0
  bench/ceph-cluster.sh stop "$ceph_dir" || true
  if [ "$1" = 0 ]; then rm -rf "$ceph_dir"; else echo "test.sh: Ceph's logs are in $ceph_dir/log" >&2; fi
  ceph_dir=
}
if [ -n "${CAIRN_TEST_S3_ENDPOINT:-}" ]; then
  echo "== ceph: the cluster at $CAIRN_TEST_S3_ENDPOINT (CAIRN_TEST_S3_ENDPOINT is set)" >&2
elif [ $ceph = 1 ]; then
  echo "== ceph: a single-node cluster for the S3 and RADOS tests (bench/ceph-cluster.sh)" >&2
  ceph_dir=$(mktemp -d)
  trap 'stop_ceph $?' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  bench/ceph-cluster.sh start "$ceph_dir"
  # shellcheck disable=SC1091 # written by the start above
  . "$ceph_dir/env"
fi

# Profile `ci` (Cargo.toml): release's optimisation without link-time
# optimisation, which on 2 cores builds the ~80 test binaries in about a
# third of release's time.
echo "== cargo test (cairn-store's strict_assert! checked, optimised: feature strict-assertions, profile ci)" >&2
cargo test --workspace --locked --profile ci --features cairn-store/strict-assertions
echo "== cargo test: block cache under shuttle's randomized scheduler" >&2
cargo test --locked --profile ci -p cairn-store --features shuttle --test cache_shuttle
stop_ceph 0

# The Python package (python/: PyO3, built by maturin) and its pytest suite,
# which also runs examples/python/. Built here rather than by `pip install
# ./python` so the wheel's Rust build reuses python/target between runs.
echo "== python: build the cairn wheel (maturin) and run its tests (pytest)" >&2
python3 -m pip install --quiet --disable-pip-version-check "maturin>=1.5,<2" pytest
if [ $quick = 0 ]; then
  cargo fmt --manifest-path python/Cargo.toml -- --check
  cargo clippy --manifest-path python/Cargo.toml --locked -- -D warnings
fi
rm -rf python/target/wheels
maturin build --release --locked --manifest-path python/Cargo.toml --out python/target/wheels
python3 -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps python/target/wheels/*.whl
python3 -m pytest -q python/tests

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
