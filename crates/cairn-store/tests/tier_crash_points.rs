//! The crash property at every crash point of both devices: a seeded
//! workload (writes, runs past the sequential cutoff, reads that promote,
//! flushes, cleaner and reclaimer steps, a mode switch) is run once to count
//! the writes of the cache device and the backing device together, then run
//! again with a power cut after each of those writes in turn — one power for
//! both devices, each keeping what its own flushes made durable, its unflushed
//! writes dropped, reordered, or the last one torn. After every cut the tier
//! reopens without repair, every block reads a version of its last flush or a
//! later one (never data never written), every clean cached block is what the
//! backing device holds, and the tier keeps working and stops cleanly. In
//! every mode.
//!
//! The enumeration covers every crash point only because the devices see the
//! same operations in every run: the tier runs without its background
//! worker, and the workload is seeded.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cairn_store::device::Power;
use cairn_store::tier::Mode;
use cairn_store::{CrashMode, Device, FaultyDevice};
use common::tier::{B, BLOCKS, CACHE_LEN, Model, open, pattern, want};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One seeded workload on `tier`; stops at the first error (the cut), having
/// told the model what the failed operation may have done. Returns whether
/// it ran to the end.
fn workload(
    tier: &cairn_store::tier::Tier,
    model: &mut Model,
    seed: u64,
    ops: u64,
    base: u64,
) -> bool {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for op in 0..ops {
        let version = base + op * 16;
        match rng.random_range(0..20u32) {
            0..=9 => {
                let n = rng.random_range(1..=3u64);
                let first = rng.random_range(0..BLOCKS - n);
                if !write(tier, model, first, n, version) {
                    return false;
                }
            }
            10 => {
                // A run past the sequential cutoff: it bypasses the cache.
                let first = rng.random_range(0..BLOCKS - 8);
                if !write(tier, model, first, 8, version) {
                    return false;
                }
            }
            11..=14 => {
                let n = rng.random_range(1..=2u64);
                let first = rng.random_range(0..BLOCKS - n);
                let mut buf = vec![0u8; n as usize * B];
                if tier.read_at(&mut buf, first * B as u64).is_err() {
                    return false;
                }
                for k in 0..n {
                    let got = common::tier::version_of(
                        first + k,
                        &buf[k as usize * B..(k as usize + 1) * B],
                    );
                    assert_eq!(
                        got,
                        Some(model.latest(first + k)),
                        "seed {seed}: live read of block {}",
                        first + k
                    );
                }
            }
            15..=16 => {
                if tier.flush().is_err() {
                    return false;
                }
                model.flushed();
            }
            17..=18 => {
                if tier.step(rng.random_range(0..6)).is_err() {
                    return false;
                }
            }
            _ => {
                let to = Mode::ALL[rng.random_range(0..4usize)];
                if tier.set_mode(to).is_err() {
                    return false;
                }
            }
        }
    }
    true
}

/// Writes `n` blocks from `first`; on an error the model learns they may
/// have been written.
fn write(
    tier: &cairn_store::tier::Tier,
    model: &mut Model,
    first: u64,
    n: u64,
    version: u64,
) -> bool {
    let mut data = Vec::with_capacity(n as usize * B);
    for k in 0..n {
        data.extend_from_slice(&pattern(first + k, version + k));
    }
    let done = tier.write_at(&data, first * B as u64).is_ok();
    for k in 0..n {
        model.write(first + k, version + k);
    }
    done
}

fn devices(seed: u64) -> (Arc<Power>, Arc<FaultyDevice>, Arc<FaultyDevice>) {
    let power = Power::new();
    let cache = Arc::new(FaultyDevice::with_power(CACHE_LEN, seed, power.clone()));
    let backing = Arc::new(FaultyDevice::with_power(
        BLOCKS * B as u64,
        seed ^ 0xbac,
        power.clone(),
    ));
    (power, cache, backing)
}

fn crash_points(mode: Mode, policy: &str, seed: u64, ops: u64) {
    let want = want(mode, policy);
    // The writes of an uninterrupted run.
    let total = {
        let (power, cache, backing) = devices(seed);
        let tier = open(&cache, &backing, &want);
        let before = power.writes();
        let mut model = Model::default();
        assert!(workload(&tier, &mut model, seed, ops, 1));
        power.writes() - before
    };
    assert!(
        total > 50,
        "the workload writes too little to be a test ({total})"
    );
    for crash in [
        CrashMode::DropUnflushed,
        CrashMode::Reorder,
        CrashMode::TearLast,
    ] {
        for n in 1..=total {
            let context = format!(
                "{mode}, {policy}, seed {seed}, {crash:?}, crash after write {n} of {total}"
            );
            let (power, cache, backing) = devices(seed ^ n);
            let mut want = want.clone();
            let tier = open(&cache, &backing, &want);
            let mut model = Model::default();
            power.crash_after_writes(n, crash);
            // The cut after the very last write lets the workload finish.
            let finished = workload(&tier, &mut model, seed, ops, 1);
            assert!(
                !finished || n == total,
                "{context}: the workload outran the cut"
            );
            // The mode may have changed before the cut: reopen in the one
            // the workload last asked for is not needed — any mode must
            // recover what was durable.
            want.options.mode = mode;
            drop(tier);
            assert!(power.reboot(), "{context}: no cut");
            let tier = open(&cache, &backing, &want);
            model.check_and_settle(&tier, &context);
            tier.verify()
                .unwrap_or_else(|e| panic!("{context}: after recovery: {e}"));
            // It keeps working, and a clean stop after that replays nothing.
            assert!(
                workload(&tier, &mut model, seed ^ 1, 12, 1 << 40),
                "{context}: after recovery"
            );
            tier.close()
                .unwrap_or_else(|e| panic!("{context}: close: {e}"));
            drop(tier);
            let tier = open(&cache, &backing, &want);
            assert!(tier.recovered().clean, "{context}: {:?}", tier.recovered());
            model.check_live(&tier, &format!("{context}, after a clean stop"));
        }
    }
}

#[test]
fn every_crash_point_write_back() {
    crash_points(Mode::WriteBack, "lru", 0x71e2, 90);
}

#[test]
fn every_crash_point_write_back_s3fifo() {
    crash_points(Mode::WriteBack, "s3fifo", 0x5f1f0, 90);
}

#[test]
fn every_crash_point_write_through() {
    crash_points(Mode::WriteThrough, "lru", 0x7407, 90);
}

#[test]
fn every_crash_point_write_around() {
    crash_points(Mode::WriteAround, "arc", 0xa20d, 90);
}

#[test]
fn every_crash_point_pass_through() {
    crash_points(Mode::PassThrough, "lru", 0x9a55, 90);
}
