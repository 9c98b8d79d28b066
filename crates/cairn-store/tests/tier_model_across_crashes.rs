//! The tier against a model across random crash/recover cycles (proptest):
//! random writes (single blocks and sequential runs that cross the cutoff),
//! reads (which promote), flushes, cleaner and reclaimer steps, mode
//! switches and crashes, in every mode, both devices faulty (a crash drops,
//! reorders or tears each device's unflushed writes independently, as a
//! power cut does to two disks). Without a crash every block reads its
//! latest version; after one, each reads the version of the last flush or
//! one written since, and keeps reading it (a stale cached copy that later
//! gave way to the backing device's would fail the next check).

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cairn_store::tier::Mode;
use cairn_store::{CrashMode, Device, FaultyDevice};
use common::tier::{B, BLOCKS, CACHE_LEN, Model, open, pattern, want};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Write(u64, u8),
    Read(u64, u8),
    Flush,
    Step(u8),
    Mode(u8),
    Check,
    Crash(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0..BLOCKS, 1u8..4).prop_map(|(b, n)| Op::Write(b, n)),
        1 => (0..BLOCKS, 8u8..12).prop_map(|(b, n)| Op::Write(b, n)),
        6 => (0..BLOCKS, 1u8..3).prop_map(|(b, n)| Op::Read(b, n)),
        2 => (0..BLOCKS, 3u8..6).prop_map(|(b, n)| Op::Read(b, n)),
        2 => Just(Op::Flush),
        2 => (0u8..9).prop_map(Op::Step),
        1 => (0u8..4).prop_map(Op::Mode),
        1 => Just(Op::Check),
        1 => (0u8..3).prop_map(Op::Crash),
    ]
}

proptest! {
    // 256 cases in `./test.sh`; PROPTEST_CASES=N for a longer hunt.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    #[test]
    fn model_across_crash_cycles(ops in proptest::collection::vec(op(), 1..250), mode in 0u8..4, policy in 0u8..3, seed: u64) {
        let mode = Mode::ALL[mode as usize];
        let policy = ["lru", "s3fifo", "arc"][policy as usize];
        model_run(&ops, mode, policy, seed);
    }
}

fn model_run(ops: &[Op], mode: Mode, policy: &str, seed: u64) {
    let cache = Arc::new(FaultyDevice::new(CACHE_LEN, seed));
    let backing = Arc::new(FaultyDevice::new(BLOCKS * B as u64, seed ^ 0x5eed));
    let mut want = want(mode, policy);
    let mut tier = open(&cache, &backing, &want);
    let mut model = Model::default();
    let context = |i: usize| format!("seed {seed}, {mode}, {policy}, op {i}");
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Write(b, n) => {
                let n = u64::from(n).min(BLOCKS - b);
                let version = 1 + i as u64 * 16;
                let mut data = Vec::new();
                for k in 0..n {
                    data.extend_from_slice(&pattern(b + k, version + k));
                }
                tier.write_at(&data, b * B as u64)
                    .unwrap_or_else(|e| panic!("{}: write: {e}", context(i)));
                for k in 0..n {
                    model.write(b + k, version + k);
                }
            }
            Op::Read(b, n) => {
                let n = u64::from(n).min(BLOCKS - b);
                let mut buf = vec![0u8; n as usize * B];
                tier.read_at(&mut buf, b * B as u64).unwrap();
                for k in 0..n {
                    let got =
                        common::tier::version_of(b + k, &buf[k as usize * B..(k as usize + 1) * B]);
                    assert_eq!(
                        got,
                        Some(model.latest(b + k)),
                        "{}: read of block {}",
                        context(i),
                        b + k
                    );
                }
            }
            Op::Flush => {
                tier.flush().unwrap();
                model.flushed();
            }
            Op::Step(blocks) => {
                tier.step(usize::from(blocks)).unwrap();
                tier.verify()
                    .unwrap_or_else(|e| panic!("{}: {e}", context(i)));
            }
            Op::Mode(m) => {
                let m = Mode::ALL[m as usize];
                tier.set_mode(m).unwrap();
                want.options.mode = m;
            }
            Op::Check => {
                model.check_live(&tier, &context(i));
                tier.verify()
                    .unwrap_or_else(|e| panic!("{}: {e}", context(i)));
            }
            Op::Crash(how) => {
                drop(tier);
                let how = [
                    CrashMode::DropUnflushed,
                    CrashMode::Reorder,
                    CrashMode::TearLast,
                ][how as usize];
                cache.crash_now(how);
                backing.crash_now(how);
                tier = open(&cache, &backing, &want);
                model.check_and_settle(&tier, &context(i));
                tier.verify()
                    .unwrap_or_else(|e| panic!("{}: {e}", context(i)));
            }
        }
    }
    model.check_live(&tier, &format!("seed {seed}: end"));
    tier.close().unwrap();
    drop(tier);
    let tier = open(&cache, &backing, &want);
    assert!(
        tier.recovered().clean,
        "seed {seed}: {:?}",
        tier.recovered()
    );
    model.check_live(&tier, &format!("seed {seed}: after a clean stop"));
}
