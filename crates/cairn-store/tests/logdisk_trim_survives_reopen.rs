//! TRIM unmaps for good: trimmed blocks read zeroes, stop costing the cleaner
//! (it moves less than half the blocks it moves without the trim), and stay
//! unmapped across close and reopen, with `fsck` finding the image clean. A
//! trim that a crash undoes before the next checkpoint is the model's business:
//! see `logdisk_model_across_crashes`.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cairn_store::logdisk::{CleanerPolicy, LogDisk};
use cairn_store::ntl::{Region, SimRegion};
use cairn_store::{Device, MemoryDevice};
use common::logdisk::{B, image_len, options, pattern, small, version_of};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// TRIM unmaps: trimmed blocks read zeroes, stop costing the cleaner, and
/// stay unmapped across close and reopen with the image consistent.
#[test]
fn trimmed_blocks_read_zeroes_spare_the_cleaner_and_survive_reopen() {
    let g = small();
    let kept = g.logical_blocks / 2;
    let run = |trim: bool, nv: bool| {
        let dev = Arc::new(MemoryDevice::new(image_len(&g)));
        let region: Option<Box<dyn Region>> =
            nv.then(|| Box::new(SimRegion::new(12 * 1024)) as Box<dyn Region>);
        let disk = LogDisk::format(dev.clone(), g, region, options(CleanerPolicy::Greedy)).unwrap();
        let mut all = Vec::new();
        for l in 0..g.logical_blocks {
            all.extend_from_slice(&pattern(l, 1));
        }
        disk.write_blocks(0, &all).unwrap();
        if trim {
            // Trim the upper half through the Device interface (byte offsets;
            // the partial block at the end is left alone).
            let b = B as u64;
            disk.discard(kept * b, (g.logical_blocks - kept) * b - 100)
                .unwrap();
        }
        // Uniform rewrites of the lower half.
        let mut last = vec![1u64; kept as usize];
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for version in 2..1500u64 {
            let l = rng.random_range(0..kept);
            disk.write_blocks(l, &pattern(l, version)).unwrap();
            last[l as usize] = version;
        }
        disk.flush().unwrap();
        let moved = disk.metrics().cleaner_blocks_written;
        disk.close().unwrap();
        drop(disk);
        let report = cairn_store::logdisk::check::examine(&*dev).unwrap();
        assert!(report.is_clean(), "trim={trim} nv={nv}: {report:?}");
        let disk = LogDisk::open(dev, None, options(CleanerPolicy::Greedy)).unwrap();
        let mut buf = vec![0u8; B];
        for l in 0..g.logical_blocks {
            disk.read_block(l, &mut buf).unwrap();
            // Trimmed blocks read zeroes (version 0); the partial last block
            // and the untrimmed run keep version 1.
            let trimmed = trim && l < g.logical_blocks - 1;
            let want = if l < kept {
                last[l as usize]
            } else {
                u64::from(!trimmed)
            };
            assert_eq!(
                version_of(l, &buf),
                Some(want),
                "trim={trim} nv={nv}: block {l}"
            );
        }
        moved
    };
    for nv in [false, true] {
        let without = run(false, nv);
        let with = run(true, nv);
        eprintln!("nv={nv}: the cleaner moved {with} blocks with the trim, {without} without");
        assert!(
            with * 2 < without,
            "nv={nv}: the cleaner moved {with} blocks with the trim, {without} without"
        );
    }
}
