//! The flash tier: a persistent cache on a fast device (the *cache device*)
//! in front of a slower one (the *backing device*) — the job of bcache, Open
//! CAS and dm-cache, in user space, driven by `cairn-policy`'s policies.
//!
//! # Layout
//!
//! The cache device holds a superblock, two checkpoint slots, a journal ring
//! and buckets of slots (`format.rs`, byte diagrams in `docs/formats.md`).
//! A cached block lives in one slot. Slots are filled in order, a bucket at a
//! time (a megabyte by default: the device sees ascending writes, and whole
//! erase blocks rewritten), and a bucket is reused only when nothing in it is
//! live: the reclaimer (`reclaim.rs`) moves the few live blocks out of the
//! emptiest bucket. Which blocks are live is the policy's choice, block by
//! block, exactly as `cairn sim` makes it (the policy's capacity leaves room
//! for reclaiming), so the simulator predicts the hit ratio.
//!
//! # Metadata
//!
//! Every change of what a slot holds is a journal record (`Map`, `Clean`,
//! `Drop`), appended under the journal's lock with the matching change of the
//! slot table (`slots.rs`, 16 bytes of DRAM a slot), and written before the
//! request that caused it is acknowledged (`journal.rs`). A checkpoint of
//! the whole table lets the ring wrap. Recovery (`recover.rs`) loads the
//! newest checkpoint and replays the journal; clean blocks survive a crash as
//! well as a clean stop (warm restart), and dirty blocks are never lost.
//!
//! # The crash rules
//!
//! Two devices fail independently, so the order of their writes is the
//! design:
//!
//! 1. Data is written to its slot before the record naming it; records in
//!    blocks written after the journal was last known durable are checked
//!    against the data's CRC at recovery, and dropped if torn.
//! 2. A slot is rewritten only once every record that made its old contents
//!    dead is durable (a bucket is reopened after a journal flush).
//! 3. Before the backing device is written for a block that the durable
//!    journal may still say is cached *clean*, the record superseding that
//!    copy is made durable (the block is a *hazard* until it is); otherwise
//!    a crash could bring back a stale copy. Dirty copies need nothing:
//!    recovery writes them back, which a crash may do anyway.
//! 4. A block read from the backing device while a write to it there is not
//!    yet flushed is recorded *dirty* when promoted (it turns clean after the
//!    backing flush), so a crash never leaves a clean copy of data the
//!    backing device lost.
//! 5. A dirty block becomes clean only after its write-back was flushed on
//!    the backing device; it is dropped (evicted, or superseded by a write
//!    that went to the backing device) only then. So a FLUSH flushes the
//!    backing device, then settles (appends those records), then makes the
//!    journal durable.
//! 6. A checkpoint is written between two flushes of the cache device: what
//!    it names is durable before it can be.
//!
//! # Modes
//!
//! Write-back (writes to the cache, cleaned later by `clean.rs`, paced
//! toward a dirty-data target), write-through (both, the cache copy recorded
//! dirty until the backing device is flushed), write-around (writes to the
//! backing device, dropping cached copies), pass-through (neither reads nor
//! writes are cached). Leaving write-back cleans first. A cache-device error
//! makes the tier write back what it can and fall back to pass-through.
//!
//! # Parity with the simulator
//!
//! The policy sees what `cairn sim --unit block:SIZE` feeds it: one access
//! per block, in request order, a miss admitted at its lookup (the map holds
//! a *loading* entry until the data is installed), capacity counted in
//! blocks. Reclaiming moves blocks and never asks the policy.
//!
//! Limits: 2^31 − 1 slots; 256 blocks a request chunk; one tier per cache
//! device (claimed by the volume).

pub mod check;
mod clean;
mod cutoff;
mod device;
mod entry;
mod error;
mod fill;
pub mod format;
mod journal;
mod metrics;
pub mod open;
mod options;
mod read;
mod reclaim;
mod recover;
mod shard;
mod slots;
#[cfg(test)]
mod tests;
mod worker;
mod write;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

pub use error::{Setting, TierError};
pub use format::{Geometry, Mode};
pub use metrics::Metrics;
pub use options::{Layout, Options};
pub use recover::Recovered;

use crate::device::{DeviceError, SharedDevice};
use cutoff::Cutoff;
use journal::Journal;
use metrics::Counters;
use shard::Shard;
use slots::{Buckets, Shortage, SlotTable};

/// Most blocks one chunk of a request covers (locks and plans are sized by
/// it; larger requests go in chunks).
pub const CHUNK_BLOCKS: usize = 256;
/// Striped locks serialising writes (and write-backs) of one block.
const STRIPES: usize = 4096;
/// Fewest buckets kept out of the policy's capacity.
const OVERPROVISION_MIN_BUCKETS: u64 = 3;

/// A lock padded to its own cache lines.
#[repr(align(128))]
struct Padded<T>(T);

/// What went wrong inside the tier, by device.
#[derive(Debug)]
pub(super) enum Fault {
    /// The cache device failed: the tier falls back to pass-through.
    Cache(DeviceError),
    /// The backing device failed: the client is told.
    Backing(DeviceError),
    /// No slot could be had (every one is live or waiting): the caller goes
    /// around the cache instead.
    Full,
}

impl From<Fault> for DeviceError {
    fn from(f: Fault) -> Self {
        match f {
            Fault::Cache(e) | Fault::Backing(e) => e,
            Fault::Full => DeviceError::Io {
                op: crate::DeviceOp::Write,
                offset: 0,
                len: 0,
                device: "tier".into(),
                source: std::io::Error::other("no cache slot free"),
            },
        }
    }
}

/// The backing device's flushes: a write that completed when `started` was
/// `e` is durable once `durable` reaches `e + 1`.
struct BackingFlush {
    started: AtomicU64,
    durable: AtomicU64,
    lock: Mutex<()>,
}

impl BackingFlush {
    fn epoch(&self) -> u64 {
        self.started.load(Ordering::Acquire)
    }

    fn is_durable(&self, epoch: u64) -> bool {
        epoch != u64::MAX && self.durable.load(Ordering::Acquire) > epoch
    }

    /// Flushes `dev` unless every write completed up to `epoch` is durable.
    fn flush(&self, dev: &SharedDevice, epoch: u64) -> Result<(), DeviceError> {
        let _one = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if self.is_durable(epoch) {
            return Ok(());
        }
        let n = self.started.fetch_add(1, Ordering::AcqRel) + 1;
        dev.flush()?;
        self.durable.fetch_max(n, Ordering::AcqRel);
        Ok(())
    }
}

const HEALTHY: u8 = 0;
const FAILING: u8 = 1;
const FAILED: u8 = 2;
/// Detached on request: every request passes through, nothing failed.
const DETACHED: u8 = 3;

/// What the background worker is told.
struct Signal {
    stop: Mutex<bool>,
    wake: Condvar,
    /// Clean at full speed (a mode switch, a detach, a close).
    drain: AtomicBool,
    /// When the last client request started, nanoseconds since `started`.
    last_io_ns: AtomicU64,
}

/// The state every thread of a tier shares.
pub(super) struct Inner {
    cache: SharedDevice,
    backing: SharedDevice,
    g: Geometry,
    cache_id: u64,
    /// Bytes per block.
    block: u64,
    shards: Box<[Padded<Mutex<Shard>>]>,
    shard_shift: u32,
    table: SlotTable,
    buckets: Buckets,
    journal: Journal,
    stripes: Box<[Mutex<()>]>,
    cutoff: Cutoff,
    mode: AtomicU8,
    health: AtomicU8,
    fallback: Mutex<()>,
    /// Dirty blocks a fallback could not write back: reads of them fail
    /// until they are rewritten.
    lost: Mutex<hashbrown::HashSet<u64>>,
    /// Why the tier fell back, once it did.
    failure: Mutex<Option<String>>,
    counters: Counters,
    clock: AtomicU32,
    backing_flush: BackingFlush,
    /// The policy's capacity over all shards, blocks.
    capacity_blocks: u64,
    /// Free buckets a client allocation leaves to the reclaimer.
    keep_buckets: usize,
    options: Options,
    signal: Signal,
    /// Written when the tier falls back, so the next open knows the cache's
    /// contents are stale (the cache device may not take the flag itself).
    marker: Option<PathBuf>,
    started: Instant,
}

/// A persistent cache tier: a [`crate::Device`] over a backing device, with
/// its data and metadata on a cache device.
pub struct Tier {
    inner: Arc<Inner>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    recovered: Recovered,
}

impl Inner {
    fn shard(&self, block: u64) -> MutexGuard<'_, Shard> {
        let index = if self.shard_shift >= 64 {
            0
        } else {
            (block.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shard_shift) as usize
        };
        self.shards[index]
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn stamp(&self) -> u32 {
        self.clock.load(Ordering::Relaxed)
    }

    fn mode(&self) -> Mode {
        if self.health.load(Ordering::Acquire) != HEALTHY {
            return Mode::PassThrough;
        }
        Mode::from_code(self.mode.load(Ordering::Acquire)).unwrap_or(Mode::PassThrough)
    }

    fn healthy(&self) -> bool {
        self.health.load(Ordering::Acquire) == HEALTHY
    }

    /// Up to `want` contiguous slots. A client allocation reclaims a bucket
    /// when few are free (first settling what waits for a backing flush:
    /// those blocks hold slots); the reclaimer's own (`reclaiming`) may use
    /// the buckets kept for it. [`Fault::Full`] when nothing frees one
    /// (blocks being evicted by other requests hold the rest).
    fn allocate(&self, want: u32, reclaiming: bool) -> Result<(u32, u32), Fault> {
        let keep = if reclaiming { 0 } else { self.keep_buckets };
        let mut tries = 0u32;
        // Reclaims that freed a bucket which the reclaimer's own moves then
        // took: more than one per bucket means blocks that cannot move yet
        // (being evicted) hold the rest, and this request goes without.
        let mut reclaimed = 0u32;
        loop {
            let point = usize::from(reclaiming);
            match self
                .buckets
                .allocate(point, want, keep, self.journal.durable())
            {
                Ok(run) => return Ok(run),
                Err(Shortage::Durable(seq)) => {
                    self.journal.make_durable(seq).map_err(Fault::Cache)?;
                    strict_assert!(self.journal.durable() >= seq);
                }
                Err(Shortage::Pinned) => std::thread::yield_now(),
                Err(Shortage::Reclaim) if !reclaiming => {
                    if reclaimed < self.buckets.count() && self.reclaim_one()? {
                        reclaimed += 1;
                        continue;
                    }
                    tries += 1;
                    if tries > 8 {
                        return Err(Fault::Full);
                    }
                    if tries == 1 {
                        self.backing_flush
                            .flush(&self.backing, self.backing_flush.epoch())
                            .map_err(Fault::Backing)?;
                        self.settle_written()?;
                    } else {
                        std::thread::yield_now();
                    }
                }
                Err(Shortage::Reclaim) => return Err(Fault::Full),
            }
        }
    }

    /// Locks the stripes of `blocks` (any order, repeats allowed) in
    /// ascending stripe order.
    fn lock_stripes(&self, blocks: impl Iterator<Item = u64>) -> Stripes<'_> {
        let mut set = [0u64; STRIPES / 64];
        for b in blocks {
            let s = stripe_of(b);
            set[s / 64] |= 1 << (s % 64);
        }
        let mut held = Stripes {
            guards: [const { None }; CHUNK_BLOCKS],
            count: 0,
            overflow: Vec::new(),
        };
        for (word_index, &word) in set.iter().enumerate() {
            let mut w = word;
            while w != 0 {
                let bit = w.trailing_zeros() as usize;
                w &= w - 1;
                let guard = self.stripes[word_index * 64 + bit]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if held.count < CHUNK_BLOCKS {
                    held.guards[held.count] = Some(guard);
                    held.count += 1;
                } else {
                    held.overflow.push(guard);
                }
            }
        }
        held
    }

    /// Notes a client request: the clock ticks, the worker sees activity.
    fn tick(&self) {
        self.clock.fetch_add(1, Ordering::Relaxed);
        let now = self.started.elapsed().as_nanos() as u64;
        self.signal.last_io_ns.store(now, Ordering::Relaxed);
    }

    /// FLUSH: the backing device flushed, then what that settles (blocks
    /// written through turn clean, superseded dirty copies are dropped),
    /// then the journal durable — in that order, so that a drop is never
    /// durable before the backing write that superseded it.
    fn flush(&self) -> Result<(), Fault> {
        self.backing_flush
            .flush(&self.backing, self.backing_flush.epoch())
            .map_err(Fault::Backing)?;
        if self.healthy() {
            self.settle_written()?;
            self.journal.make_all_durable().map_err(Fault::Cache)?;
        }
        Ok(())
    }
}

fn stripe_of(block: u64) -> usize {
    (block.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - STRIPES.trailing_zeros())) as usize
}

/// Stripe locks held, released when dropped.
struct Stripes<'a> {
    guards: [Option<MutexGuard<'a, ()>>; CHUNK_BLOCKS],
    count: usize,
    overflow: Vec<MutexGuard<'a, ()>>,
}

impl Tier {
    /// The cache device's geometry.
    pub fn geometry(&self) -> Geometry {
        self.inner.g
    }

    /// The cache device's identity, chosen at format: another format, or
    /// another device, has another (what names the tier in files beside it).
    pub fn cache_id(&self) -> u64 {
        self.inner.cache_id
    }

    /// How many blocks the policy keeps (its capacity over all shards).
    pub fn capacity_blocks(&self) -> u64 {
        self.inner.capacity_blocks
    }

    /// What the last open found (replayed records, dropped torn ones).
    pub fn recovered(&self) -> &Recovered {
        &self.recovered
    }

    /// The mode the tier runs in (pass-through after a fallback).
    pub fn mode(&self) -> Mode {
        self.inner.mode()
    }

    /// Whether the tier fell back to pass-through after cache-device errors.
    pub fn failed(&self) -> bool {
        matches!(self.inner.health.load(Ordering::Acquire), FAILING | FAILED)
    }

    /// Whether the tier was detached ([`Tier::detach`]).
    pub fn detached(&self) -> bool {
        self.inner.health.load(Ordering::Acquire) == DETACHED
    }

    /// The cache-device error that made the tier fall back, if one did.
    pub fn failure(&self) -> Option<String> {
        self.inner
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics()
    }

    /// Changes the mode. Leaving write-back first writes every dirty block
    /// back (new writes already follow the new mode meanwhile).
    pub fn set_mode(&self, mode: Mode) -> Result<(), DeviceError> {
        let inner = &self.inner;
        if !inner.healthy() {
            let why = if self.detached() {
                "the tier is detached".to_owned()
            } else {
                format!(
                    "the tier fell back to pass-through after cache-device errors ({})",
                    self.failure().unwrap_or_default()
                )
            };
            return Err(DeviceError::Io {
                op: crate::DeviceOp::Write,
                offset: 0,
                len: 0,
                device: inner.cache.describe(),
                source: std::io::Error::other(why),
            });
        }
        let was = inner.mode();
        inner.mode.store(mode.code(), Ordering::Release);
        inner.journal.set_mode(mode);
        if was == Mode::WriteBack && mode != Mode::WriteBack {
            self.clean_all()?;
        }
        Ok(())
    }

    /// Writes every dirty block back and flushes the backing device.
    pub fn clean_all(&self) -> Result<(), DeviceError> {
        self.inner.clean_all().map_err(|f| self.inner.handle(f))
    }

    /// Writes every dirty block back, flushes, and records the cache as
    /// detached: the backing device is complete on its own, the tier passes
    /// everything through, and the next open formats the cache afresh.
    pub fn detach(&self) -> Result<(), DeviceError> {
        let inner = &self.inner;
        inner
            .mode
            .store(Mode::PassThrough.code(), Ordering::Release);
        inner.journal.set_mode(Mode::PassThrough);
        self.clean_all()?;
        inner
            .backing_flush
            .flush(&inner.backing, inner.backing_flush.epoch())?;
        self.stop_worker();
        inner.journal.close(&inner.table, true)?;
        inner.health.store(DETACHED, Ordering::Release);
        inner.clear_cached();
        Ok(())
    }

    /// A clean stop: stops the worker, flushes both devices and writes a
    /// checkpoint, so the next open replays nothing and every cached block
    /// (clean and dirty) is still there.
    pub fn close(&self) -> Result<(), DeviceError> {
        self.stop_worker();
        let inner = &self.inner;
        inner.flush().map_err(|f| inner.handle(f))?;
        if inner.healthy() {
            inner.journal.close(&inner.table, false)?;
        }
        Ok(())
    }

    fn stop_worker(&self) {
        let handle = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            *self
                .inner
                .signal
                .stop
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = true;
            self.inner.signal.wake.notify_all();
            let _ = handle.join();
        }
    }

    /// One step of the background worker's work, for tests that run without
    /// it: clean at most `blocks` dirty blocks, reclaim buckets while few
    /// are free, checkpoint if the journal is half used.
    pub fn step(&self, blocks: usize) -> Result<usize, DeviceError> {
        self.inner.step(blocks).map_err(|f| self.inner.handle(f))
    }

    /// Reclaims one bucket (for tests); whether one was.
    pub fn reclaim_one(&self) -> Result<bool, DeviceError> {
        self.inner.reclaim_one().map_err(|f| self.inner.handle(f))
    }

    /// Checks every invariant (the buckets', each shard's, the table against
    /// the maps); for tests, with no request in flight.
    pub fn verify(&self) -> Result<(), String> {
        self.inner.verify()
    }
}

impl Drop for Tier {
    fn drop(&mut self) {
        self.stop_worker();
    }
}
