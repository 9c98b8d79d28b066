//! The file cache's counters: each shard's, bumped on the I/O path
//! (relaxed atomics), and the snapshot
//! [`FileCache::stats`](crate::FileCache::stats) sums them into, with its
//! metrics.

use std::sync::atomic::{AtomicU64, Ordering};

use cairn_policy::FileState;
use cairn_store::stats::{Metric, MetricSink};

use crate::backend::BackendErrorKind;

/// A snapshot of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileCacheStats {
    /// Blocks served from the cache.
    pub hits: u64,
    /// Blocks read from the backend (one read each).
    pub misses: u64,
    /// Blocks served by waiting for another reader's backend read.
    pub coalesced: u64,
    /// Backend calls that failed, by kind: looking a key up
    /// ([`FileCache::open`](crate::FileCache::open)) and block reads (nothing was cached).
    pub backend_errors: BackendErrorCounts,
    /// Bytes served from the cache (hits and coalesced waits), whole blocks.
    pub bytes_from_cache: u64,
    /// Bytes read from the backend.
    pub bytes_from_backend: u64,
    /// Blocks resident now.
    pub resident_blocks: u64,
    /// Blocks the readahead read (or is reading) ahead of any demand.
    pub prefetch_issued: u64,
    /// Of those, blocks a demand access then found (resident or in flight).
    pub prefetch_used: u64,
    /// Of those, blocks evicted before any demand access (wasted reads).
    pub prefetch_wasted: u64,
    /// Blocks the readahead named but did not read: too many reads in flight.
    pub prefetch_dropped: u64,
    /// Bytes of the resident blocks (an object's last block holds only its
    /// remaining bytes).
    pub resident_bytes: u64,
    /// The capacity, bytes.
    pub capacity_bytes: u64,
    /// A file-aware policy's state (`dual`), summed over shards (the preface:
    /// the largest of them); `None` for the other policies.
    pub files: Option<FileState>,
}

/// Failed backend calls by what the client was told.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendErrorCounts {
    /// No such object (the client got `404`).
    pub not_found: u64,
    /// The backend did not answer in time (`504`).
    pub timeout: u64,
    /// Anything else: forbidden, retryable, an I/O error (`403`, `502`).
    pub other: u64,
}

impl BackendErrorCounts {
    /// Every failed call.
    pub fn total(&self) -> u64 {
        self.not_found + self.timeout + self.other
    }
}

impl FileCacheStats {
    /// The counters and levels as named metrics (`cairn stats` prints them,
    /// Prometheus sees them as `cairn_files_<name>`, `_total` added to
    /// counters). Backend errors are left out: they carry a label (`kind`),
    /// which a metric list has no room for.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut metrics = Vec::with_capacity(16);
        let mut m = MetricSink(&mut metrics);
        m.counter("hits", self.hits, "blocks served from the cache");
        m.counter(
            "misses",
            self.misses,
            "blocks read from the backend (one read each)",
        );
        m.counter(
            "coalesced",
            self.coalesced,
            "blocks served by waiting for another reader's backend read of the same block",
        );
        m.counter(
            "cache_bytes",
            self.bytes_from_cache,
            "bytes of the blocks served from the cache (hits and coalesced waits)",
        );
        m.counter(
            "backend_read_bytes",
            self.bytes_from_backend,
            "bytes read from the backend",
        );
        m.gauge("resident_blocks", self.resident_blocks, "blocks cached now");
        m.gauge(
            "resident_bytes",
            self.resident_bytes,
            "bytes of the blocks cached now",
        );
        m.gauge(
            "capacity_bytes",
            self.capacity_bytes,
            "the cache's capacity",
        );
        m.counter(
            "prefetch_issued",
            self.prefetch_issued,
            "blocks the readahead read (or is reading) ahead of any demand",
        );
        m.counter(
            "prefetch_used",
            self.prefetch_used,
            "blocks read ahead that a demand access then found",
        );
        m.counter(
            "prefetch_wasted",
            self.prefetch_wasted,
            "blocks read ahead and evicted before any demand access",
        );
        m.counter(
            "prefetch_dropped",
            self.prefetch_dropped,
            "blocks the readahead named but did not read (too many reads in flight)",
        );
        if let Some(files) = self.files {
            m.gauge(
                "dual_preface_blocks",
                files.preface_blocks,
                "dual: the preface size, blocks (a file's first blocks, kept in the front-part cache)",
            );
            m.gauge(
                "dual_active_files",
                files.active_files,
                "dual: files tracked as active",
            );
        }
        metrics
    }
}

/// A shard's counters, bumped on the I/O path (relaxed) and summed by
/// [`FileCache::stats`](crate::FileCache::stats). A new one is a field
/// here, one in [`FileCacheStats`] summed in `stats`, and a line in
/// [`FileCacheStats::metrics`]: `cairn stats` and Prometheus
/// (`cairn_files_<name>_total`) then show it with nothing else to change.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) hits: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) coalesced: AtomicU64,
    pub(super) errors: ErrorCounters,
    pub(super) bytes_from_cache: AtomicU64,
    pub(super) bytes_from_backend: AtomicU64,
    pub(super) prefetch_issued: AtomicU64,
    pub(super) prefetch_used: AtomicU64,
}

impl Counters {
    /// A block of `len` bytes served from the cache.
    pub(super) fn hit(&self, len: usize) {
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.bytes_from_cache
            .fetch_add(len as u64, Ordering::Relaxed);
    }

    /// A block of `len` bytes served by waiting for another reader's read.
    pub(super) fn coalesced(&self, len: usize) {
        self.coalesced.fetch_add(1, Ordering::Relaxed);
        self.bytes_from_cache
            .fetch_add(len as u64, Ordering::Relaxed);
    }

    /// A block of `len` bytes read from the backend.
    pub(super) fn miss(&self, len: usize) {
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.bytes_from_backend
            .fetch_add(len as u64, Ordering::Relaxed);
    }
}

/// Failed backend calls, by [`BackendErrorCounts`]' kinds.
#[derive(Default)]
pub(super) struct ErrorCounters([AtomicU64; 3]);

impl ErrorCounters {
    #[inline]
    pub(super) fn count(&self, kind: BackendErrorKind) {
        let index = match kind {
            BackendErrorKind::NotFound => 0,
            BackendErrorKind::Timeout => 1,
            BackendErrorKind::Forbidden | BackendErrorKind::Retryable | BackendErrorKind::Other => {
                2
            }
        };
        self.0[index].fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn add_to(&self, counts: &mut BackendErrorCounts) {
        counts.not_found += self.0[0].load(Ordering::Relaxed);
        counts.timeout += self.0[1].load(Ordering::Relaxed);
        counts.other += self.0[2].load(Ordering::Relaxed);
    }
}
