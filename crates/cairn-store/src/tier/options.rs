//! What a tier is asked to be: its layout (fixed at format) and how it runs
//! (changeable at every open).

use cairn_policy::{AdmissionConfig, PolicyConfig};

use super::format::Mode;

/// The layout a new cache device is formatted with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per cached block: a power of two, 512 B to 64 KiB. Default 4 KiB.
    pub block_size: u32,
    /// Bytes per bucket (filled in order, reclaimed whole): a multiple of the
    /// block size, at least two blocks. Default 1 MiB: an SSD erase block or
    /// a few, so the device sees whole erase blocks rewritten.
    pub bucket_size: u32,
    /// Journal ring blocks; 0 picks a 64th of the slots, 64 to 16,384.
    pub journal_blocks: u32,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            block_size: 4096,
            bucket_size: 1 << 20,
            journal_blocks: 0,
        }
    }
}

/// How a tier runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The cache mode. Default write-back.
    pub mode: Mode,
    /// Replacement policy (any of `cairn-policy`'s, as `cairn sim` runs
    /// them). Default S3-FIFO.
    pub policy: PolicyConfig,
    /// Admission of read misses (promotion: `cairn-policy`'s filters, as
    /// `cairn sim --admission` runs them); writes are always admitted in the
    /// caching modes (the filter still counts them). Default: every miss.
    pub admission: AdmissionConfig,
    /// Promote read misses at all. Off, a read miss is served from the
    /// backing device and nothing enters the cache but writes and what
    /// [`Tier::fill`](super::Tier::fill) puts there (a victim cache: a
    /// level whose only entries are what the level above dropped).
    /// Default on.
    pub promote_reads: bool,
    /// A stream of sequential I/O at least this many bytes long (one request
    /// or several in a row) bypasses the cache from the request that reaches
    /// it (reads are not promoted, writes go to the backing device). 0 = off.
    /// Default 4 MiB (bcache's `sequential_cutoff`).
    pub sequential_cutoff_bytes: u64,
    /// Dirty data the background cleaner aims at, percent of the cache's
    /// capacity: above it, it writes back at a rate that grows with the
    /// excess; below it, it rests (bcache's `writeback_percent`). Default 10.
    pub writeback_percent: u32,
    /// Share of the slots kept out of the policy's capacity so that buckets
    /// can be reclaimed by moving few live blocks (at least 3 buckets).
    /// Default 0.10.
    pub overprovision: f64,
    /// Policy shards (a power of two); 0 = 4 per core, at least 16, fewer
    /// while a shard would hold under 256 blocks. 1 = exactly the
    /// simulator's replacement.
    pub shards: usize,
    /// Run the background worker (cleaner, reclaimer, checkpoints, periodic
    /// journal flush). Off only for tests that drive each step themselves.
    pub background: bool,
    /// Cache-device errors tolerated before the tier falls back to
    /// pass-through (a failed write or flush falls back at once; read errors
    /// of clean blocks are served from the backing device until this many).
    /// Default 8.
    pub error_limit: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            mode: Mode::WriteBack,
            policy: PolicyConfig::default_for("s3fifo")
                .unwrap_or_else(|| PolicyConfig::Lru(cairn_policy::lru::LruConfig::default())),
            admission: AdmissionConfig::default(),
            promote_reads: true,
            sequential_cutoff_bytes: 4 << 20,
            writeback_percent: 10,
            overprovision: 0.10,
            shards: 0,
            background: true,
            error_limit: 8,
        }
    }
}
