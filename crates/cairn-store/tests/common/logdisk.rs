//! Helpers the log disk's integration tests share: a small geometry, block
//! contents that name their block and version, and [`Model`], what each
//! block may read back after a crash, with the seeded [`workload`] that
//! drives it.

use std::collections::BTreeMap;

use cairn_store::Device;
use cairn_store::logdisk::{CleanerPolicy, Geometry, LogDisk, Options};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const B: usize = 512;

pub fn small() -> Geometry {
    Geometry {
        block_size: B as u32,
        segment_blocks: 8,
        segments: 12,
        logical_blocks: 40,
    }
}

pub fn image_len(g: &Geometry) -> u64 {
    g.image_blocks() * u64::from(g.block_size)
}

/// A block's contents that name the block and the version written.
pub fn pattern(logical: u64, version: u64) -> Vec<u8> {
    let mut v = vec![0u8; B];
    for (i, chunk) in v.chunks_exact_mut(16).enumerate() {
        chunk[..8].copy_from_slice(&logical.to_le_bytes());
        chunk[8..].copy_from_slice(&(version ^ i as u64).to_le_bytes());
    }
    v
}

pub fn version_of(logical: u64, data: &[u8]) -> Option<u64> {
    if data.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let version = u64::from_le_bytes(data[8..16].try_into().ok()?);
    (data == pattern(logical, version).as_slice()).then_some(version)
}

/// Synchronous destaging unless a test asks for the background writer.
pub fn options(cleaner: CleanerPolicy) -> Options {
    Options {
        cleaner,
        checkpoint_interval: 5,
        background_destage: false,
        ..Options::default()
    }
}

/// How the cleaner reads its victims.
#[derive(Clone, Copy, Debug)]
pub enum Reads {
    /// Every victim whole, in one I/O.
    Whole,
    /// Every victim live blocks only, bridging `gap` dead blocks, on
    /// `threads` threads.
    LiveOnly { gap: u32, threads: u32 },
}

impl Reads {
    pub fn apply(self, o: Options) -> Options {
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

pub struct Model {
    blocks: BTreeMap<u64, Allowed>,
    /// NV mode: every completed write is durable at once.
    nv: bool,
}

impl Model {
    pub fn new(nv: bool) -> Self {
        Self {
            blocks: BTreeMap::new(),
            nv,
        }
    }

    /// A write that completed (`done`) or failed midway (`!done`).
    pub fn write(&mut self, l: u64, version: u64, done: bool) {
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
    pub fn trim(&mut self, l: u64) {
        let a = self.blocks.entry(l).or_default();
        a.since.clear();
        a.durable = 0;
        a.loose = true;
    }

    pub fn flushed(&mut self) {
        for a in self.blocks.values_mut() {
            if let Some(&last) = a.since.last() {
                a.durable = last;
                a.since.clear();
                a.loose = false;
            }
        }
    }

    /// Checks every block of `disk`, then records what it read as durable.
    pub fn check_and_settle<D: Device + 'static>(&mut self, disk: &LogDisk<D>, context: &str) {
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

/// A seeded workload of writes (1–3 blocks), trims, flushes and now and
/// then a clean close (the disk kept in use: the writes after it go on from
/// its marked checkpoint). Returns on the first error (the crash), having
/// told the model.
pub fn workload<D: Device + 'static>(
    disk: &LogDisk<D>,
    model: &mut Model,
    seed: u64,
    ops: u64,
    base: u64,
) -> bool {
    workload_of(disk, model, seed, ops, base, true)
}

/// [`workload`], with closes and trims only if `closes_and_trims`: without
/// them (each of which ends in a checkpoint) the log runs long between
/// checkpoints.
pub fn workload_of<D: Device + 'static>(
    disk: &LogDisk<D>,
    model: &mut Model,
    seed: u64,
    ops: u64,
    base: u64,
    closes_and_trims: bool,
) -> bool {
    let g = disk.geometry();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for op in 0..ops {
        if rng.random_ratio(1, 40) && closes_and_trims {
            if disk.close().is_err() {
                return false;
            }
            model.flushed();
            continue;
        }
        if rng.random_ratio(1, 9) {
            if disk.flush().is_err() {
                return false;
            }
            model.flushed();
            continue;
        }
        if rng.random_ratio(1, 12) && closes_and_trims {
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
