//! The NV write cache keeps every write it acknowledged: a crash inside the
//! cache (after any store or fence of the region, unfenced stores dropped or
//! kept) loses none; blocks rewritten while their destaged slots await the
//! device flush read back their newest version, before and after crashes; and a
//! deferring (`msync`-persisted) cache clears a superseded slot only once its
//! successor is durable, so power loss never brings back a copy older than the
//! last one flushed.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cairn_store::logdisk::{CleanerPolicy, Geometry, LogDisk};
use cairn_store::ntl::{Region, SimRegion};
use cairn_store::{CrashMode, Device, FaultyDevice, MemoryDevice};
use common::logdisk::{B, Model, image_len, options, pattern, small, version_of, workload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Crash points inside the NV cache: after every store and fence of the
/// region, with unfenced stores dropped or kept at random.
#[test]
fn every_nv_crash_point() {
    let g = small();
    let opts = options(CleanerPolicy::Greedy);
    let nv_len = 12 * 1024;
    let seed = 0x00c0_ffee;
    let ops = 40;
    let events = {
        let region = Arc::new(SimRegion::new(nv_len));
        let disk = LogDisk::format(
            MemoryDevice::new(image_len(&g)),
            g,
            Some(Box::new(region.clone())),
            opts,
        )
        .unwrap();
        let start = region.events();
        assert!(workload(&disk, &mut Model::new(true), seed, ops, 1));
        (start, region.events())
    };
    // Every 7th event keeps the run short; fences and entry stores are among them.
    for at in (events.0 + 1..=events.1).step_by(7) {
        let dev = Arc::new(MemoryDevice::new(image_len(&g)));
        let region = Arc::new(SimRegion::new(nv_len));
        let disk = LogDisk::format(dev.clone(), g, Some(Box::new(region.clone())), opts).unwrap();
        region.crash_after(at);
        let mut model = Model::new(true);
        workload(&disk, &mut model, seed, ops, 1);
        drop(disk);
        region.crash(at);
        let context = format!("seed {seed:#x}, NV crash after event {at}");
        let disk = LogDisk::open(dev, Some(Box::new(region)), opts)
            .unwrap_or_else(|e| panic!("{context}: {e}"));
        model.check_and_settle(&disk, &context);
    }
}

/// NV mode with a hot set: blocks are rewritten while their destaged slots
/// still await the device flush, those slots are superseded, cleared and
/// reused. Every block reads back its newest version after every write, and
/// after every crash (NV stores dropped or reordered at the crash) recovery
/// returns the newest version of every write acknowledged.
#[test]
fn nv_rewrites_of_destaged_blocks_across_crashes() {
    // Enough slots that destages batch several segments per device flush.
    let g = Geometry {
        segments: 48,
        logical_blocks: 250,
        ..small()
    };
    for seed in 0..12u64 {
        let dev = Arc::new(MemoryDevice::new(image_len(&g)));
        let region = Arc::new(SimRegion::new(64 * 1024));
        let opts = options(CleanerPolicy::CostBenefit);
        let mut disk =
            LogDisk::format(dev.clone(), g, Some(Box::new(region.clone())), opts).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut newest = vec![0u64; g.logical_blocks as usize];
        let mut buf = vec![0u8; B];
        for l in 0..g.logical_blocks {
            disk.write_blocks(l, &pattern(l, 1)).unwrap();
            newest[l as usize] = 1;
        }
        for op in 2..=1500u64 {
            if rng.random_ratio(1, 150) {
                drop(disk);
                region.crash(seed * 1000 + op);
                disk = LogDisk::open(dev.clone(), Some(Box::new(region.clone())), opts)
                    .unwrap_or_else(|e| panic!("seed {seed}, op {op}: reopen: {e}"));
            } else {
                let l = if rng.random_ratio(7, 10) {
                    rng.random_range(0..6)
                } else {
                    rng.random_range(0..g.logical_blocks)
                };
                disk.write_blocks(l, &pattern(l, op)).unwrap();
                newest[l as usize] = op;
            }
            for (l, &version) in newest.iter().enumerate() {
                disk.read_block(l as u64, &mut buf).unwrap();
                assert_eq!(
                    version_of(l as u64, &buf),
                    Some(version),
                    "seed {seed}, op {op}: block {l}"
                );
            }
        }
        // Counters survive a crash up to the last checkpoint (one per open).
        let m = disk.metrics();
        assert!(
            m.nv_write_hits > 0 && m.cleaner_segment_reads > 0,
            "seed {seed}: {m:?}"
        );
    }
}

/// A deferring NV cache (an `msync`-persisted file) clears a superseded slot
/// only after a sync made its successor durable: a block flushed, then
/// overwritten without a flush (again after every batch of other writes, so
/// it is never the oldest dirty block and never destaged), until a destage's
/// device flush clears superseded slots; then power loss — the block reads
/// the flushed version or a later one, never the older copy on the disk.
/// Each seed loses a different part of what was not synced.
#[test]
fn a_deferring_nv_cache_never_clears_a_slot_before_its_successor_is_durable() {
    let g = small();
    let opts = options(CleanerPolicy::Greedy);
    for seed in 0..48u64 {
        let dev = Arc::new(FaultyDevice::new(image_len(&g), seed));
        let region = Arc::new(SimRegion::new(64 * 1024).with_sync_flush());
        let nv = || Some(Box::new(region.clone()) as Box<dyn Region>);
        let disk = LogDisk::format(dev.clone(), g, nv(), opts).unwrap();
        disk.write_blocks(3, &pattern(3, 1)).unwrap();
        disk.close().unwrap();
        disk.write_blocks(3, &pattern(3, 2)).unwrap();
        disk.flush().unwrap();
        let flushes = dev.counts().flushes;
        let mut version = 3;
        while dev.counts().flushes == flushes {
            for logical in 10..20 {
                disk.write_blocks(logical, &pattern(logical, version))
                    .unwrap();
            }
            disk.write_blocks(3, &pattern(3, version)).unwrap();
            version += 1;
            assert!(version < 500, "no device flush came");
        }
        drop(disk);
        dev.crash_now(CrashMode::DropUnflushed);
        region.crash(seed);
        let disk = LogDisk::open(dev.clone(), nv(), opts).unwrap();
        let mut got = vec![0u8; B];
        disk.read_at(&mut got, 3 * B as u64).unwrap();
        let read = u64::from_le_bytes(got[8..16].try_into().unwrap());
        assert!(
            got == pattern(3, read) && (2..version).contains(&read),
            "seed {seed}: block 3 reads version {read}, not the flushed 2 or a later one \
             (last written {})",
            version - 1
        );
    }
}
