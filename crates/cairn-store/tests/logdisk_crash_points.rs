//! The crash property at every device crash point: every write acknowledged
//! before the last completed flush (in NV mode, every acknowledged write) reads
//! back exactly, nothing reads back data never written, and the image opens
//! without repair, keeps working and recovers a second time. A seeded
//! workload's device writes are counted, then the workload is run again with a
//! crash after each of them in turn, the unflushed writes dropped, reordered or
//! the last one torn; across both modes, the partial-segment and cleaner
//! policies, the cleaner's read strategies, an `msync`-persisted region, and the
//! background writer and cleaner. The enumeration covers every crash point only
//! because the device sees the same operations in every run, which
//! `background_cleaning_is_deterministic` holds.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cairn_store::logdisk::{CleanerPolicy, LogDisk, Metrics, Options, PartialSegments};
use cairn_store::ntl::{Region, SimRegion};
use cairn_store::{CrashMode, Device, FaultyDevice};
use common::logdisk::{Model, Reads, image_len, options, small, workload, workload_of};

fn crash_points(
    nv: bool,
    partial: PartialSegments,
    cleaner: CleanerPolicy,
    reads: Reads,
    background: bool,
    background_clean: bool,
) -> (u64, u64) {
    crash_points_on(
        nv,
        partial,
        cleaner,
        reads,
        background,
        background_clean,
        false,
        false,
        None,
    )
}

/// [`crash_points`], the NV region standing for an `msync`-persisted file
/// when `msync` is set: its flushes are system calls, so the log disk defers
/// durability to a sync (its flush, or before any slot is cleared), and what
/// must survive is what was flushed, not every acknowledged write; and
/// with `long_chains`, at the default checkpoint interval (more segment
/// writes than the small disk has segments) and with no closes or trims
/// (each ends in a checkpoint), so the chain of segments opened since a
/// checkpoint wraps around the disk; on a device that holds `earlier` (an
/// image of another log disk, laid down and flushed before the format) when
/// given. Returns how many of the crash points' recoveries found the
/// segments along the chain, and how many there were.
#[allow(clippy::fn_params_excessive_bools, clippy::too_many_arguments)]
fn crash_points_on(
    nv: bool,
    partial: PartialSegments,
    cleaner: CleanerPolicy,
    reads: Reads,
    background: bool,
    background_clean: bool,
    msync: bool,
    long_chains: bool,
    earlier: Option<&[u8]>,
) -> (u64, u64) {
    let sim = |len: u64| {
        let region = SimRegion::new(len);
        if msync {
            region.with_sync_flush()
        } else {
            region
        }
    };
    let g = small();
    let seed = 0x10_6d15;
    let ops = 160;
    let opts = reads.apply(Options {
        partial,
        background_destage: background,
        background_clean,
        checkpoint_interval: if long_chains { 0 } else { 5 },
        ..options(cleaner)
    });
    let mut chained = 0u64;
    let nv_len = 12 * 1024;
    let lay_down = |dev: &FaultyDevice| {
        if let Some(image) = earlier {
            dev.write_at(image, 0).unwrap();
            dev.flush().unwrap();
        }
    };
    // Count the device writes of an uninterrupted run.
    let total = {
        let dev = Arc::new(FaultyDevice::new(image_len(&g), seed));
        lay_down(&dev);
        let region: Option<Box<dyn Region>> = nv.then(|| Box::new(sim(nv_len)) as Box<dyn Region>);
        let disk = LogDisk::format(dev.clone(), g, region, opts).unwrap();
        let before = dev.counts().writes;
        let mut model = Model::new(nv && !msync);
        assert!(workload_of(&disk, &mut model, seed, ops, 1, !long_chains));
        // The crash points fall inside cleaning, and (live-only) inside
        // cleaning that read less than whole victims.
        let m = disk.metrics();
        assert!(m.cleaner_segment_reads > 0, "the workload never cleans");
        // With background cleaning, crash points fall between a pass's
        // reads and its write too.
        assert_eq!(
            m.cleaner_background_passes > 0,
            opts.background_clean,
            "background passes: {}",
            m.cleaner_background_passes
        );
        let whole = m.cleaner_segment_reads * u64::from(g.segment_blocks * g.block_size);
        match reads {
            Reads::Whole => assert_eq!(m.cleaner_read_ios, m.cleaner_segment_reads),
            Reads::LiveOnly { .. } => assert!(
                m.cleaner_read_bytes < whole / 2,
                "live-only reads read {} bytes of {whole}",
                m.cleaner_read_bytes
            ),
        }
        // Dropping the disk waits for a background write still in flight.
        drop(disk);
        dev.counts().writes - before
    };
    assert!(total > 20, "workload too small: {total} writes");
    let mut checked = 0;
    for mode in [
        CrashMode::DropUnflushed,
        CrashMode::Reorder,
        CrashMode::TearLast,
    ] {
        for at in 1..=total {
            let dev = Arc::new(FaultyDevice::new(image_len(&g), seed ^ at));
            lay_down(&dev);
            let region = Arc::new(sim(nv_len));
            let nv_box = || nv.then(|| Box::new(region.clone()) as Box<dyn Region>);
            let disk = LogDisk::format(dev.clone(), g, nv_box(), opts).unwrap();
            let mut model = Model::new(nv && !msync);
            dev.crash_after_writes(at, mode);
            let finished = workload_of(&disk, &mut model, seed, ops, 1, !long_chains);
            drop(disk);
            if finished {
                dev.crash_now(mode);
            } else {
                assert!(dev.reboot(), "the workload stopped without a crash");
            }
            region.crash(at);
            let context = format!(
                "seed {seed:#x}, crash after write {at} of {total}, {mode:?}, nv={nv}, {partial:?}, {cleaner:?}, {reads:?}, background={background}, background_clean={}",
                opts.background_clean
            );
            let disk = LogDisk::open(dev.clone(), nv_box(), opts)
                .unwrap_or_else(|e| panic!("{context}: does not open: {e}"));
            chained += u64::from(disk.recovered().segments_read < g.segments);
            model.check_and_settle(&disk, &context);
            // The recovered disk keeps working and recovers again.
            assert!(
                workload_of(&disk, &mut model, seed + 1, 40, 1_000_000, !long_chains),
                "{context}"
            );
            disk.flush().unwrap();
            model.flushed();
            drop(disk);
            dev.crash_now(mode);
            region.crash(at + 1);
            let disk = LogDisk::open(dev, nv_box(), opts)
                .unwrap_or_else(|e| panic!("{context}: second recovery fails: {e}"));
            model.check_and_settle(&disk, &format!("{context} (second recovery)"));
            checked += 1;
        }
    }
    assert_eq!(checked, 3 * total);
    (chained, checked)
}

#[test]
fn every_crash_point_volatile_append() {
    crash_points(
        false,
        PartialSegments::Append,
        CleanerPolicy::Greedy,
        Reads::LiveOnly { gap: 0, threads: 1 },
        false,
        true,
    );
}

#[test]
fn every_crash_point_volatile_close_cost_benefit() {
    crash_points(
        false,
        PartialSegments::Close,
        CleanerPolicy::CostBenefit,
        Reads::Whole,
        false,
        false,
    );
}

#[test]
fn every_crash_point_nv_cache_age_sort() {
    crash_points(
        true,
        PartialSegments::Append,
        CleanerPolicy::AgeSort,
        Reads::LiveOnly { gap: 1, threads: 3 },
        false,
        true,
    );
}

/// The NV region as the default spec has it, a file persisted by `msync`:
/// writes are synced at the log disk's flush (and before any slot is
/// cleared), and every crash point keeps every write flushed before it, and
/// nothing older than it.
#[test]
fn every_crash_point_nv_cache_msync_region() {
    for background in [false, true] {
        crash_points_on(
            true,
            PartialSegments::Append,
            CleanerPolicy::Greedy,
            Reads::LiveOnly { gap: 1, threads: 2 },
            background,
            background,
            true,
            false,
            None,
        );
    }
}

/// Chains longer than the disk: at the default checkpoint interval (more
/// segment writes than the small disk has segments) segments are emptied
/// and wanted again before the next checkpoint — held until one is durable
/// — and the chain of segments opened since a checkpoint wraps around the
/// disk. At every crash point the data survives, and strict builds check
/// that the chain found what reading every segment finds.
#[test]
fn every_crash_point_with_chains_longer_than_the_disk() {
    for (nv, partial, background) in [
        (false, PartialSegments::Append, false),
        (false, PartialSegments::Close, true),
        (true, PartialSegments::Append, false),
        (true, PartialSegments::Append, true),
    ] {
        let (chained, recoveries) = crash_points_on(
            nv,
            partial,
            CleanerPolicy::Greedy,
            Reads::Whole,
            background,
            background,
            false,
            true,
            None,
        );
        // The rest read every segment: a crash point inside a segment's
        // first write leaves a link that does not decode.
        assert!(
            chained * 2 >= recoveries,
            "nv={nv}, {partial:?}, background={background}: {chained} of {recoveries} recoveries followed the chain"
        );
    }
}

/// The device was another log disk's before the format (a long-lived one:
/// reopened after crashes, so its sequences are far past the new disk's,
/// and its segments hold partial writes at every depth): at every crash
/// point nothing of it reads back, as nothing the new disk never wrote may.
#[test]
fn every_crash_point_on_a_device_formatted_again() {
    let g = small();
    let earlier = {
        let dev = Arc::new(cairn_store::MemoryDevice::new(image_len(&g)));
        let opts = options(CleanerPolicy::Greedy);
        let mut model = Model::new(false);
        let mut disk = LogDisk::format(dev.clone(), g, None, opts).unwrap();
        for round in 0..4 {
            // Versions far from the new disk's: none of them is ever valid.
            assert!(workload_of(
                &disk,
                &mut model,
                0xea71 + round,
                120,
                1 << 40,
                false
            ));
            disk.flush().unwrap();
            // A crash (no close): the reopen moves the sequence on by 2^32.
            drop(disk);
            disk = LogDisk::open(dev.clone(), None, opts).unwrap();
        }
        drop(disk);
        let mut image = vec![0u8; image_len(&g) as usize];
        dev.read_at(&mut image, 0).unwrap();
        image
    };
    for (nv, partial) in [
        (false, PartialSegments::Append),
        (true, PartialSegments::Append),
    ] {
        crash_points_on(
            nv,
            partial,
            CleanerPolicy::Greedy,
            Reads::Whole,
            false,
            false,
            false,
            false,
            Some(&earlier),
        );
    }
}

#[test]
fn every_crash_point_nv_cache_greedy_whole_reads() {
    crash_points(
        true,
        PartialSegments::Append,
        CleanerPolicy::Greedy,
        Reads::Whole,
        false,
        false,
    );
}

/// The background destage writer: the device sees the same operations in the
/// same order, so every crash point of the synchronous run is one here too —
/// with the workload going on staging NV writes while a segment write is in
/// flight (and while the device has already crashed under it), with and
/// without the background cleaner's reads running beside it.
#[test]
fn every_crash_point_nv_cache_background_destage() {
    for (cleaner, reads, background_clean) in [
        (
            CleanerPolicy::Greedy,
            Reads::LiveOnly { gap: 2, threads: 4 },
            true,
        ),
        (CleanerPolicy::AgeSort, Reads::Whole, true),
        (
            CleanerPolicy::Greedy,
            Reads::LiveOnly { gap: 1, threads: 2 },
            false,
        ),
    ] {
        crash_points(
            true,
            PartialSegments::Append,
            cleaner,
            reads,
            true,
            background_clean,
        );
    }
}

/// Volatile mode with the background writer: full segment buffers are
/// queued while the workload fills the next, and a flush waits for them; a
/// crash at any device write, with reads served from the queued buffers
/// meanwhile, loses nothing flushed.
#[test]
fn every_crash_point_volatile_background_destage() {
    for (partial, reads) in [
        (
            PartialSegments::Append,
            Reads::LiveOnly { gap: 2, threads: 4 },
        ),
        (PartialSegments::Close, Reads::Whole),
    ] {
        crash_points(false, partial, CleanerPolicy::Greedy, reads, true, true);
    }
}

/// The background cleaner's reads run on other threads while the writer goes
/// on, yet which user write collects a pass, and so the device's sequence of
/// writes and flushes, depends on the operations alone: the crash points
/// enumerated above are the same in every run.
#[test]
fn background_cleaning_is_deterministic() {
    let g = small();
    let seed = 0x5eed_c1ea;
    let run = || {
        let dev = Arc::new(FaultyDevice::new(image_len(&g), seed));
        let region = Box::new(SimRegion::new(12 * 1024)) as Box<dyn Region>;
        let opts = Options {
            background_destage: true,
            ..Reads::LiveOnly { gap: 1, threads: 4 }.apply(options(CleanerPolicy::Greedy))
        };
        let disk = LogDisk::format(dev.clone(), g, Some(region), opts).unwrap();
        assert!(workload(&disk, &mut Model::new(true), seed, 600, 1));
        let m = Metrics {
            cleaner_read_ns: 0,
            ..disk.metrics()
        };
        let live = disk.segment_live();
        drop(disk);
        let c = dev.counts();
        (c.writes, c.flushes, c.reads, m, live)
    };
    let first = run();
    assert!(first.3.cleaner_background_passes > 10, "{:?}", first.3);
    for _ in 0..4 {
        assert_eq!(run(), first, "seed {seed:#x}");
    }
}
