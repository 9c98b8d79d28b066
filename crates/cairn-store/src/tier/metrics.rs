//! The tier's counters: relaxed atomics bumped on the I/O path (no lock, no
//! allocation), read as a [`Metrics`] snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a tier's counters. Block counts are in the tier's blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Block reads served from the cache device.
    pub hits: u64,
    /// Block reads served from the backing device.
    pub misses: u64,
    /// Blocks written by clients.
    pub writes: u64,
    /// Client block writes (in the caching modes) the policy already held.
    pub write_hits: u64,
    /// Client block writes (in the caching modes) the policy did not hold.
    pub write_misses: u64,
    /// Blocks promoted into the cache on a read miss.
    pub promotions: u64,
    /// Read misses the admission filter kept out.
    pub promotions_refused: u64,
    /// Promotions given up because a write to the same shard raced them.
    pub promotions_raced: u64,
    /// Clean blocks dropped because the level above took them
    /// ([`Tier::evict`](super::Tier::evict)).
    pub taken_blocks: u64,
    /// Bytes that bypassed the cache (sequential cutoff, pass-through).
    pub bypassed_bytes: u64,
    /// Dirty blocks now (not yet durably on the backing device).
    pub dirty_blocks: u64,
    /// Valid blocks in the cache now.
    pub cached_blocks: u64,
    /// Blocks written back to the backing device (cleaner and evictions).
    pub cleaned_blocks: u64,
    /// Dirty blocks the policy evicted (written back first).
    pub dirty_evictions: u64,
    /// Clean blocks the policy evicted (dropped at once).
    pub clean_evictions: u64,
    /// Live blocks moved out of buckets being reclaimed.
    pub relocated_blocks: u64,
    /// Buckets reclaimed.
    pub reclaimed_buckets: u64,
    /// Blocks written to the cache device's data area (client writes,
    /// promotions and relocations).
    pub cache_block_writes: u64,
    /// Journal block writes, records, checkpoints.
    pub journal_writes: u64,
    /// Journal records appended.
    pub journal_records: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Cache-device errors (I/O errors and blocks failing their CRC).
    pub errors: u64,
    /// The tier fell back to pass-through after cache-device errors.
    pub failed: bool,
    /// DRAM the tier's own metadata takes, bytes: the slot table and the
    /// shards' maps (not the policy's, which `cairn-policy` keeps).
    pub dram_bytes: u64,
}

impl Metrics {
    /// Policy hits over every block access, reads and writes (what `cairn
    /// sim --unit block:SIZE` reports as 1 − miss ratio); 0 with none.
    pub fn access_hit_ratio(&self) -> f64 {
        let all = self.hits + self.misses + self.write_hits + self.write_misses;
        if all == 0 {
            0.0
        } else {
            (self.hits + self.write_hits) as f64 / all as f64
        }
    }

    /// Hits over block reads; 0 with none.
    pub fn hit_ratio(&self) -> f64 {
        let all = self.hits + self.misses;
        if all == 0 {
            0.0
        } else {
            self.hits as f64 / all as f64
        }
    }
}

#[derive(Default)]
pub(super) struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub writes: AtomicU64,
    pub write_hits: AtomicU64,
    pub write_misses: AtomicU64,
    pub promotions: AtomicU64,
    pub promotions_refused: AtomicU64,
    pub promotions_raced: AtomicU64,
    pub taken: AtomicU64,
    pub bypassed_bytes: AtomicU64,
    pub dirty: AtomicU64,
    pub cached: AtomicU64,
    pub cleaned: AtomicU64,
    pub dirty_evictions: AtomicU64,
    pub clean_evictions: AtomicU64,
    pub relocated: AtomicU64,
    pub reclaimed: AtomicU64,
    pub cache_block_writes: AtomicU64,
    pub errors: AtomicU64,
}

impl Counters {
    #[inline]
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub(super) fn sub(counter: &AtomicU64, n: u64) {
        counter.fetch_sub(n, Ordering::Relaxed);
    }

    pub(super) fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
