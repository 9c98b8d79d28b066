//! The log disk against a model across random crash/recover cycles
//! (proptest): random writes, trims, flushes and crashes (each crash dropping,
//! reordering or tearing unflushed device writes and losing unfenced NV
//! stores), in both modes, with the cleaner's read strategy and the background
//! writer and cleaner varied by case. After every recovery each block reads a
//! version the model allows: the durable one, one written since, or after a
//! trim zeroes or any version ever written. Cases the proptest found are kept
//! as named tests below and in `logdisk_model_across_crashes.proptest-regressions`.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cairn_store::logdisk::{CleanerPolicy, LogDisk, Options};
use cairn_store::ntl::{Region, SimRegion};
use cairn_store::{CrashMode, FaultyDevice};
use common::logdisk::{Model, Reads, image_len, options, pattern, small};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Write(u64, u8),
    Trim(u64, u8),
    Flush,
    /// A clean close (its checkpoint marked closed), the disk kept in use:
    /// a crash right after recovers from the mark, a write after it first
    /// checkpoints without it.
    Close,
    Crash(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u64..40, 1u8..4).prop_map(|(l, n)| Op::Write(l, n)),
        1 => (0u64..40, 1u8..6).prop_map(|(l, n)| Op::Trim(l, n)),
        2 => Just(Op::Flush),
        1 => Just(Op::Close),
        1 => (0u8..3).prop_map(Op::Crash),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random writes, flushes and crashes against the model, both modes.
    #[test]
    fn model_across_crash_cycles(ops in proptest::collection::vec(op(), 1..300), nv: bool, seed: u64, gap in 0u32..4) {
        // Live-only reads bridging 0–2 dead blocks, or (3) whole reads.
        let reads = if gap == 3 { Reads::Whole } else { Reads::LiveOnly { gap, threads: 2 } };
        // NV mode with odd seeds destages in the background; seeds with bit
        // 1 clear clean in the background.
        let opts = Options {
            background_destage: seed % 2 == 1,
            background_clean: seed & 2 == 0,
            ..reads.apply(options(CleanerPolicy::CostBenefit))
        };
        model_run(&ops, nv, seed, opts);
    }
}

fn model_run(ops: &[Op], nv: bool, seed: u64, opts: Options) {
    let g = small();
    let dev = Arc::new(FaultyDevice::new(image_len(&g), seed));
    let region = Arc::new(SimRegion::new(12 * 1024));
    let nv_box = || nv.then(|| Box::new(region.clone()) as Box<dyn Region>);
    let mut disk = LogDisk::format(dev.clone(), g, nv_box(), opts).unwrap();
    let mut model = Model::new(nv);
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Write(l, n) => {
                let n = u64::from(n).min(g.logical_blocks - l);
                let version = 1 + i as u64 * 4;
                let mut data = Vec::new();
                for b in l..l + n {
                    data.extend_from_slice(&pattern(b, version + b - l));
                }
                disk.write_blocks(l, &data).unwrap();
                for b in l..l + n {
                    model.write(b, version + b - l, true);
                }
            }
            Op::Trim(l, n) => {
                let n = u64::from(n).min(g.logical_blocks - l);
                disk.trim_blocks(l, n).unwrap();
                for b in l..l + n {
                    model.trim(b);
                }
            }
            Op::Flush => {
                disk.flush().unwrap();
                model.flushed();
            }
            Op::Close => {
                disk.close().unwrap();
                model.flushed();
            }
            Op::Crash(mode) => {
                drop(disk);
                let mode = [
                    CrashMode::DropUnflushed,
                    CrashMode::Reorder,
                    CrashMode::TearLast,
                ][mode as usize];
                dev.crash_now(mode);
                region.crash(seed ^ i as u64);
                disk = LogDisk::open(dev.clone(), nv_box(), opts)
                    .unwrap_or_else(|e| panic!("seed {seed}: op {i}: {e}"));
                model.check_and_settle(&disk, &format!("seed {seed}, op {i}"));
            }
        }
    }
}

/// Found by `model_across_crash_cycles`: a trim emptied two segments, the
/// cleaner counted them in its reserve, and a crash before the next checkpoint
/// brought the trimmed blocks back, leaving every segment with live blocks, no
/// segment to clean into, and every later write failing with `NoSpace`. The
/// reserve no longer counts segments a trim emptied (a low reserve takes a
/// checkpoint first, which makes them free for good).
#[test]
fn a_crash_that_brings_back_trimmed_blocks_leaves_the_cleaner_room() {
    let ops = [
        Op::Write(9, 2),
        Op::Write(33, 3),
        Op::Write(0, 1),
        Op::Write(37, 1),
        Op::Write(7, 2),
        Op::Write(38, 2),
        Op::Write(5, 3),
        Op::Write(8, 3),
        Op::Write(11, 3),
        Op::Write(13, 2),
        Op::Write(0, 1),
        Op::Write(1, 3),
        Op::Write(14, 2),
        Op::Write(14, 3),
        Op::Write(17, 3),
        Op::Write(1, 1),
        Op::Write(8, 3),
        Op::Write(26, 2),
        Op::Write(8, 2),
        Op::Write(16, 3),
        Op::Write(21, 3),
        Op::Write(9, 1),
        Op::Write(14, 1),
        Op::Write(1, 2),
        Op::Write(25, 2),
        Op::Write(16, 2),
        Op::Write(25, 3),
        Op::Write(9, 3),
        Op::Write(10, 2),
        Op::Write(1, 2),
        Op::Write(16, 2),
        Op::Write(1, 2),
        Op::Trim(4, 5),
        Op::Write(37, 3),
        Op::Write(0, 2),
        Op::Write(4, 2),
        Op::Write(9, 2),
        Op::Write(4, 3),
        Op::Write(0, 2),
        Op::Write(0, 2),
        Op::Write(2, 1),
        Op::Crash(0),
        Op::Write(3, 1),
        Op::Write(4, 3),
    ];
    let opts = Options {
        background_destage: false,
        ..Reads::LiveOnly { gap: 0, threads: 2 }.apply(options(CleanerPolicy::CostBenefit))
    };
    model_run(&ops, true, 0, opts);
}
