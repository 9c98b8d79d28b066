//! The log disk against models: round trips in both modes, the cleaner, and the
//! crash property — every write acknowledged before the last completed flush
//! reads back exactly, nothing reads back data never written, and the image
//! opens without repair — at every device crash point, with torn and reordered
//! writes, and across random crash/recover cycles (proptest).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_store::logdisk::{
    CleanerPolicy, Geometry, LogDisk, LogDiskError, Metrics, Options, PartialSegments,
};
use cairn_store::ntl::{Region, SimRegion};
use cairn_store::{CrashMode, Device, FaultyDevice, MemoryDevice};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const B: usize = 512;

fn small() -> Geometry {
    Geometry {
        block_size: B as u32,
        segment_blocks: 8,
        segments: 12,
        logical_blocks: 40,
    }
}

fn image_len(g: &Geometry) -> u64 {
    g.image_blocks() * u64::from(g.block_size)
}

/// A block's contents that name the block and the version written.
fn pattern(logical: u64, version: u64) -> Vec<u8> {
    let mut v = vec![0u8; B];
    for (i, chunk) in v.chunks_exact_mut(16).enumerate() {
        chunk[..8].copy_from_slice(&logical.to_le_bytes());
        chunk[8..].copy_from_slice(&(version ^ i as u64).to_le_bytes());
    }
    v
}

fn version_of(logical: u64, data: &[u8]) -> Option<u64> {
    if data.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let version = u64::from_le_bytes(data[8..16].try_into().ok()?);
    (data == pattern(logical, version).as_slice()).then_some(version)
}

/// Synchronous destaging unless a test asks for the background writer.
fn options(cleaner: CleanerPolicy) -> Options {
    Options {
        cleaner,
        checkpoint_interval: 5,
        background_destage: false,
        ..Options::default()
    }
}

/// How the cleaner reads its victims.
#[derive(Clone, Copy, Debug)]
enum Reads {
    /// Every victim whole, in one I/O.
    Whole,
    /// Every victim live blocks only, bridging `gap` dead blocks, on
    /// `threads` threads.
    LiveOnly { gap: u32, threads: u32 },
}

impl Reads {
    fn apply(self, o: Options) -> Options {
        match self {
            Reads::Whole => Options {
                live_read_below: 0.0,
                ..o
            },
            Reads::LiveOnly { gap, threads } => Options {
                live_read_below: 1.0,
                live_read_gap: gap,
                cleaner_read_threads: threads,
                ..o
            },
        }
    }
}

#[test]
fn round_trip_in_both_modes_with_cleaning() {
    for nv in [false, true] {
        for cleaner in CleanerPolicy::ALL {
            let g = small();
            let dev = MemoryDevice::new(image_len(&g));
            let region: Option<Box<dyn Region>> =
                nv.then(|| Box::new(SimRegion::new(16 * 1024)) as Box<dyn Region>);
            let disk = LogDisk::format(dev, g, region, options(cleaner)).unwrap();
            let mut model = BTreeMap::new();
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            for version in 1..=3000u64 {
                let l = if rng.random_bool(0.7) {
                    rng.random_range(0..8)
                } else {
                    rng.random_range(0..g.logical_blocks)
                };
                disk.write_blocks(l, &pattern(l, version)).unwrap();
                model.insert(l, version);
                if version % 97 == 0 {
                    disk.flush().unwrap();
                }
            }
            let mut buf = vec![0u8; B];
            for l in 0..g.logical_blocks {
                disk.read_block(l, &mut buf).unwrap();
                assert_eq!(
                    version_of(l, &buf),
                    Some(model.get(&l).copied().unwrap_or(0)),
                    "block {l} nv={nv} {cleaner:?}"
                );
            }
            let m = disk.metrics();
            assert!(
                m.cleaner_segment_reads > 0,
                "{cleaner:?} never cleaned: {m:?}"
            );
            assert!(m.write_amplification().unwrap() >= 1.0);
            if nv {
                assert!(m.nv_write_hits > 0);
                assert_eq!(
                    m.partial_segments, 0,
                    "NV mode never writes partial segments"
                );
            } else {
                assert!(m.partial_segments > 0);
            }
        }
    }
}

#[test]
fn byte_granular_device_io_round_trips() {
    let g = small();
    let disk = LogDisk::format(
        MemoryDevice::new(image_len(&g)),
        g,
        None,
        Options::default(),
    )
    .unwrap();
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 13 + 1) as u8).collect();
    disk.write_at(&data, 700).unwrap();
    let mut back = vec![0u8; 3000];
    disk.read_at(&mut back, 700).unwrap();
    assert_eq!(back, data);
    let mut around = vec![0xffu8; 100];
    disk.read_at(&mut around, 650).unwrap();
    assert!(around[..50].iter().all(|&b| b == 0));
    assert_eq!(around[50..], data[..50]);
    assert!(disk.write_at(&[1], disk.len()).is_err());
}

#[test]
fn reopen_after_close_and_after_plain_drop() {
    for close in [true, false] {
        let g = small();
        let dev = Arc::new(MemoryDevice::new(image_len(&g)));
        let disk = LogDisk::format(dev.clone(), g, None, Options::default()).unwrap();
        for l in 0..g.logical_blocks {
            disk.write_blocks(l, &pattern(l, l + 100)).unwrap();
        }
        disk.flush().unwrap();
        if close {
            disk.close().unwrap();
        }
        drop(disk);
        let disk = LogDisk::open(dev, None, Options::default()).unwrap();
        let mut buf = vec![0u8; B];
        for l in 0..g.logical_blocks {
            disk.read_block(l, &mut buf).unwrap();
            assert_eq!(version_of(l, &buf), Some(l + 100));
        }
    }
}

/// What a block may read back after a crash.
#[derive(Clone, Debug, Default)]
struct Allowed {
    /// Version as of the last completed flush (0 = never written).
    durable: u64,
    /// Versions written since (any may have reached the disk).
    since: Vec<u64>,
    /// Trimmed since the last check and not durably rewritten: TRIM is
    /// advisory, so the block may read zeroes or any version ever written.
    loose: bool,
    /// Every version ever written to the block.
    ever: Vec<u64>,
}

struct Model {
    blocks: BTreeMap<u64, Allowed>,
    /// NV mode: every completed write is durable at once.
    nv: bool,
}

impl Model {
    fn new(nv: bool) -> Self {
        Self {
            blocks: BTreeMap::new(),
            nv,
        }
    }

    /// A write that completed (`done`) or failed midway (`!done`).
    fn write(&mut self, l: u64, version: u64, done: bool) {
        let a = self.blocks.entry(l).or_default();
        a.ever.push(version);
        if self.nv && done {
            a.durable = version;
            a.since.clear();
            a.loose = false;
        } else {
            a.since.push(version);
        }
    }

    /// A completed trim: the block reads zeroes now, and after a crash
    /// zeroes or any version ever written to it.
    fn trim(&mut self, l: u64) {
        let a = self.blocks.entry(l).or_default();
        a.since.clear();
        a.durable = 0;
        a.loose = true;
    }

    fn flushed(&mut self) {
        for a in self.blocks.values_mut() {
            if let Some(&last) = a.since.last() {
                a.durable = last;
                a.since.clear();
                a.loose = false;
            }
        }
    }

    /// Checks every block of `disk`, then records what it read as durable.
    fn check_and_settle<D: Device + 'static>(&mut self, disk: &LogDisk<D>, context: &str) {
        let mut buf = vec![0u8; B];
        for l in 0..disk.geometry().logical_blocks {
            disk.read_block(l, &mut buf)
                .unwrap_or_else(|e| panic!("{context}: block {l} unreadable: {e}"));
            let got = version_of(l, &buf)
                .unwrap_or_else(|| panic!("{context}: block {l} holds data never written"));
            let a = self.blocks.entry(l).or_default();
            assert!(
                got == a.durable
                    || a.since.contains(&got)
                    || (a.loose && (got == 0 || a.ever.contains(&got))),
                "{context}: block {l} reads version {got}; durable {} / since {:?} / trimmed {}",
                a.durable,
                a.since,
                a.loose
            );
            a.durable = got;
            a.since.clear();
            a.loose = false;
        }
    }
}

/// A seeded workload of writes (1–3 blocks) and flushes. Returns on the first
/// error (the crash), having told the model.
fn workload<D: Device + 'static>(
    disk: &LogDisk<D>,
    model: &mut Model,
    seed: u64,
    ops: u64,
    base: u64,
) -> bool {
    let g = disk.geometry();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for op in 0..ops {
        if rng.random_ratio(1, 9) {
            if disk.flush().is_err() {
                return false;
            }
            model.flushed();
            continue;
        }
        if rng.random_ratio(1, 12) {
            let count = rng.random_range(1..=4u64);
            let first = rng.random_range(0..g.logical_blocks - count);
            if disk.trim_blocks(first, count).is_err() {
                return false;
            }
            for l in first..first + count {
                model.trim(l);
            }
            // A trimmed block reads zeroes at once.
            let mut buf = vec![0u8; B];
            disk.read_block(first, &mut buf).unwrap();
            assert!(buf.iter().all(|&b| b == 0), "a trimmed block reads data");
            continue;
        }
        let count = rng.random_range(1..=3u64);
        let first = rng.random_range(0..g.logical_blocks - count);
        let version = base + op * 4;
        let mut data = Vec::with_capacity(count as usize * B);
        for l in first..first + count {
            data.extend_from_slice(&pattern(l, version + (l - first)));
        }
        let ok = disk.write_blocks(first, &data).is_ok();
        for l in first..first + count {
            model.write(l, version + (l - first), ok);
        }
        if !ok {
            return false;
        }
    }
    true
}

fn crash_points(
    nv: bool,
    partial: PartialSegments,
    cleaner: CleanerPolicy,
    reads: Reads,
    background: bool,
    background_clean: bool,
) {
    crash_points_on(
        nv,
        partial,
        cleaner,
        reads,
        background,
        background_clean,
        false,
    );
}

/// [`crash_points`], the NV region standing for an `msync`-persisted file
/// when `msync` is set: its flushes are system calls, so the log disk defers
/// durability to a sync (its flush, or before any slot is cleared), and what
/// must survive is what was flushed, not every acknowledged write.
#[allow(clippy::fn_params_excessive_bools)]
fn crash_points_on(
    nv: bool,
    partial: PartialSegments,
    cleaner: CleanerPolicy,
    reads: Reads,
    background: bool,
    background_clean: bool,
    msync: bool,
) {
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
        ..options(cleaner)
    });
    let nv_len = 12 * 1024;
    // Count the device writes of an uninterrupted run.
    let total = {
        let dev = Arc::new(FaultyDevice::new(image_len(&g), seed));
        let region: Option<Box<dyn Region>> = nv.then(|| Box::new(sim(nv_len)) as Box<dyn Region>);
        let disk = LogDisk::format(dev.clone(), g, region, opts).unwrap();
        let before = dev.counts().writes;
        let mut model = Model::new(nv && !msync);
        assert!(workload(&disk, &mut model, seed, ops, 1));
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
            let region = Arc::new(sim(nv_len));
            let nv_box = || nv.then(|| Box::new(region.clone()) as Box<dyn Region>);
            let disk = LogDisk::format(dev.clone(), g, nv_box(), opts).unwrap();
            let mut model = Model::new(nv && !msync);
            dev.crash_after_writes(at, mode);
            let finished = workload(&disk, &mut model, seed, ops, 1);
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
            model.check_and_settle(&disk, &context);
            // The recovered disk keeps working and recovers again.
            assert!(
                workload(&disk, &mut model, seed + 1, 40, 1_000_000),
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

#[derive(Clone, Debug)]
enum Op {
    Write(u64, u8),
    Trim(u64, u8),
    Flush,
    Crash(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u64..40, 1u8..4).prop_map(|(l, n)| Op::Write(l, n)),
        1 => (0u64..40, 1u8..6).prop_map(|(l, n)| Op::Trim(l, n)),
        2 => Just(Op::Flush),
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

/// Sparse victims read live blocks only (in runs, on several threads, or
/// one by one) clean exactly as whole-segment reads do — same victims, same
/// blocks copied, same data — while reading a fraction of the bytes; and
/// after a crash every flushed write reads back.
#[test]
fn sparse_victims_read_live_only_clean_as_whole_reads_do() {
    let g = Geometry {
        block_size: B as u32,
        segment_blocks: 30,
        segments: 40,
        logical_blocks: 464, // utilisation 0.4
    };
    for nv in [false, true] {
        let mut results = Vec::new();
        for reads in [
            Reads::Whole,
            Reads::LiveOnly { gap: 0, threads: 1 },
            Reads::LiveOnly { gap: 2, threads: 4 },
        ] {
            let opts = reads.apply(options(CleanerPolicy::Greedy));
            let dev = Arc::new(FaultyDevice::new(image_len(&g), 3));
            let region = Arc::new(SimRegion::new(24 * 1024));
            let nv_box = || nv.then(|| Box::new(region.clone()) as Box<dyn Region>);
            let disk = LogDisk::format(dev.clone(), g, nv_box(), opts).unwrap();
            let mut model = vec![0u64; g.logical_blocks as usize];
            let mut rng = ChaCha8Rng::seed_from_u64(11);
            for version in 1..=6000u64 {
                let l = rng.random_range(0..g.logical_blocks);
                disk.write_blocks(l, &pattern(l, version)).unwrap();
                model[l as usize] = version;
                if version % 250 == 0 {
                    disk.flush().unwrap();
                }
            }
            disk.flush().unwrap();
            let m = disk.metrics();
            let whole = m.cleaner_segment_reads * u64::from(g.segment_blocks * g.block_size);
            assert!(m.cleaner_segment_reads > 20, "{reads:?}: {m:?}");
            match reads {
                Reads::Whole => {
                    assert_eq!(m.cleaner_read_ios, m.cleaner_segment_reads);
                }
                Reads::LiveOnly { .. } => {
                    assert!(m.cleaner_read_ios > m.cleaner_segment_reads, "{m:?}");
                    assert!(m.cleaner_read_bytes < whole / 2, "{reads:?}: {m:?}");
                }
            }
            let mut buf = vec![0u8; B];
            for (l, &version) in model.iter().enumerate() {
                disk.read_block(l as u64, &mut buf).unwrap();
                assert_eq!(
                    version_of(l as u64, &buf),
                    Some(version),
                    "{reads:?} block {l}"
                );
            }
            drop(disk);
            dev.crash_now(CrashMode::DropUnflushed);
            region.crash(5);
            let disk = LogDisk::open(dev, nv_box(), opts).unwrap();
            for (l, &version) in model.iter().enumerate() {
                disk.read_block(l as u64, &mut buf).unwrap();
                assert_eq!(
                    version_of(l as u64, &buf),
                    Some(version),
                    "{reads:?} block {l} after the crash"
                );
            }
            results.push((
                m.cleaner_segment_reads,
                m.cleaner_blocks_written,
                m.cleaner_segment_writes,
            ));
        }
        assert!(
            results.windows(2).all(|w| w[0] == w[1]),
            "nv={nv}: the read strategy changed what was cleaned: {results:?}"
        );
    }
}

/// A background segment write that fails (EIO) fails the disk's later
/// device operations — no device flush may retire the NV slots of a segment
/// that never reached the disk — and loses no acknowledged write: reopened,
/// the disk recovers them from the NV cache.
#[test]
fn a_failed_background_write_fails_later_device_operations_and_loses_nothing() {
    use cairn_store::device::DeviceOp;
    let g = small();
    for after in [0u64, 1, 3, 6] {
        let dev = Arc::new(FaultyDevice::new(image_len(&g), 9));
        let region = Arc::new(SimRegion::new(12 * 1024));
        let nv_box = || Some(Box::new(region.clone()) as Box<dyn Region>);
        let opts = Options {
            background_destage: true,
            ..options(CleanerPolicy::Greedy)
        };
        let disk = LogDisk::format(dev.clone(), g, nv_box(), opts).unwrap();
        dev.fail(DeviceOp::Write, after);
        // Some(version) acknowledged; None: a failed write, either version.
        let mut model: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        let mut errors = 0;
        for version in 1..=300u64 {
            let l = version * 7 % g.logical_blocks;
            let ok = disk.write_blocks(l, &pattern(l, version)).is_ok();
            model.insert(l, ok.then_some(version));
            errors += u32::from(!ok);
        }
        assert!(
            errors > 0,
            "after {after}: the injected failure never surfaced"
        );
        let e = disk.sync_checkpoint().unwrap_err();
        assert!(e.to_string().contains("reopen"), "after {after}: {e}");
        drop(disk);
        let disk = LogDisk::open(dev, nv_box(), opts).unwrap();
        assert_acknowledged_read_back(&disk, &model, &format!("after {after}"));
    }
}

/// Every block of `model` reads back: `Some(version)`, a write that was
/// acknowledged, exactly; `None`, a write that failed, as anything readable.
fn assert_acknowledged_read_back<D: Device + 'static>(
    disk: &LogDisk<D>,
    model: &BTreeMap<u64, Option<u64>>,
    context: &str,
) {
    let mut buf = vec![0u8; B];
    for (&l, &version) in model {
        disk.read_block(l, &mut buf)
            .unwrap_or_else(|e| panic!("{context}: block {l}: {e}"));
        if let Some(version) = version {
            assert_eq!(version_of(l, &buf), Some(version), "{context}: block {l}");
        }
    }
}

/// A device that takes reads in batches ([`Device::read_batch`]), as a file
/// device does through `io_uring`, by reading each in turn from a faulty
/// device; it counts the batches.
struct Batching {
    inner: Arc<FaultyDevice>,
    batches: std::sync::atomic::AtomicU64,
}

impl Device for Batching {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.read_at(buf, offset)
    }
    fn read_batch(&self, reads: &mut [(u64, &mut [u8])]) -> Result<bool, cairn_store::DeviceError> {
        if !reads.is_empty() {
            self.batches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        for (offset, buf) in reads.iter_mut() {
            self.inner.read_at(buf, *offset)?;
        }
        Ok(true)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> Result<(), cairn_store::DeviceError> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.discard(offset, len)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn describe(&self) -> String {
        "batching".into()
    }
}

/// On a device that batches reads, the background cleaner issues each
/// pass's reads as one batch (and the synchronous cleaner its reads); a
/// read that fails in a batch fails the write that collects the pass, and
/// nothing acknowledged is lost: every block reads back after a reopen.
#[test]
fn a_failed_batched_cleaner_read_fails_the_pass_and_loses_nothing() {
    use cairn_store::device::DeviceOp;
    let g = small();
    for (after, background_clean) in [(0u64, true), (5, true), (2, false)] {
        let faulty = Arc::new(FaultyDevice::new(image_len(&g), 11));
        let dev = Arc::new(Batching {
            inner: faulty.clone(),
            batches: std::sync::atomic::AtomicU64::new(0),
        });
        let region = Arc::new(SimRegion::new(12 * 1024));
        let nv_box = || Some(Box::new(region.clone()) as Box<dyn Region>);
        let opts = Options {
            background_destage: true,
            background_clean,
            ..Reads::LiveOnly { gap: 1, threads: 4 }.apply(options(CleanerPolicy::Greedy))
        };
        let disk = LogDisk::format(dev.clone(), g, nv_box(), opts).unwrap();
        let context = format!("after {after}, background_clean={background_clean}");
        // Some(version) acknowledged; None: a failed write, either version.
        let mut model: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        let mut errors = 0;
        let mut rng = ChaCha8Rng::seed_from_u64(after);
        for version in 1..=600u64 {
            if version == 200 {
                faulty.fail(DeviceOp::Read, after);
            }
            let l = rng.random_range(0..g.logical_blocks);
            let result = disk.write_blocks(l, &pattern(l, version));
            if let Err(e) = &result {
                assert!(e.to_string().contains("injected"), "{context}: {e}");
            }
            model.insert(l, result.is_ok().then_some(version));
            errors += u32::from(result.is_err());
        }
        assert!(
            dev.batches.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "{context}: no batch; {:?}",
            disk.metrics()
        );
        assert_eq!(errors, 1, "{context}: the injected failure surfaced once");
        drop(disk);
        let disk = LogDisk::open(dev, nv_box(), opts).unwrap();
        assert_acknowledged_read_back(&disk, &model, &context);
    }
}

#[test]
fn a_full_disk_says_no_space_and_loses_nothing() {
    // 45 live blocks in 7 segments of 7 data slots: too full to clean.
    let g = Geometry {
        block_size: B as u32,
        segment_blocks: 8,
        segments: 7,
        logical_blocks: 45,
    };
    let disk = LogDisk::format(
        MemoryDevice::new(image_len(&g)),
        g,
        None,
        Options::default(),
    )
    .unwrap();
    let mut last = BTreeMap::new();
    let mut refused = None;
    'rounds: for round in 1..50u64 {
        for l in 0..g.logical_blocks {
            match disk
                .write_blocks(l, &pattern(l, round))
                .and_then(|()| disk.flush())
            {
                Ok(()) => {
                    last.insert(l, round);
                }
                Err(LogDiskError::NoSpace) => {
                    refused = Some((l, round));
                    break 'rounds;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    let (refused_block, refused_version) = refused.expect("the disk fills up");
    // Every acknowledged write reads back; the refused one may or may not.
    let mut buf = vec![0u8; B];
    for (&l, &v) in &last {
        disk.read_block(l, &mut buf).unwrap();
        let got = version_of(l, &buf).unwrap();
        assert!(
            got == v || (l == refused_block && got == refused_version),
            "block {l}: {got}, acknowledged {v}"
        );
    }
}

/// The log disk over an `O_DIRECT` file: its own buffers are page-aligned, so
/// segment writes, cleaning, checkpoints and recovery go straight to the
/// device; a caller's unaligned buffer is bounced, never refused.
#[test]
fn direct_io_file_device_with_cleaning_and_reopen() {
    use cairn_store::device::{FileDevice, FileOptions};
    let g = Geometry {
        block_size: 4096,
        segment_blocks: 16,
        segments: 24,
        logical_blocks: 200,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("direct.img");
    let open = |create: bool| {
        FileDevice::open(
            &path,
            &FileOptions {
                create_len: create.then_some(image_len(&g)),
                direct: true,
                read_only: false,
                ..FileOptions::default()
            },
        )
    };
    let dev = match open(true) {
        Ok(dev) => dev,
        Err(e) => {
            eprintln!("skipped: this file system refuses O_DIRECT ({e})");
            return;
        }
    };
    let disk = LogDisk::format(dev, g, None, options(CleanerPolicy::CostBenefit)).unwrap();
    let mut model = vec![0u64; 200];
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut block = cairn_store::device::IoBuf::zeroed(4096);
    for version in 1..=2000u64 {
        let l = rng.random_range(0..200u64);
        block.fill((version % 251) as u8);
        block[..8].copy_from_slice(&version.to_le_bytes());
        disk.write_blocks(l, &block).unwrap();
        model[l as usize] = version;
        if version % 97 == 0 {
            disk.flush().unwrap();
        }
    }
    assert!(disk.metrics().cleaner_segment_reads > 0, "the cleaner ran");
    disk.close().unwrap();
    drop(disk);
    let disk = LogDisk::open(open(false).unwrap(), None, Options::default()).unwrap();
    // An unaligned caller buffer (offset 1 in a Vec) is bounced.
    let mut raw = vec![0u8; 4097];
    for (l, &version) in model.iter().enumerate() {
        let buf = &mut raw[1..];
        disk.read_block(l as u64, buf).unwrap();
        if version == 0 {
            assert!(buf.iter().all(|&b| b == 0));
        } else {
            assert_eq!(u64::from_le_bytes(buf[..8].try_into().unwrap()), version);
            assert!(buf[8..].iter().all(|&b| b == (version % 251) as u8));
        }
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

/// A memory device whose writes wait while the gate is shut, and which
/// checks every segment write it takes: each data block must match the CRC
/// its summary gives.
struct GatedDevice {
    inner: MemoryDevice,
    shut: std::sync::atomic::AtomicBool,
    /// Every write takes at least this long.
    delay_us: u64,
    bad: std::sync::Mutex<Vec<String>>,
    /// Writes done.
    writes: std::sync::atomic::AtomicU64,
}

impl GatedDevice {
    /// Open gate; every write takes at least `delay_us`.
    fn new(len: u64, delay_us: u64) -> Self {
        Self {
            inner: MemoryDevice::new(len),
            shut: std::sync::atomic::AtomicBool::new(false),
            delay_us,
            bad: std::sync::Mutex::new(Vec::new()),
            writes: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl Device for GatedDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), cairn_store::DeviceError> {
        while self.shut.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::thread::sleep(std::time::Duration::from_micros(self.delay_us));
        if buf.len() > B
            && let Ok(s) = cairn_store::logdisk::format::decode_summary(&buf[..B], B as u32)
        {
            for (i, e) in s.entries.iter().enumerate() {
                let data = &buf[(i + 1) * B..(i + 2) * B];
                if cairn_store::logdisk::format::crc32c(data) != e.crc {
                    self.bad.lock().unwrap().push(format!(
                        "segment {} write at slot {}: block {i} (logical {}) does not match its summary",
                        s.segment, s.first_slot, e.logical
                    ));
                }
            }
        }
        self.inner.write_at(buf, offset)?;
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }
    fn flush(&self) -> Result<(), cairn_store::DeviceError> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.discard(offset, len)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn describe(&self) -> String {
        "gated memory".into()
    }
}

/// The held-writer tests' disk: 40 segments of 8 blocks, 200 logical
/// blocks, on a gated device (gate open, no delay); NV mode with the
/// background writer on `writer_threads` threads, no background cleaning,
/// and no checkpoint before 1,000 segment writes. A 48 KiB region gives 75
/// NV slots: destaging starts above 56 dirty blocks.
fn held_writer_setup(writer_threads: u32) -> (Geometry, Arc<GatedDevice>, Options) {
    let g = Geometry {
        segments: 40,
        logical_blocks: 200,
        ..small()
    };
    let dev = Arc::new(GatedDevice::new(image_len(&g), 0));
    let opts = Options {
        background_destage: true,
        background_clean: false,
        writer_threads,
        checkpoint_interval: 1000,
        ..Options::default()
    };
    (g, dev, opts)
}

/// The background writer copies a destage's blocks out of their NV slots
/// when it reaches the write, which may be after the caller has rewritten
/// one of those blocks. The superseded slot must not be reused (and so
/// overwritten) before that copy: here the writer is held on the write
/// before, a block of the queued destage is rewritten, and the next writes
/// would take its old slot first if it were free.
#[test]
fn a_slot_superseded_under_a_queued_segment_write_is_not_reused_before_the_copy() {
    let (g, dev, opts) = held_writer_setup(1);
    // 75 slots: destaging starts above 56 dirty blocks.
    let region = Arc::new(SimRegion::new(48 * 1024));
    let disk = LogDisk::format(dev.clone(), g, Some(Box::new(region.clone())), opts).unwrap();
    assert_eq!(disk.nv_slots(), 75);
    dev.shut.store(true, std::sync::atomic::Ordering::Release);
    // Blocks 0..=56: the first destage (0..7) goes to the writer, which
    // copies it and waits at the gate; 57..64: the second (7..14) is queued
    // behind it, not yet copied.
    for l in 0..64 {
        disk.write_blocks(l, &pattern(l, 1)).unwrap();
    }
    assert_eq!(disk.metrics().user_segment_writes, 2);
    // Rewrite block 8 (in the queued destage), then two more writes: the
    // second would take block 8's old slot if it were already free.
    disk.write_blocks(8, &pattern(8, 2)).unwrap();
    disk.write_blocks(150, &pattern(150, 1)).unwrap();
    disk.write_blocks(151, &pattern(151, 1)).unwrap();
    dev.shut.store(false, std::sync::atomic::Ordering::Release);
    disk.close().unwrap();
    assert_eq!(dev.bad.lock().unwrap().as_slice(), &[] as &[String]);
    drop(disk);
    let disk = LogDisk::open(dev.clone(), Some(Box::new(region.clone())), opts).unwrap();
    let mut buf = vec![0u8; B];
    for (l, version) in (0..64)
        .map(|l| (l, 1 + u64::from(l == 8)))
        .chain([(150, 1), (151, 1)])
    {
        disk.read_block(l, &mut buf).unwrap();
        assert_eq!(version_of(l, &buf), Some(version), "block {l}");
    }
}

/// `drain` returns only once the background writer's queued segment write
/// is on the device: held at a shut gate, the write keeps `drain` waiting.
#[test]
fn drain_waits_for_the_queued_background_writes() {
    let (g, dev, opts) = held_writer_setup(1);
    let region = Box::new(SimRegion::new(48 * 1024)) as Box<dyn Region>;
    let disk = Arc::new(LogDisk::format(dev.clone(), g, Some(region), opts).unwrap());
    let before = dev.writes.load(std::sync::atomic::Ordering::Acquire);
    dev.shut.store(true, std::sync::atomic::Ordering::Release);
    // 57 dirty blocks pass the destage threshold (56 of 75 slots): one
    // segment write is queued, and held at the gate.
    for l in 0..57 {
        disk.write_blocks(l, &pattern(l, 1)).unwrap();
    }
    assert_eq!(disk.metrics().user_segment_writes, 1);
    let drained = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waiter = {
        let (disk, drained) = (disk.clone(), drained.clone());
        std::thread::spawn(move || {
            disk.drain().unwrap();
            drained.store(true, std::sync::atomic::Ordering::Release);
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let early = drained.load(std::sync::atomic::Ordering::Acquire);
    let held = dev.writes.load(std::sync::atomic::Ordering::Acquire);
    // Open the gate before asserting: a failure must not leave the disk's
    // writer stuck behind it.
    dev.shut.store(false, std::sync::atomic::Ordering::Release);
    waiter.join().unwrap();
    assert!(!early, "drain returned while the segment write was held");
    assert_eq!(held, before);
    assert!(drained.load(std::sync::atomic::Ordering::Acquire));
    assert_eq!(
        dev.writes.load(std::sync::atomic::Ordering::Acquire),
        before + 1
    );
    assert_eq!(dev.bad.lock().unwrap().as_slice(), &[] as &[String]);
    // Nothing is left in flight: the device stays still.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(
        dev.writes.load(std::sync::atomic::Ordering::Acquire),
        before + 1
    );
}

/// Volatile mode with the background writer: a full segment buffer is
/// queued and the caller fills a spare one. Held at a shut gate, three
/// queued buffers' blocks read back from the buffers (one of them rewritten
/// since, in the buffer being filled), a flush waits for every queued write,
/// and after it everything reads back from the device, reopened.
#[test]
fn volatile_segment_buffers_queued_on_the_writer_serve_reads_and_a_flush_waits_for_them() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (g, dev, opts) = held_writer_setup(2);
    let disk = Arc::new(LogDisk::format(dev.clone(), g, None, opts).unwrap());
    let before = dev.writes.load(Ordering::Acquire);
    dev.shut.store(true, Ordering::Release);
    // 7 data blocks per segment write: 21 blocks fill three buffers, all
    // queued (the writer holds three); 21 and 22 stay in the fourth.
    for l in 0..23 {
        disk.write_blocks(l, &pattern(l, 1)).unwrap();
    }
    disk.write_blocks(3, &pattern(3, 2)).unwrap();
    assert_eq!(disk.metrics().user_segment_writes, 3);
    let mut buf = vec![0u8; B];
    let version = |l: u64| 1 + u64::from(l == 3);
    // Checked after the gate opens: a failure must not leave the writer
    // stuck behind it.
    let held_reads: Vec<_> = (0..23)
        .map(|l| {
            disk.read_block(l, &mut buf)
                .map(|()| version_of(l, &buf))
                .map_err(|e| e.to_string())
        })
        .collect();
    let flushed = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (disk, flushed) = (disk.clone(), flushed.clone());
        std::thread::spawn(move || {
            disk.flush().unwrap();
            flushed.store(true, Ordering::Release);
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let early = flushed.load(Ordering::Acquire);
    let held = dev.writes.load(Ordering::Acquire);
    // Open the gate before asserting: a failure must not leave the writer
    // stuck behind it.
    dev.shut.store(false, Ordering::Release);
    flusher.join().unwrap();
    for (l, read) in (0..23).zip(held_reads) {
        assert_eq!(read, Ok(Some(version(l))), "block {l}, held");
    }
    assert!(!early, "flush returned while segment writes were held");
    assert_eq!(held, before);
    // The three queued writes and the flush's partial segment.
    assert_eq!(dev.writes.load(Ordering::Acquire), before + 4);
    assert_eq!(disk.metrics().partial_segments, 1);
    assert_eq!(dev.bad.lock().unwrap().as_slice(), &[] as &[String]);
    drop(disk);
    let disk = LogDisk::open(dev.clone(), None, opts).unwrap();
    for l in 0..23 {
        disk.read_block(l, &mut buf).unwrap();
        assert_eq!(version_of(l, &buf), Some(version(l)), "block {l}, reopened");
    }
}

/// An NV region where a background writer thread's read of bytes equal to
/// `hold` waits while `shut` (which opens for good after `timeout` of
/// waiting, should the caller itself wait for the writer), then reads
/// again: it holds a queued destage's copy of one block, which a
/// [`GatedDevice`] cannot (the copy comes before the device write).
struct GatedRegion {
    inner: SimRegion,
    hold: Vec<u8>,
    timeout: std::time::Duration,
    shut: std::sync::atomic::AtomicBool,
}

impl Region for GatedRegion {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), cairn_store::DeviceError> {
        use std::sync::atomic::Ordering;
        let writer = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("logdisk-destage"));
        self.inner.read(offset, buf)?;
        if writer && *buf == *self.hold {
            let start = std::time::Instant::now();
            while self.shut.load(Ordering::Acquire) {
                if start.elapsed() >= self.timeout {
                    // Stuck behind the writer: open for good.
                    self.shut.store(false, Ordering::Release);
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), cairn_store::DeviceError> {
        self.inner.write(offset, data)
    }
    fn load_u64(&self, offset: u64) -> Result<u64, cairn_store::DeviceError> {
        self.inner.load_u64(offset)
    }
    fn store_u64(&self, offset: u64, value: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.store_u64(offset, value)
    }
    fn flush(&self, ranges: &[(u64, u64)]) -> Result<(), cairn_store::DeviceError> {
        self.inner.flush(ranges)
    }
    fn fence(&self) -> Result<(), cairn_store::DeviceError> {
        self.inner.fence()
    }
    fn describe(&self) -> String {
        "gated simulated region".into()
    }
}

/// A slot superseded while sitting in a destage that was queued *after* a
/// background flush must stay held when that flush is retired (the flush
/// covers the destages before it, not this one). Here the writer's copy of
/// the third destage is held at the region; its block 15 is rewritten, and
/// the flush before it is retired by the next write: with the slot freed
/// there, write 88 takes it and the third segment is written with block
/// 88's data under block 15's summary entry.
#[test]
fn a_slot_superseded_under_a_destage_queued_after_a_flush_is_held_past_that_flush() {
    let (g, dev, opts) = held_writer_setup(2);
    // The third destage's copy of block 15 waits.
    let region = Arc::new(GatedRegion {
        inner: SimRegion::new(48 * 1024),
        hold: pattern(15, 1),
        timeout: std::time::Duration::from_millis(500),
        shut: std::sync::atomic::AtomicBool::new(true),
    });
    let disk = LogDisk::format(dev.clone(), g, Some(Box::new(region.clone())), opts).unwrap();
    // 75 slots; a destage (7 blocks) above 56 dirty; a background flush once
    // 9 destaged slots are not covered by one.
    assert_eq!(disk.nv_slots(), 75);
    let flushes = disk.metrics().device_flushes;
    // Destages of 0..7 (at block 56), 7..14 (at 63, then a flush) and
    // 14..21 (at 70, copy held); then 71..=73 leave one free slot.
    for l in 0..74 {
        disk.write_blocks(l, &pattern(l, 1)).unwrap();
    }
    let m = disk.metrics();
    assert_eq!(
        (m.user_segment_writes, m.device_flushes),
        (3, flushes),
        "{m:?}"
    );
    // The last free slot; block 15's old slot is superseded under the held
    // copy. Block 74 finds no free slot and retires the flush (freeing the
    // 14 slots it covers); 88 would take block 15's old slot if that freed
    // it too.
    disk.write_blocks(15, &pattern(15, 2)).unwrap();
    for l in 74..=88 {
        disk.write_blocks(l, &pattern(l, 1)).unwrap();
    }
    assert!(disk.metrics().device_flushes > flushes);
    region
        .shut
        .store(false, std::sync::atomic::Ordering::Release);
    disk.close().unwrap();
    assert_eq!(dev.bad.lock().unwrap().as_slice(), &[] as &[String]);
    drop(disk);
    let disk = LogDisk::open(dev.clone(), Some(Box::new(region.clone())), opts).unwrap();
    let mut buf = vec![0u8; B];
    for l in 0..=88 {
        disk.read_block(l, &mut buf).unwrap();
        assert_eq!(
            version_of(l, &buf),
            Some(1 + u64::from(l == 15)),
            "block {l}"
        );
    }
}

/// A background cleaner write is queued with the map already pointing at
/// the blocks' new places: until the device has them, reads are served
/// from the write's buffer. Here every device write takes 3 ms, and all
/// blocks are read back after every write (hundreds of those reads find a
/// cleaner write still queued; with reads sent to the device instead, the
/// test fails on a checksum mismatch).
#[test]
fn blocks_moved_by_a_queued_cleaner_write_read_back_before_it_lands() {
    let g = Geometry {
        segments: 200,
        logical_blocks: 600,
        ..small()
    };
    let dev = Arc::new(GatedDevice::new(image_len(&g), 3000));
    let region = Box::new(SimRegion::new(48 * 1024)) as Box<dyn Region>;
    let opts = Options {
        background_destage: true,
        background_clean: true,
        checkpoint_interval: 1000,
        ..options(CleanerPolicy::Greedy)
    };
    let disk = LogDisk::format(dev.clone(), g, Some(region), opts).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut newest = vec![0u64; g.logical_blocks as usize];
    let mut buf = vec![0u8; B];
    let mut checked = 0;
    for op in 1..=6000u64 {
        let l = rng.random_range(0..g.logical_blocks);
        disk.write_blocks(l, &pattern(l, op)).unwrap();
        newest[l as usize] = op;
        checked += 1;
        for (l, &version) in newest.iter().enumerate() {
            disk.read_block(l as u64, &mut buf)
                .unwrap_or_else(|e| panic!("op {op}: block {l}: {e}"));
            assert_eq!(
                version_of(l as u64, &buf),
                Some(version),
                "op {op}: block {l}"
            );
        }
    }
    let m = disk.metrics();
    assert!(m.cleaner_background_passes >= 10, "{checked} checks: {m:?}");
    disk.close().unwrap();
    assert_eq!(dev.bad.lock().unwrap().as_slice(), &[] as &[String]);
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
